//! The embedded store's batch write: one partition's batch of new events over many tenants, as
//! ingest hands it over (dedup marks, seqs, inbox rows, offset, one fsynced transaction).
//! Timed per batch; throughput in events.
//!
//! And an event's whole life in the store at a low rate (issue 17), where every store call is
//! its own transaction: the event written with one job, the job leased, its outcome recorded —
//! three commits per event on redb. On the log, the life the engine gives an event when its lane
//! is idle: the job leased by its ingest batch, and its outcome riding the next event's write —
//! one commit per event.
//!
//! Each on both embedded formats: the append-only log (the default) and redb.

mod common;

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use hub_engine::store::choice::{open_embedded, EmbeddedFormat};
use hub_engine::store::conformance::event;
use hub_engine::store::{
    job_id, AttemptRecord, DeliveryStep, DueQuery, Fence, IngestBatch, Matches, Settled,
    Settlement, Store, UnitId,
};

const TENANTS: usize = 100;

fn batch(size: usize, next: i64) -> IngestBatch {
    let events = (0..size)
        .map(|i| {
            let mut e = event(&format!("t-{}", i % TENANTS), "loan_application.approved");
            e.payload = vec![b'x'; 512].into();
            e
        })
        .collect();
    IngestBatch {
        events,
        quarantined: vec![],
        next_offset: Some(next),
        ..Default::default()
    }
}

const FORMATS: [(EmbeddedFormat, &str); 2] =
    [(EmbeddedFormat::Log, "log"), (EmbeddedFormat::Redb, "redb")];

/// A runtime, a fresh store of `format` in a temporary directory (kept alive by the caller)
/// and a claimed unit to write to.
fn claimed_store(
    format: EmbeddedFormat,
) -> (
    tokio::runtime::Runtime,
    tempfile::TempDir,
    Arc<dyn Store>,
    UnitId,
    Fence,
) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_embedded(dir.path(), Some(format), Default::default()).expect("open");
    let unit = UnitId::new("lerian.streaming.bench", 0);
    let (fence, _) = rt.block_on(store.claim_unit(&unit)).expect("claim");
    (rt, dir, store, unit, fence)
}

fn embedded_write(c: &mut Criterion) {
    for (format, name) in FORMATS {
        write_batches(c, format, name);
    }
}

fn write_batches(c: &mut Criterion, format: EmbeddedFormat, name: &str) {
    let (rt, _dir, store, unit, fence) = claimed_store(format);
    let mut group = c.benchmark_group(format!("embedded_store_{name}"));
    for size in [100usize, 1000] {
        common::bench_write_batch(
            &mut group,
            &format!("write_batch_{size}_events_{TENANTS}_tenants"),
            (&rt, &store),
            (&unit, fence),
            size,
            batch,
        );
    }
    group.finish();
}

/// redb's life takes three commits; the log's takes one (on the log, a step of outcomes alone
/// would wait `RIDE_AT_MOST` for a write to ride, so the three-commit pattern is not its path).
fn delivery_life(c: &mut Criterion) {
    one_event_life(c, EmbeddedFormat::Redb, "redb");
    one_event_life_leased_at_ingest(c);
}

/// A batch of one event matching `sub`, with its job's id and the event's receipt time.
fn one_event(next: i64, sub: uuid::Uuid) -> (IngestBatch, u128, i64) {
    let mut batch = batch(1, next);
    batch.matches = vec![Matches(vec![sub])];
    let job = job_id(batch.events[0].id, sub);
    let now = batch.events[0].received_at_ms;
    (batch, job, now)
}

/// A settlement of `job`, delivered at `now`, alone in its step.
fn delivered_step(job: u128, now: i64) -> DeliveryStep {
    let delivered = Settled::Delivered(AttemptRecord {
        at_ms: now,
        success: true,
        error_class: None,
        status_code: Some(204),
        detail: String::new(),
        duration_ms: 1,
    });
    DeliveryStep {
        settle: vec![Settlement {
            job,
            settled: delivered,
        }],
        start: vec![],
        lease_until_ms: now + 120_000,
        now_ms: now,
        recovery_limit: 5,
    }
}

