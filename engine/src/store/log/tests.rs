//! The log store against the store conformance suites, and what only a log has: replay after a
//! restart or a torn write, segments dropped with what lives in them carried forward, a full
//! disk.

use std::sync::Arc;
use std::time::Duration;

use hub_core::redb_handle::testing::{fill, Tmpfs};
use uuid::Uuid;

use super::LogStore;
use crate::store::conformance::{event, quarantined};
use crate::store::conformance_jobs::{due, step, write_with_jobs};
use crate::store::{
    AttemptRecord, EventLog, Fence, Forensics, ForensicsFilter, Ingest, IngestBatch, Jobs,
    Retention, Settled, Settlement, Store, StoreOps, UnitId,
};

fn segment_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    files.sort();
    files
}

fn failed_attempt(at_ms: i64) -> AttemptRecord {
    AttemptRecord {
        at_ms,
        success: false,
        error_class: Some("http_status".into()),
        status_code: Some(503),
        detail: String::new(),
        duration_ms: 1,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_op_2_log_store_passes_the_conformance_suite() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Small segments, so the suite also runs across many rolls.
    let store = LogStore::open_with(dir.path(), 16 << 10).expect("open");
    let store: Arc<dyn Store> = Arc::new(store);
    crate::store::conformance::run_all(store.clone(), "log").await;
    crate::store::conformance_jobs::run_all(store, "log", 60).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_op_5_log_store_expires_everything_after_its_window() {
    use crate::store::conformance_retention as retention;
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LogStore::open(dir.path())
        .expect("open")
        .with_retention(retention::short_windows());
    retention::everything_expires_after_its_window(Arc::new(store), "log", 7).await;
}

/// R-IN-7: what was acknowledged is there after a restart — events and `seq`, the unit's
/// offset, jobs (a leased one due again, its start counted), dead letters, statistics, pull
/// positions, quarantine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_in_7_log_store_keeps_everything_across_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (sub, tenant, lane) = (Uuid::now_v7(), "t-reopen", 3);
    let unit = UnitId::new("lerian.streaming.lender", 0);
    let now = crate::clock::now_ms();
    let (leased, buried) = {
        let store = LogStore::open_with(dir.path(), 4 << 10).expect("open");
        let (fence, _) = store.claim_unit(&unit).await.expect("claim");
        let batch = IngestBatch {
            quarantined: vec![quarantined(
                &unit.topic,
                4,
                "malformed_header",
                Some(tenant),
                now,
            )],
            next_offset: Some(7),
            ..Default::default()
        };
        store
            .write_batch(&unit, fence, Arc::new(batch))
            .await
            .expect("write");
        let http = UnitId::new("http:lender", 0);
        let events = (0..20).map(|_| event(tenant, "x.created")).collect();
        write_with_jobs(&store, &http, lane, events, &[sub]).await;
        let jobs = due(&store, lane, now).await;
        assert_eq!(jobs.len(), 20);
        let (leased, buried) = (jobs[0].id, jobs[1].id);
        store
            .delivery_step(step(vec![], vec![leased, buried], now))
            .await
            .expect("leased");
        let dead = Settled::DeadLetter {
            reason: "gave up".into(),
            attempt: Some(failed_attempt(now)),
        };
        let settle = vec![Settlement {
            job: buried,
            settled: dead,
        }];
        store
            .delivery_step(step(settle, vec![], now))
            .await
            .expect("buried");
        assert!(store
            .advance_pull_position(tenant, sub, 0, 5)
            .await
            .expect("pull"));
        (leased, buried)
    };
    let store = LogStore::open_with(dir.path(), 4 << 10).expect("reopen");
    assert_eq!(store.unit_offset(&unit).await.expect("offset"), Some(7));
    let read = store.read_events(tenant, 0, 100).await.expect("read");
    assert_eq!(
        read.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=20).collect::<Vec<_>>()
    );
    let jobs = due(&store, lane, crate::clock::now_ms()).await;
    assert_eq!(jobs.len(), 19, "every job but the buried one");
    let released = jobs
        .iter()
        .find(|j| j.id == leased)
        .expect("the leased job is due again");
    assert_eq!(released.starts, 1, "its lapsed start counts as a recovery");
    let (letters, _) = store
        .dead_letters(tenant, sub, None, 10)
        .await
        .expect("dead");
    assert_eq!(
        letters.iter().map(|d| d.job.id).collect::<Vec<_>>(),
        vec![buried]
    );
    let stats = store.delivery_stats(tenant, sub).await.expect("stats");
    assert_eq!((stats.failed_attempts, stats.dead_letters), (1, 1));
    assert_eq!(store.pull_position(tenant, sub).await.expect("pull"), 5);
    let page = store
        .list_quarantine(&ForensicsFilter::default(), 0, 10)
        .await
        .expect("quarantine");
    assert_eq!(page.items.len(), 1);
    let more = vec![event(tenant, "x.updated")];
    write_with_jobs(&store, &UnitId::new("http:lender", 0), lane, more, &[]).await;
    let next = store.read_events(tenant, 20, 10).await.expect("read on");
    assert_eq!(next[0].seq, 21, "seq goes on where it was");
}

