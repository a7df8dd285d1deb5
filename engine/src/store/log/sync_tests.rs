//! Delivery steps answered once written, synced later (issue 17, `committer`): what a step
//! records survives the process at once, is synced within the bound or by the next synced
//! write, and what a machine's crash could take back is only an attempt made again.

use std::future::Future;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::committer::UNSYNCED_AT_MOST;
use super::LogStore;
use crate::store::conformance::event;
use crate::store::conformance_jobs::{attempt, due, step, write_with_jobs};
use crate::store::{DuePage, DueQuery, Jobs, Settled, Settlement, UnitId};

impl LogStore {
    /// Since when frames have waited for a sync, and where the synced ones end.
    fn unsynced(&self) -> (Option<Instant>, u64) {
        self.read(|log| (log.segments.unsynced_since(), log.segments.active_len()))
    }
}

/// A store with one pending job, written (and so synced) by an ingest batch.
async fn one_job(store: &LogStore, lane: u32) -> u128 {
    let unit = UnitId::new("http:lender", 0);
    let ev = event("t-sync", "x.created");
    write_with_jobs(store, &unit, lane, vec![ev], &[Uuid::now_v7()]).await;
    let jobs = due(store, lane, crate::clock::now_ms()).await;
    assert_eq!(jobs.len(), 1);
    jobs[0].id
}

async fn settle(store: &LogStore, job: u128) {
    let now = crate::clock::now_ms();
    let settle = vec![Settlement {
        job,
        settled: Settled::Delivered(attempt(true, now)),
    }];
    store
        .delivery_step(step(settle, vec![], now))
        .await
        .expect("settled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_di_1_a_delivery_step_is_answered_before_its_sync_and_synced_within_the_bound() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LogStore::open(dir.path()).expect("open");
    let job = one_job(&store, 1).await;
    assert!(store.unsynced().0.is_none(), "an ingest batch is synced");
    settle(&store, job).await;
    assert!(
        store.unsynced().0.is_some(),
        "the step was answered before a sync"
    );
    assert!(due(&store, 1, crate::clock::now_ms()).await.is_empty());
    let deadline = Instant::now() + UNSYNCED_AT_MOST * 10;
    while store.unsynced().0.is_some() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        store.unsynced().0.is_none(),
        "synced within the bound though nothing else was written"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_di_1_the_next_synced_write_syncs_the_steps_before_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LogStore::open(dir.path()).expect("open");
    let job = one_job(&store, 2).await;
    settle(&store, job).await;
    assert!(store.unsynced().0.is_some());
    one_job(&store, 3).await;
    assert!(store.unsynced().0.is_none());
}

/// A process that stops (a kill -9 included) loses nothing written; a machine that stops may
/// lose the unsynced tail, and then the job settled there is due again — one more attempt,
/// never a lost job — while the event and its job, synced, are kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_di_1_a_machine_crash_losing_unsynced_steps_brings_their_jobs_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (job, synced_end) = {
        let store = LogStore::open(dir.path()).expect("open");
        let job = one_job(&store, 4).await;
        let (_, synced_end) = store.unsynced();
        settle(&store, job).await;
        assert!(store.unsynced().1 > synced_end, "the step is in the file");
        (job, synced_end)
    };
    // The store closed in order: the step lasted.
    {
        let store = LogStore::open(dir.path()).expect("reopen");
        assert!(due(&store, 4, crate::clock::now_ms()).await.is_empty());
    }
    // As if the machine had stopped before the step's pages reached the disk: they read as
    // the zeros prepared ahead.
    let segment = std::fs::read_dir(dir.path())
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|x| x == "log"))
        .expect("a segment");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .expect("segment");
    let len = file.metadata().expect("len").len();
    let zeros = vec![0; (len - synced_end) as usize];
    file.write_all_at(&zeros, synced_end).expect("zeros");
    drop(file);
    let store = LogStore::open(dir.path()).expect("reopen after the crash");
    let jobs = due(&store, 4, crate::clock::now_ms()).await;
    assert_eq!(
        jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
        vec![job],
        "the job whose settlement was lost is due again"
    );
}