/// The log store's path at a low rate: each event is written with its job already leased
/// (`IngestBatch::lease_until_ms`), and the previous event's outcome, a step with no lease,
/// rides the same group (queued first, it waits for the next write that may not wait).
fn one_event_life_leased_at_ingest(c: &mut Criterion) {
    let (rt, _dir, store, unit, fence) = claimed_store(EmbeddedFormat::Log);
    assert!(store.leases_at_ingest(), "the log leases at ingest");
    let sub = uuid::Uuid::now_v7();
    let mut next = 0;
    let mut previous: Option<(u128, i64)> = None;
    let mut group = c.benchmark_group("embedded_store_log");
    group.throughput(Throughput::Elements(1));
    group.bench_function("one_event_leased_at_ingest_its_outcome_riding", |b| {
        b.iter(|| {
            next += 1;
            let (mut batch, job, now) = one_event(next, sub);
            batch.lease_until_ms = Some(now + 120_000);
            let settle = previous.replace((job, now));
            rt.block_on(async {
                let settled = async {
                    if let Some((job, at)) = settle {
                        store
                            .delivery_step(delivered_step(job, at))
                            .await
                            .expect("settle");
                    }
                };
                let written = async {
                    store
                        .write_batch(&unit, fence, Arc::new(batch))
                        .await
                        .expect("write")
                };
                tokio::join!(settled, written);
            })
        })
    });
    group.finish();
}

/// One event through the store alone: write (with one job), lease, settle delivered.
fn one_event_life(c: &mut Criterion, format: EmbeddedFormat, name: &str) {
    let (rt, _dir, store, unit, fence) = claimed_store(format);
    let sub = uuid::Uuid::now_v7();
    let mut next = 0;
    let mut group = c.benchmark_group(format!("embedded_store_{name}"));
    group.throughput(Throughput::Elements(1));
    group.bench_function("one_event_written_leased_and_settled", |b| {
        b.iter(|| {
            next += 1;
            let (batch, job, now) = one_event(next, sub);
            rt.block_on(async {
                store
                    .write_batch(&unit, fence, Arc::new(batch))
                    .await
                    .expect("write");
                let step = |settle, start| DeliveryStep {
                    settle,
                    start,
                    lease_until_ms: now + 120_000,
                    now_ms: now,
                    recovery_limit: 5,
                };
                store
                    .delivery_step(step(vec![], vec![job]))
                    .await
                    .expect("lease");
                store
                    .delivery_step(delivered_step(job, now))
                    .await
                    .expect("settle");
            })
        })
    });
    group.finish();
}

/// 100,000 events over 100 tenants with one pending job each (lane 0), written as ingest does,
/// 1,000 a batch.
const BACKLOG: usize = 100_000;

fn backlog(format: EmbeddedFormat) -> (tokio::runtime::Runtime, tempfile::TempDir, Arc<dyn Store>) {
    let (rt, dir, store, unit, fence) = claimed_store(format);
    let sub = uuid::Uuid::now_v7();
    for n in 0..BACKLOG / 1000 {
        let mut batch = batch(1000, (n as i64 + 1) * 1000);
        batch.matches = vec![Matches(vec![sub]); 1000];
        rt.block_on(store.write_batch(&unit, fence, Arc::new(batch)))
            .expect("write");
    }
    (rt, dir, store)
}

/// A lane's page of due jobs from the backlog: at most 128 of a queue, 1,024 in all, as a lane
/// with an empty memory asks (R-DI-2).
fn page_due(c: &mut Criterion) {
    for (format, name) in FORMATS {
        let (rt, _dir, store) = backlog(format);
        let mut group = c.benchmark_group(format!("embedded_store_{name}"));
        group.throughput(Throughput::Elements(1024));
        let mut rotation = 0;
        group.bench_function("page_1024_due_jobs_of_100k", |b| {
            b.iter(|| {
                rotation += 1;
                let skip = Default::default();
                let page = rt.block_on(store.due_jobs(DueQuery {
                    lanes: vec![0],
                    now_ms: i64::MAX,
                    per_tenant: 128,
                    limit: 1024,
                    rotation,
                    skip,
                    pass_over: Default::default(),
                    rooms: Default::default(),
                }));
                assert_eq!(page.expect("page").jobs.len(), 1024);
            })
        });
        group.finish();
    }
}

/// Opening the log store: replaying the backlog into the indexes (issue 17: the log keeps no
/// checkpoint of its indexes, so a start replays every segment).
fn log_open(c: &mut Criterion) {
    // The writer closed first: a log is opened by one process at a time.
    let dir = backlog(EmbeddedFormat::Log).1;
    let mut group = c.benchmark_group("embedded_store_log");
    group.sample_size(10);
    group.throughput(Throughput::Elements(BACKLOG as u64));
    group.bench_function("open_100k_events_with_pending_jobs", |b| {
        b.iter(|| {
            let store = open_embedded(dir.path(), Some(EmbeddedFormat::Log), Default::default())
                .expect("open");
            drop(store);
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = embedded_write, delivery_life, page_due, log_open
}
criterion_main!(benches);