/// One process writes a log: a second open of the same directory is refused, with why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_in_7_a_log_open_in_one_process_is_refused_to_another_opener() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = LogStore::open(dir.path()).expect("open");
    let refused = LogStore::open(dir.path()).expect_err("a second opener");
    assert!(
        refused.to_string().contains("open in another process"),
        "{refused}"
    );
    drop(first);
    LogStore::open(dir.path()).expect("open once the first closed");
}

/// R-IN-7: a crash in the middle of an append leaves a torn frame at the log's end; opening
/// drops it whole and keeps every frame before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_in_7_a_torn_frame_at_the_end_is_dropped_on_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let http = UnitId::new("http:lender", 0);
    {
        let store = LogStore::open(dir.path()).expect("open");
        for _ in 0..3 {
            write_with_jobs(&store, &http, 0, vec![event("t-torn", "x.created")], &[]).await;
        }
    }
    let segment = segment_files(dir.path()).remove(0);
    let whole = std::fs::read(&segment).expect("read");
    let end = super::record::frames(0, &whole).1 as usize;
    assert!(
        whole.len() > end && whole[end..].iter().all(|b| *b == 0),
        "the active segment is prepared ahead with zeros"
    );
    // A frame header that promises more than follows, written over the prepared zeros as a
    // crash mid-write leaves it.
    let mut torn = whole.clone();
    torn[end..end + 14].copy_from_slice(&[200, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9]);
    std::fs::write(&segment, &torn).expect("tear");

    let store = LogStore::open(dir.path()).expect("reopen");
    assert_eq!(
        std::fs::metadata(&segment).expect("meta").len(),
        end as u64,
        "cut back after its last whole frame"
    );
    write_with_jobs(&store, &http, 0, vec![event("t-torn", "x.created")], &[]).await;
    drop(store);
    let store = LogStore::open(dir.path()).expect("reopen again");
    let read = store.read_events("t-torn", 0, 10).await.expect("read");
    assert_eq!(
        read.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
}

/// R-OP-5: once every event of the oldest segments expired, those segments go; the jobs,
/// dead letters and quarantine records that still live in them are written again first, and
/// all of it (and `seq`) is there after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_op_5_spent_segments_are_dropped_and_what_lives_in_them_is_carried_forward() {
    let dir = tempfile::tempdir().expect("tempdir");
    let retention = Retention {
        events_s: 1,
        dedup_s: 1,
        forensics_s: 3_600,
    };
    let (sub, tenant, lane) = (Uuid::now_v7(), "t-spent", 2);
    let http = UnitId::new("http:lender", 0);
    let kafka = UnitId::new("lerian.streaming.lender", 0);
    let now = crate::clock::now_ms();
    {
        let store = LogStore::open_with(dir.path(), 512)
            .expect("open")
            .with_retention(retention);
        for _ in 0..10 {
            let mut e = event(tenant, "x.created");
            e.received_at_ms = now;
            write_with_jobs(&store, &http, lane, vec![e], &[sub]).await;
        }
        let (fence, _) = store.claim_unit(&kafka).await.expect("claim");
        let batch = IngestBatch {
            quarantined: vec![quarantined(&kafka.topic, 1, "malformed_header", None, now)],
            next_offset: Some(2),
            ..Default::default()
        };
        store
            .write_batch(&kafka, fence, Arc::new(batch))
            .await
            .expect("quarantine");
        let jobs = due(&store, lane, now).await;
        store
            .delivery_step(step(vec![], vec![jobs[0].id], now))
            .await
            .expect("lease");
        let dead = Settled::DeadLetter {
            reason: "gave up".into(),
            attempt: None,
        };
        let settle = vec![Settlement {
            job: jobs[0].id,
            settled: dead,
        }];
        // Buried later than the events arrived: young when they expire.
        store
            .delivery_step(step(settle, vec![], now + 60_000))
            .await
            .expect("bury");
        let before = segment_files(dir.path()).len();
        assert!(before > 3, "the writes spread over segments ({before})");

        tokio::time::sleep(Duration::from_millis(1_100)).await;
        let expired = store.expire(crate::clock::now_ms()).await.expect("expire");
        assert_eq!(expired.events, 10);
        // The pass that carried things forward lands first; the files go after it.
        store.expire(crate::clock::now_ms()).await.expect("again");
        let after = segment_files(dir.path()).len();
        assert!(after <= 2, "spent segments removed: {before} -> {after}");
    }
    let store = LogStore::open_with(dir.path(), 512).expect("reopen");
    assert!(store
        .read_events(tenant, 0, 100)
        .await
        .expect("read")
        .is_empty());
    assert_eq!(
        due(&store, lane, crate::clock::now_ms()).await.len(),
        9,
        "jobs kept"
    );
    let (letters, _) = store
        .dead_letters(tenant, sub, None, 10)
        .await
        .expect("dead");
    assert_eq!(letters.len(), 1, "the dead letter kept");
    let page = store
        .list_quarantine(&ForensicsFilter::default(), 0, 10)
        .await
        .expect("quarantine");
    assert_eq!(page.items.len(), 1, "the young quarantine record kept");
    assert_eq!(store.unit_offset(&kafka).await.expect("offset"), Some(2));
    let mut e = event(tenant, "x.updated");
    e.received_at_ms = crate::clock::now_ms();
    write_with_jobs(&store, &http, lane, vec![e], &[]).await;
    let read = store.read_events(tenant, 0, 10).await.expect("read");
    assert_eq!(read[0].seq, 11, "seq goes on after its events are gone");
}