/// A lane appends its own lease step when the log is free (`committer::append_here`), beside ingest
/// batches the commit thread writes and the zeros it prepares ahead outside the lock: over
/// several prepared stretches, a reopened log sees every job, attempt and statistic the
/// running one saw, and nothing waits for a sync past the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_di_1_steps_appended_by_lanes_beside_ingest_writes_last_as_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LogStore::open(dir.path()).expect("open");
    let sub = Uuid::now_v7();
    let unit = UnitId::new("http:lender", 0);
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            for _ in 0..150 {
                let events: Vec<_> = (0..8)
                    .map(|_| {
                        let mut e = event("t-lanes", "x.created");
                        e.payload = vec![b'x'; 2048].into();
                        e
                    })
                    .collect();
                write_with_jobs(&store, &unit, 5, events, &[sub]).await;
            }
        })
    };
    let (mut settled, mut rounds) = (0, 0);
    while !writer.is_finished() || rounds < 3 {
        rounds += 1;
        let now = crate::clock::now_ms();
        let jobs = due(&store, 5, now).await;
        let start: Vec<u128> = jobs.iter().map(|j| j.id).collect();
        let out = store
            .delivery_step(step(vec![], start, now))
            .await
            .expect("leased");
        // Every other job fails once (a rewrite), the rest are delivered (a removal).
        let settle = (out.started.iter())
            .map(|s| Settlement {
                job: s.job.id,
                settled: match s.job.id % 2 {
                    0 => Settled::Delivered(attempt(true, now)),
                    _ => Settled::RetryAt(now + 3_600_000, attempt(false, now)),
                },
            })
            .collect::<Vec<_>>();
        settled += settle.len();
        store
            .delivery_step(step(settle, vec![], now))
            .await
            .expect("settled");
    }
    writer.await.expect("writer");
    assert!(settled > 0);
    assert!(
        store.read(|log| log.appended_here_at.is_some()),
        "lanes appended steps themselves"
    );
    let (bytes, far) = (store.unsynced().1, i64::MAX / 2);
    assert!(bytes > (3 * 256) << 10, "past several prepared stretches");
    let seen = |jobs: Vec<crate::store::JobRecord>| {
        let mut seen: Vec<_> = jobs.iter().map(|j| (j.id, j.attempts, j.starts)).collect();
        seen.sort_unstable();
        seen
    };
    let before = (
        seen(due(&store, 5, far).await),
        store.delivery_stats("t-lanes", sub).await.expect("stats"),
    );
    let deadline = Instant::now() + UNSYNCED_AT_MOST * 10;
    while store.unsynced().0.is_some() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(store.unsynced().0.is_none(), "synced within the bound");
    drop(store);
    let reopened = LogStore::open(dir.path()).expect("reopen");
    let after = (
        seen(due(&reopened, 5, far).await),
        reopened
            .delivery_stats("t-lanes", sub)
            .await
            .expect("stats"),
    );
    assert_eq!(before.0, after.0);
    assert_eq!(before.1.delivered, after.1.delivered);
    assert_eq!(before.1.failed_attempts, after.1.failed_attempts);
}

/// A lease step that finds the log busy (a group being written, a reader) goes to the commit
/// thread and is answered from there: a lane never waits on the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_di_1_a_step_finding_the_log_busy_goes_to_the_commit_thread() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LogStore::open(dir.path()).expect("open");
    let job = one_job(&store, 6).await;
    let (held, release) = std::sync::mpsc::channel::<()>();
    let (locked, is_locked) = std::sync::mpsc::channel::<()>();
    let holder = {
        let shared = store.shared.clone();
        std::thread::spawn(move || {
            let _log = shared.log.lock().expect("lock");
            locked.send(()).expect("locked");
            let _ = release.recv_timeout(Duration::from_secs(5));
        })
    };
    is_locked.recv().expect("the log is held");
    let leasing = tokio::spawn({
        let store = store.clone();
        async move { lease(&store, job).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!leasing.is_finished(), "it waits for the lock's holder");
    held.send(()).expect("release");
    holder.join().expect("holder");
    leasing.await.expect("leased by the commit thread");
    assert!(store.read(|log| log.appended_here_at.is_none()));
    assert!(due(&store, 6, crate::clock::now_ms()).await.is_empty());
}

async fn lease(store: &LogStore, job: u128) {
    let now = crate::clock::now_ms();
    let out = store
        .delivery_step(step(vec![], vec![job], now))
        .await
        .expect("leased");
    assert_eq!(out.started.len(), 1);
}

/// A lease step the lane appended itself, the commit thread asleep with nothing to sync: the
/// thread is woken and syncs it within the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_di_1_a_lease_appended_by_its_lane_is_synced_within_the_bound() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LogStore::open(dir.path()).expect("open");
    let job = one_job(&store, 7).await;
    // Past the bound after the last write: the thread sleeps with no time to come back.
    tokio::time::sleep(UNSYNCED_AT_MOST * 2).await;
    assert!(store.read(|log| log.committer_asleep));
    lease(&store, job).await;
    assert!(
        store.read(|log| log.appended_here_at.is_some()),
        "appended by the lane"
    );
    assert!(store.unsynced().0.is_some(), "answered before a sync");
    let deadline = Instant::now() + UNSYNCED_AT_MOST * 10;
    while store.unsynced().0.is_some() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(store.unsynced().0.is_none(), "synced within the bound");
}

