//! The CQL store's hot paths against a real server (Cassandra 5 here, standing in for ScyllaDB;
//! `scripts/services up cassandra`): an ingest batch (dedup claims, appends per tenant, the
//! fenced offset — Paxos rounds all) and an event's life at a low rate as the engine gives it
//! when its lane is idle (the job leased by its ingest batch, then its outcome settled).
//!
//! The server shares this machine's cores, so these figures are round trips to a loaded
//! neighbour, not ScyllaDB's. With no server at `STREAMING_HUB_BENCH_CQL` (default
//! `127.0.0.1:9042`) the benches say so and measure nothing.

mod common;

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use hub_engine::store::conformance::event;
use hub_engine::store::cql::{CqlSettings, CqlStore};
use hub_engine::store::{
    job_id, AttemptRecord, DeliveryStep, DueQuery, Fence, IngestBatch, Lane, Matches, Settled,
    Settlement, Store, UnitId,
};

const TENANTS: usize = 100;

/// A lane of this run's own: another run's hold on a shared one would outlive its process
/// by the hold's length.
fn own_lane() -> Lane {
    1_000 + (uuid::Uuid::now_v7().as_u128() % 1_000_000) as Lane
}

/// A runtime and the store, or `None` (said on stderr) when no server answers.
fn connect() -> Option<(tokio::runtime::Runtime, Arc<dyn Store>)> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let node = std::env::var("STREAMING_HUB_BENCH_CQL").unwrap_or_else(|_| "127.0.0.1:9042".into());
    let settings = CqlSettings {
        nodes: vec![node.clone()],
        keyspace: "hub_bench".into(),
        ..CqlSettings::default()
    };
    match rt.block_on(CqlStore::connect(settings)) {
        Ok(store) => Some((rt, Arc::new(store))),
        Err(e) => {
            eprintln!("cql_store: no CQL server at {node} ({e}); nothing measured");
            None
        }
    }
}

/// A fresh unit (its own topic, so runs never meet), claimed.
fn claimed(rt: &tokio::runtime::Runtime, store: &Arc<dyn Store>) -> (UnitId, Fence) {
    let unit = UnitId::new(
        format!("lerian.streaming.bench{}", uuid::Uuid::now_v7().simple()),
        0,
    );
    let (fence, _) = rt.block_on(store.claim_unit(&unit)).expect("claim");
    (unit, fence)
}

fn batch(size: usize, next: i64, run: &str, lane: Lane) -> IngestBatch {
    let events = (0..size)
        .map(|i| {
            let mut e = event(
                &format!("{run}-t-{}", i % TENANTS),
                "loan_application.approved",
            );
            e.payload = vec![b'x'; 512].into();
            e
        })
        .collect();
    IngestBatch {
        events,
        next_offset: Some(next),
        lane,
        ..Default::default()
    }
}

fn write_batch(c: &mut Criterion) {
    let Some((rt, store)) = connect() else {
        return;
    };
    let (unit, fence) = claimed(&rt, &store);
    let run = uuid::Uuid::now_v7().simple().to_string();
    let mut group = c.benchmark_group("cql_store");
    group.sample_size(20);
    let size = 100usize;
    common::bench_write_batch(
        &mut group,
        &format!("write_batch_{size}_events_{TENANTS}_tenants"),
        (&rt, &store),
        (&unit, fence),
        size,
        |size, next| batch(size, next, &run, 0),
    );
    group.finish();
}

/// The outcome of `job`: delivered at `now`, alone in its step.
fn delivered(job: u128, now: i64) -> DeliveryStep {
    DeliveryStep {
        settle: vec![Settlement {
            job,
            settled: Settled::Delivered(AttemptRecord {
                at_ms: now,
                success: true,
                error_class: None,
                status_code: Some(204),
                detail: String::new(),
                duration_ms: 1,
            }),
        }],
        start: vec![],
        lease_until_ms: now + 120_000,
        now_ms: now,
        recovery_limit: 5,
    }
}

/// One event written with its job leased (the lane held by this process, as an idle lane's
/// is), then its delivery settled: the two store calls an event makes at a low rate.
fn one_event_life(c: &mut Criterion) {
    let Some((rt, store)) = connect() else {
        return;
    };
    let (unit, fence) = claimed(&rt, &store);
    let run = uuid::Uuid::now_v7().simple().to_string();
    let sub = uuid::Uuid::now_v7();
    let lane = own_lane();
    let hold = |store: &Arc<dyn Store>| {
        rt.block_on(store.due_jobs(DueQuery {
            lanes: vec![lane],
            now_ms: 0,
            per_tenant: 1,
            limit: 1,
            rotation: 0,
            skip: Default::default(),
            pass_over: Default::default(),
            rooms: Default::default(),
        }))
        .expect("hold the lane");
    };
    hold(&store);
    let mut group = c.benchmark_group("cql_store");
    group.sample_size(20);
    group.throughput(Throughput::Elements(1));
    let mut next = 0;
    group.bench_function("one_event_leased_at_ingest_then_settled", |b| {
        b.iter(|| {
            next += 1;
            if next % 200 == 0 {
                hold(&store); // a lane renews its hold as it pages
            }
            let mut one = batch(1, next, &run, lane);
            one.matches = vec![Matches(vec![sub])];
            let now = hub_engine::clock::now_ms();
            one.events[0].received_at_ms = now;
            one.lease_until_ms = Some(now + 120_000);
            let job = job_id(one.events[0].id, sub);
            rt.block_on(async {
                let outcome = store
                    .write_batch(&unit, fence, Arc::new(one))
                    .await
                    .expect("write");
                assert!(
                    outcome.jobs_leased,
                    "the lane is held: jobs leased at ingest"
                );
                store
                    .delivery_step(delivered(job, now))
                    .await
                    .expect("settle");
            })
        })
    });
    group.finish();
}

criterion_group!(benches, write_batch, one_event_life);
criterion_main!(benches);
