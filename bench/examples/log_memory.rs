//! The embedded log store's memory per pending job (issue 17, aim: a million pending jobs in
//! ≤ 300 MiB of hub RSS): writes `EVENTS` events over 100 tenants with one job each, then
//! reopens the store (a replay) and prints the process's resident memory at each step.
//!
//! `cargo run --release -p hub-bench --example log_memory [events]`

use std::sync::Arc;

use hub_engine::store::choice::{open_embedded, EmbeddedFormat};
use hub_engine::store::conformance::event;
use std::io::Write as _;

use hub_engine::store::{IngestBatch, Matches, UnitId};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const TENANTS: usize = 100;
const BATCH: usize = 1000;

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

fn main() {
    // The hub's own allocator settings (no huge pages, a short purge delay), or the figures
    // are the allocator's, not the store's.
    hub_engine::runtime::allocator::tune();
    let events: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let base = rss_mib();
    let store =
        open_embedded(dir.path(), Some(EmbeddedFormat::Log), Default::default()).expect("open");
    let unit = UnitId::new("lerian.streaming.memory", 0);
    let (fence, _) = rt.block_on(store.claim_unit(&unit)).expect("claim");
    let sub = uuid::Uuid::now_v7();
    for n in 0..events / BATCH {
        let batch = IngestBatch {
            events: (0..BATCH)
                .map(|i| {
                    let mut e = event(&format!("t-{}", i % TENANTS), "loan.approved");
                    e.payload = vec![b'x'; 256].into();
                    e
                })
                .collect(),
            matches: vec![Matches(vec![sub]); BATCH],
            next_offset: Some(((n + 1) * BATCH) as i64),
            ..Default::default()
        };
        rt.block_on(store.write_batch(&unit, fence, Arc::new(batch)))
            .expect("write");
    }
    let written = rss_mib();
    drop(store);
    let closed = rss_mib();
    let store =
        open_embedded(dir.path(), Some(EmbeddedFormat::Log), Default::default()).expect("reopen");
    let reopened = rss_mib();
    let per_job = |mib: f64, from: f64| (mib - from) * 1024.0 * 1024.0 / events as f64;
    let report = format!(
        "events with one pending job each: {events}\n\
         RSS before: {base:.1} MiB\n\
         after writing: {written:.1} MiB ({:.0} B per pending job)\n\
         after a reopen (replay): {reopened:.1} MiB ({:.0} B per pending job; {closed:.1} MiB closed)\n",
        per_job(written, base),
        per_job(reopened, closed)
    );
    let _ = std::io::stdout().write_all(report.as_bytes());
    drop(store);
}
