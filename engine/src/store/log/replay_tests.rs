//! The log store's central invariant, checked on random histories: what a reader sees after a
//! restart (the indexes rebuilt by replaying the segments) is what it saw before, however many
//! segments rolled, expired and were dropped with their content carried forward.

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use uuid::Uuid;

use super::LogStore;
use crate::store::conformance::{event, quarantined};
use crate::store::conformance_jobs::step;
use crate::store::{
    AttemptRecord, DueQuery, EventLog, Fence, ForensicsFilter, Ingest, IngestBatch, Jobs, Matches,
    Retention, Settled, Settlement, Store, StoreOps, UnitId,
};

const TENANTS: [&str; 3] = ["t-a", "t-b", "t-c"];
const LANE: u32 = 1;
/// Far enough ahead that every job is due.
const FAR: i64 = i64::MAX / 2;

/// Everything a reader can see, in a comparable form.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    events: BTreeMap<String, Vec<(u64, Uuid)>>,
    /// `(job, event seq, attempts, starts)`.
    jobs: Vec<(u128, u64, u32, u32)>,
    dead: Vec<(u128, String)>,
    /// Totals, then the recent outcomes (success or not, oldest first) and the streak.
    stats: Vec<(
        u64,
        u64,
        u64,
        Vec<bool>,
        crate::delivery::autodisable::Streak,
    )>,
    pulls: Vec<u64>,
    offset: Option<i64>,
    quarantined: Vec<i64>,
}

async fn seen(store: &dyn Store, subs: &[Uuid], unit: &UnitId) -> Seen {
    let mut events = BTreeMap::new();
    for tenant in TENANTS {
        let read = store
            .read_events(tenant, 0, usize::MAX)
            .await
            .expect("read");
        let read = read.iter().map(|e| (e.seq, e.event.id)).collect();
        events.insert(tenant.to_owned(), read);
    }
    let due = store
        .due_jobs(DueQuery {
            lanes: vec![LANE],
            now_ms: FAR,
            per_tenant: usize::MAX,
            limit: usize::MAX,
            rotation: 0,
            skip: Default::default(),
            pass_over: Default::default(),
            rooms: Default::default(),
        })
        .await
        .expect("due")
        .jobs;
    let mut jobs: Vec<_> = (due.iter())
        .map(|j| (j.id, j.event_seq, j.attempts, j.starts))
        .collect();
    jobs.sort_unstable();
    let (mut dead, mut stats, mut pulls) = (Vec::new(), Vec::new(), Vec::new());
    for tenant in TENANTS {
        for sub in subs {
            let (letters, _) = (store.dead_letters(tenant, *sub, None, usize::MAX))
                .await
                .expect("dead letters");
            dead.extend(letters.into_iter().map(|d| (d.job.id, d.reason)));
            let s = store.delivery_stats(tenant, *sub).await.expect("stats");
            let recent = s.recent.iter().map(|a| a.success).collect();
            stats.push((
                s.delivered,
                s.failed_attempts,
                s.dead_letters,
                recent,
                s.streak,
            ));
            pulls.push(store.pull_position(tenant, *sub).await.expect("pull"));
        }
    }
    let quarantine = (store.list_quarantine(&ForensicsFilter::default(), 0, usize::MAX))
        .await
        .expect("quarantine");
    Seen {
        events,
        jobs,
        dead,
        stats,
        pulls,
        offset: store.unit_offset(unit).await.expect("offset"),
        quarantined: quarantine.items.iter().map(|q| q.offset).collect(),
    }
}

fn attempt(success: bool) -> AttemptRecord {
    AttemptRecord {
        at_ms: 0,
        success,
        error_class: (!success).then(|| "http_status".into()),
        status_code: Some(if success { 204 } else { 503 }),
        detail: "replay test".into(),
        duration_ms: 1,
    }
}

