//! Heap allocations per webhook attempt made on a shard (issue 17: the allocator was ~8 % of
//! the hub's cycles under a backlog, and each allocation is also a free). Sends `ATTEMPTS`
//! attempts on the shard's own client to a loopback receiver answering 204, one at a time and
//! eight at once, and prints what the shard's thread allocated per attempt: the request, its
//! headers and signature, the connection's turn, the answer and its judgement. The receiver
//! runs on tokio threads and is not counted. A count, not a timing: it moves only when the
//! code does.
//!
//! `cargo run --release -p hub-bench --example attempt_allocations`

#![allow(unsafe_code)] // the counting allocator below

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::Write as _;
use std::time::Duration;

use bytes::Bytes;
use hub_core::sink::webhook::AttemptFields;
use hub_engine::delivery::shard_webhook::{fixture, ShardWebhooks};
use hub_engine::runtime::spawn_shards;

#[path = "../benches/common/loopback.rs"]
mod loopback;

const ATTEMPTS: u64 = 20_000;

thread_local! {
    /// Allocations (and reallocations) this thread made. `const`-initialised and without a
    /// destructor, so the allocator may touch it at any time, thread exit included.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

/// The system allocator, counting each thread's allocations.
struct Counting;

fn count() {
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

// SAFETY: every call is passed on to `System` unchanged; the count touches only a thread-local
// `Cell` that never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn main() {
    let mut out = std::io::stdout();
    // The headers alone (ids, attributes, length, signatures), on this thread: as the shards
    // make them (fields written as lines into a buffer a connection keeps), then as a map (the
    // tokio client's).
    let keys = fixture::keys();
    let a = fixture::attempt(
        "http://127.0.0.1:1/hook",
        Bytes::from(vec![b'x'; 512]),
        Duration::from_secs(5),
    );
    let mut lines = Vec::with_capacity(2048);
    let before = allocations();
    let fields = AttemptFields::of(&a, &keys, uuid::Uuid::now_v7());
    if let Ok(fields) = &fields {
        fields.write_lines(&mut lines);
    }
    let made = allocations() - before;
    assert!(fields.is_ok(), "{fields:?}");
    let _ = writeln!(out, "an attempt's headers, as lines: {made} allocations");
    let before = allocations();
    let headers = hub_core::sink::webhook::attempt_headers(&a, &keys, uuid::Uuid::now_v7());
    let made = allocations() - before;
    assert!(headers.is_ok(), "{headers:?}");
    let _ = writeln!(out, "an attempt's headers, as a map: {made} allocations");
    let loopback = loopback::start();
    let (client, bridge, endpoint) = (&loopback.client, &loopback.bridge, &loopback.endpoint);
    let config = &loopback.one_shard;
    for at_once in [1u64, 8] {
        let (client, bridge, endpoint) = (client.clone(), bridge.clone(), endpoint.clone());
        let counted = spawn_shards(config, move |_| {
            let webhooks = ShardWebhooks::new(client.clone(), bridge.clone());
            let endpoint = endpoint.clone();
            async move {
                let keys = fixture::keys();
                let body = Bytes::from(vec![b'x'; 512]);
                let send = |n: u64| {
                    let round: futures::stream::FuturesUnordered<_> = (0..n)
                        .map(|_| async {
                            let a =
                                fixture::attempt(&endpoint, body.clone(), Duration::from_secs(5));
                            webhooks.send(&a, &keys).await
                        })
                        .collect();
                    futures::StreamExt::collect::<Vec<_>>(round)
                };
                // The first round opens the connections; the count starts after it.
                send(at_once).await;
                let before = allocations();
                for _ in 0..ATTEMPTS / at_once {
                    let outcomes = send(at_once).await;
                    assert!(outcomes.iter().all(|o| o.success), "{outcomes:?}");
                }
                allocations() - before
            }
        })
        .expect("one shard");
        let total = counted.into_iter().next().unwrap_or(0);
        let _ = writeln!(
            out,
            "{at_once} at once: {:.1} allocations per attempt on the shard ({total} over {ATTEMPTS})",
            total as f64 / ATTEMPTS as f64
        );
    }
}