async fn write_big(store: &LogStore, unit: &UnitId, fence: Fence, n: i64) -> Result<(), String> {
    crate::store::conformance::write_big_event(store, unit, fence, n).await
}

/// R-IN-7 on a full disk: a write that finds no room fails whole and says why, readiness hears
/// of it, and once room is freed writes resume with every acknowledged one kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_in_7_log_store_on_a_full_disk_fails_writes_whole_and_resumes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _tmpfs = Tmpfs::mount(dir.path(), 16);
    let log_dir = dir.path().join("log");
    let store = LogStore::open_with(&log_dir, 1 << 20).expect("open");
    let unit = UnitId::new("lerian.streaming.full", 0);
    let (fence, _) = store.claim_unit(&unit).await.expect("claim");
    write_big(&store, &unit, fence, 0)
        .await
        .expect("room at first");
    fill(dir.path(), 256 << 10).expect("filled");
    let mut acknowledged = 1;
    let failure = loop {
        match write_big(&store, &unit, fence, acknowledged).await {
            Ok(()) => acknowledged += 1,
            Err(e) => break e,
        }
        assert!(acknowledged < 1000, "the disk never filled");
    };
    assert!(failure.contains("No space left"), "says why: {failure}");
    assert!(store
        .write_failure()
        .is_some_and(|f| f.contains("No space left")));
    std::fs::remove_file(dir.path().join("filler")).expect("space freed");
    write_big(&store, &unit, fence, acknowledged)
        .await
        .expect("resumed");
    assert_eq!(store.write_failure(), None, "readiness is clear again");
    drop(store);
    let store = LogStore::open_with(&log_dir, 1 << 20).expect("reopen");
    let seqs: Vec<u64> = store
        .read_events("t-full", 0, 1000)
        .await
        .expect("read")
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(seqs, (1..=acknowledged as u64 + 1).collect::<Vec<_>>());
    assert_eq!(
        store.unit_offset(&unit).await.expect("offset"),
        Some(acknowledged + 1)
    );
}

/// A step's leased jobs come back in the order they were asked for, each with its own event,
/// though the events are read in runs by place: across segments, with events far apart, and
/// one record longer than a run's span.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_di_5_a_steps_events_come_back_in_the_order_leased_however_they_lie() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = LogStore::open_with(dir.path(), 64 << 10).expect("open");
    let (sub, lane) = (Uuid::now_v7(), 3);
    let unit = UnitId::new("http:lender", 0);
    let mut sizes = std::collections::HashMap::new();
    for n in 0..40usize {
        let mut e = event(&format!("t-order-{}", n % 3), "x.created");
        // Mostly small, now and then large (records far apart), once past a read's span.
        let size = match n {
            17 => 300 << 10,
            n if n % 7 == 0 => 20 << 10,
            _ => 100 + n,
        };
        e.payload = vec![b'a' + (n % 26) as u8; size].into();
        sizes.insert(e.id, size);
        write_with_jobs(&store, &unit, lane, vec![e], &[sub]).await;
    }
    assert!(
        segment_files(dir.path()).len() > 2,
        "the events span segments"
    );
    let now = crate::clock::now_ms();
    let jobs = due(&store, lane, now).await;
    assert_eq!(jobs.len(), 40);
    assert_eq!(sizes.values().filter(|&&s| s == 20 << 10).count(), 6);
    // Asked for out of place order (odd ones first, newest first), passing over the 20 KiB
    // events, so some runs end at a wide gap.
    let wanted: Vec<u128> = (jobs.iter())
        .filter(|j| sizes[&j.event_id] != 20 << 10)
        .map(|j| j.id)
        .collect();
    let mut asked: Vec<u128> = wanted.iter().rev().step_by(2).copied().collect();
    asked.extend(wanted.iter().step_by(2));
    let out = store
        .delivery_step(step(vec![], asked.clone(), now))
        .await
        .expect("leased");
    let started: Vec<u128> = out.started.iter().map(|s| s.job.id).collect();
    assert_eq!(started, asked);
    for s in &out.started {
        assert_eq!(s.event.event.id, s.job.event_id);
        assert_eq!(*s.event.event.tenant, *s.job.tenant);
        assert_eq!(s.event.seq, s.job.event_seq);
    }
    let big = out
        .started
        .iter()
        .filter(|s| s.event.event.payload.len() == 300 << 10);
    assert_eq!(big.count(), 1);
}