/// On a quiet log an ingest batch is appended and synced by its writer (no hand-off to the
/// commit thread and back); it is answered only once synced, as from the commit thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_in_8_an_ingest_batch_on_a_quiet_log_is_synced_by_its_writer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LogStore::open(dir.path()).expect("open");
    // The first frame of a segment carries its snapshot: the commit thread writes it.
    one_job(&store, 8).await;
    assert!(store.read(|log| log.appended_here_at.is_none()));
    // Past the commit thread's preparation of zeros ahead (no writer appends meanwhile).
    tokio::time::sleep(Duration::from_millis(20)).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while store.read(|log| log.preparing) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(super::committer::QUIET_FOR * 5).await;
    let (_, before) = store.unsynced();
    one_job(&store, 9).await;
    assert!(
        store.read(|log| log.appended_here_at.is_some()),
        "appended by its writer"
    );
    let (unsynced, after) = store.unsynced();
    assert!(after > before, "its frame is in the file");
    assert!(unsynced.is_none(), "and synced before the answer");
}

/// A settle step polled once on a shard, its rider queued, and the step's future to finish.
fn ride_settle(store: &LogStore, job: u128) -> std::pin::Pin<Box<dyn Future<Output = ()> + '_>> {
    let mut settling = Box::pin(settle(store, job));
    let waker = futures::task::noop_waker();
    let polled = settling
        .as_mut()
        .poll(&mut std::task::Context::from_waker(&waker));
    assert!(polled.is_pending(), "a rider waits for a frame to carry it");
    assert_eq!(store.shared.riders.lock().expect("riders").len(), 1);
    settling
}

/// Runs `test` on a shard with a fresh store holding one pending job of `lane` (the store is
/// the test's to drop), then says how many jobs of `lane` a reopened store still has due.
fn on_a_shard_with_one_job<F>(
    lane: u32,
    test: impl FnOnce(LogStore, u128) -> F + Send + 'static,
) -> usize
where
    F: Future<Output = ()>,
{
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_owned();
    crate::runtime::run_on_own_executor(move || async move {
        let store = LogStore::open(&path).expect("open");
        let job = one_job(&store, lane).await;
        test(store, job).await;
        let reopened = LogStore::open(&path).expect("reopen");
        due(&reopened, lane, i64::MAX / 2).await.len()
    })
    .expect("shard")
}

/// On a shard a step of outcomes alone wakes no thread: it waits for the next frame any writer
/// appends — here an ingest batch — and is answered with it; what it settled lasts.
#[test]
fn r_di_1_outcomes_on_a_shard_ride_the_next_frame_a_writer_appends() {
    let due = on_a_shard_with_one_job(11, |store, job| async move {
        let settling = ride_settle(&store, job);
        // The carrier: an ingest batch (appended by its writer or the commit thread).
        one_job(&store, 12).await;
        assert!(store.shared.riders.lock().expect("riders").is_empty());
        settling.await;
    });
    assert_eq!(due, 0, "the settlement lasted");
}

/// With no frame to carry it, a rider is appended by its shard once it waited `RIDE_AT_MOST`.
#[test]
fn r_di_1_a_rider_no_frame_carries_goes_alone_after_its_wait() {
    let due = on_a_shard_with_one_job(13, |store, job| async move {
        let started = Instant::now();
        ride_settle(&store, job).await;
        assert!(started.elapsed() >= crate::store::committer_thread::RIDE_AT_MOST);
    });
    assert_eq!(due, 0, "the settlement lasted");
}

/// A rider still waiting when the store is dropped (its step given up) is written as the
/// store goes, so a graceful stop loses no outcome.
#[test]
fn r_di_1_riders_waiting_when_the_store_goes_are_written() {
    let due = on_a_shard_with_one_job(14, |store, job| async move {
        drop(ride_settle(&store, job));
        drop(store);
    });
    assert_eq!(due, 0, "the settlement lasted");
}

/// A page of due jobs is read on the caller's thread while the log is free, the same page
/// `due_jobs` reads; while a writer holds the log the caller is told to ask `due_jobs`, and
/// never waits for the lock (a shard must not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_di_2_due_jobs_are_paged_at_once_only_while_the_log_is_free() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LogStore::open(dir.path()).expect("open");
    let job = one_job(&store, 7).await;
    let page = |skip: Vec<u128>| {
        store.due_jobs_at_once(&DueQuery {
            lanes: vec![7],
            now_ms: crate::clock::now_ms(),
            per_tenant: 10,
            limit: 10,
            rotation: 0,
            skip: skip.into_iter().collect(),
            pass_over: Default::default(),
            rooms: Default::default(),
        })
    };
    let ids = |page: Option<DuePage>| {
        let page = page.expect("the log is free: read at once");
        page.jobs.iter().map(|j| j.id).collect::<Vec<_>>()
    };
    assert_eq!(ids(page(vec![])), vec![job]);
    assert!(ids(page(vec![job])).is_empty(), "skip holds");
    let log = store.shared.log.lock().expect("a writer holds the log");
    let started = Instant::now();
    assert!(page(vec![]).is_none(), "held: ask due_jobs");
    let waited = started.elapsed();
    drop(log);
    assert!(waited < Duration::from_secs(1), "no wait on the lock");
    assert_eq!(ids(page(vec![])), vec![job]);
}
