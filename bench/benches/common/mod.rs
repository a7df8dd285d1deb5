//! What the store benches share: one partition's batch write, timed per batch.

use std::sync::Arc;

use criterion::{measurement::WallTime, BatchSize, BenchmarkGroup, Throughput};
use hub_engine::store::{Fence, IngestBatch, Store, UnitId};

/// Benches `store.write_batch` of `size`-event batches that `batch(size, next_offset)` makes,
/// in `group` under `name`.
pub fn bench_write_batch(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    (rt, store): (&tokio::runtime::Runtime, &Arc<dyn Store>),
    (unit, fence): (&UnitId, Fence),
    size: usize,
    mut batch: impl FnMut(usize, i64) -> IngestBatch,
) {
    group.throughput(Throughput::Elements(size as u64));
    let mut next = 0;
    group.bench_function(name, |b| {
        b.iter_batched(
            || {
                next += size as i64;
                Arc::new(batch(size, next))
            },
            |batch| {
                rt.block_on(store.write_batch(unit, fence, batch))
                    .expect("write")
            },
            BatchSize::SmallInput,
        )
    });
}
