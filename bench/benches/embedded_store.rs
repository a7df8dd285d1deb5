//! The embedded store's batch write: one partition's batch of new events over many tenants, as
//! ingest hands it over (dedup marks, seqs, inbox rows, offset, one fsynced transaction).
//! Timed per batch; throughput in events.

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use hub_engine::store::conformance::event;
use hub_engine::store::embedded::EmbeddedStore;
use hub_engine::store::{IngestBatch, Store, UnitId};

const TENANTS: usize = 100;

fn batch(size: usize, next: i64) -> IngestBatch {
    let events = (0..size)
        .map(|i| {
            let mut e = event(&format!("t-{}", i % TENANTS), "loan_application.approved");
            e.payload = vec![b'x'; 512];
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

fn embedded_write(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let store = EmbeddedStore::open(&dir.path().join("hub.redb")).expect("open");
    let unit = UnitId::new("lerian.streaming.bench", 0);
    let (fence, _) = rt.block_on(store.claim_unit(&unit)).expect("claim");
    let mut group = c.benchmark_group("embedded_store");
    for size in [100usize, 1000] {
        group.throughput(Throughput::Elements(size as u64));
        let mut next = 0;
        group.bench_function(
            format!("write_batch_{size}_events_{TENANTS}_tenants"),
            |b| {
                b.iter_batched(
                    || {
                        next += size as i64;
                        Arc::new(batch(size, next))
                    },
                    |batch| {
                        rt.block_on(store.write_batch(&unit, fence, batch))
                            .expect("write")
                    },
                    BatchSize::SmallInput,
                )
            },
        );
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = embedded_write
}
criterion_main!(benches);
