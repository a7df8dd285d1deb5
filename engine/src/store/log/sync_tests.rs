//! Delivery steps answered once written, synced later (issue 17, `committer`): what a step
//! records survives the process at once, is synced within the bound or by the next synced
//! write, and what a machine's crash could take back is only an attempt made again.

use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::committer::UNSYNCED_AT_MOST;
use super::LogStore;
use crate::store::conformance::event;
use crate::store::conformance_jobs::{attempt, due, step, write_with_jobs};
use crate::store::{Jobs, Settled, Settlement, UnitId};

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
