//! What an ingest batch pays to write a held partition (issue 17): `Assignment::begin_write`
//! and the guard's drop, once per partition per batch on the shards, a record's worth at a low
//! rate. The guard's end signals a revocation only while one waits; a signal is a `futex`
//! system call whether or not anyone waits.

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use hub_engine::delivery::ownership::{Numbering, Ownership};
use hub_engine::ingest::assignment::Assignment;

fn write_guard(c: &mut Criterion) {
    let topic = "lerian.streaming.lender";
    let assignment = Arc::new(Assignment::new(Arc::new(Ownership::new(
        Numbering::ByPartition,
        2,
    ))));
    assignment.set((0..8).map(|p| (topic.to_owned(), p)).collect());
    c.bench_function("an ingest write's guard, begun and ended", |b| {
        b.iter(|| drop(assignment.begin_write(topic, 3)));
    });
}

criterion_group!(benches, write_guard);
criterion_main!(benches);