/// One random step of a history at time `now`.
async fn act(store: &LogStore, rng: &mut StdRng, subs: &[Uuid], unit: &UnitId, now: &mut i64) {
    *now += 50;
    match rng.gen_range(0..10) {
        0..=3 => {
            let events: Vec<_> = (0..rng.gen_range(1..6))
                .map(|_| {
                    let mut e = event(TENANTS[rng.gen_range(0..3)], "x.created");
                    e.received_at_ms = *now;
                    e
                })
                .collect();
            let matches = (events.iter())
                .map(|_| Matches(subs[..rng.gen_range(0..=subs.len())].to_vec()))
                .collect();
            let offset = *now / 50;
            let malformed = rng.gen_bool(0.2);
            let batch = IngestBatch {
                events,
                matches,
                lane: LANE,
                quarantined: (malformed
                    .then(|| quarantined(&unit.topic, offset, "bad", None, *now)))
                .into_iter()
                .collect(),
                next_offset: Some(offset + 1),
                // Some batches lease their jobs, as for an idle lane (issue 17).
                lease_until_ms: rng.gen_bool(0.3).then_some(*now + 60_000),
            };
            store
                .write_batch(unit, Fence::UNFENCED, Arc::new(batch))
                .await
                .expect("write");
        }
        4..=5 => {
            let due = store
                .due_jobs(DueQuery {
                    lanes: vec![LANE],
                    now_ms: *now,
                    per_tenant: 3,
                    limit: 6,
                    rotation: rng.gen(),
                    skip: Default::default(),
                    pass_over: Default::default(),
                    rooms: Default::default(),
                })
                .await
                .expect("due")
                .jobs;
            let start = due.iter().map(|j| j.id).collect();
            store
                .delivery_step(step(vec![], start, *now))
                .await
                .expect("lease");
        }
        6..=7 => {
            let due = store
                .due_jobs(DueQuery {
                    lanes: vec![LANE],
                    now_ms: FAR,
                    per_tenant: 3,
                    limit: 6,
                    rotation: rng.gen(),
                    skip: Default::default(),
                    pass_over: Default::default(),
                    rooms: Default::default(),
                })
                .await
                .expect("due")
                .jobs;
            let settle = (due.iter())
                .map(|j| Settlement {
                    job: j.id,
                    settled: match rng.gen_range(0..5) {
                        0 => Settled::Delivered(attempt(true)),
                        1 => Settled::RetryAt(*now + 100, attempt(false)),
                        2 => Settled::Deferred(*now + 200),
                        3 => Settled::Returned(*now + 200),
                        _ => Settled::DeadLetter {
                            reason: "gave up".into(),
                            attempt: Some(attempt(false)),
                        },
                    },
                })
                .collect();
            store
                .delivery_step(step(settle, vec![], *now))
                .await
                .expect("settle");
        }
        8 => {
            let (tenant, sub) = (
                TENANTS[rng.gen_range(0..3)],
                subs[rng.gen_range(0..subs.len())],
            );
            if rng.gen_bool(0.5) {
                store
                    .replay_dead_letters(tenant, sub, None, *now)
                    .await
                    .expect("replay");
            } else {
                let at = store.pull_position(tenant, sub).await.expect("pull");
                store
                    .advance_pull_position(tenant, sub, at, at + 1)
                    .await
                    .expect("advance");
            }
        }
        _ => {
            // Events older than a second of the history's time go, and the segments they
            // leave spent.
            store.expire(*now).await.expect("expire");
        }
    }
}

/// The number of the oldest segment file left.
fn first_segment(dir: &std::path::Path) -> u32 {
    let names = std::fs::read_dir(dir)
        .expect("dir")
        .map(|e| e.expect("entry").file_name());
    let numbers = names.filter_map(|n| n.to_str()?.strip_suffix(".log")?.parse().ok());
    numbers.min().expect("a segment")
}

/// R-IN-7 and R-OP-5 on random histories: a restart sees exactly what was seen before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_in_7_a_restart_sees_what_was_seen_before_on_random_histories() {
    let retention = Retention {
        events_s: 1,
        dedup_s: 2,
        forensics_s: 1,
    };
    let subs = [Uuid::now_v7(), Uuid::now_v7()];
    let unit = UnitId::new("lerian.streaming.replay", 0);
    for seed in 0..8u64 {
        let dir = tempfile::tempdir().expect("tempdir");
        let open = || {
            LogStore::open_with(dir.path(), 2 << 10)
                .expect("open")
                .with_retention(retention)
        };
        let mut rng = StdRng::seed_from_u64(seed);
        let mut now = 1_800_000_000_000;
        let store = open();
        for _ in 0..300 {
            act(&store, &mut rng, &subs, &unit, &mut now).await;
        }
        let before = seen(&store, &subs, &unit).await;
        drop(store);
        let first_kept = first_segment(dir.path());
        assert!(
            first_kept > 0,
            "seed {seed}: the history dropped spent segments"
        );
        let kept_events: usize = before.events.values().map(Vec::len).sum();
        assert!(
            kept_events > 0 && !before.jobs.is_empty(),
            "seed {seed}: {before:?}"
        );
        let reopened = open();
        let after = seen(&reopened, &subs, &unit).await;
        assert_eq!(before, after, "seed {seed}");
        // And the history went on across the restart without losing its place.
        let mut rng = StdRng::seed_from_u64(seed + 100);
        for _ in 0..50 {
            act(&reopened, &mut rng, &subs, &unit, &mut now).await;
        }
        let before = seen(&reopened, &subs, &unit).await;
        drop(reopened);
        assert_eq!(
            before,
            seen(&open(), &subs, &unit).await,
            "seed {seed}, second restart"
        );
    }
}
