//! Delivery's hot pure code: matching an event against 10,000 subscriptions of 100 tenants,
//! one scheduling decision (take + done) under a 10,000-job backlog, signing a 1 KiB body, and
//! a lane's whole round of decisions for one job (issue 17's lane step; its store step is
//! `embedded_store`'s, its attempt `webhook_attempt`'s), and a webhook's signing keys opened for
//! an attempt against taken from the shard's cache.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use hub_core::model::{binding, SinkKind, Subscription, VerificationState};
use hub_core::secrets::Keyring;
use hub_core::sink::outcome::{ErrorClass, Outcome};
use hub_core::sink::webhook::key_cache::KeyCache;
use hub_core::sink::webhook::{attempt_headers, Attempt, AttemptFields, Keys};
use hub_engine::delivery::breaker::{Breaker, BreakerConfig};
use hub_engine::delivery::decide::{after_attempt, curve_of, dispatch, Dispatch};
use hub_engine::delivery::fairness::{Due, Scheduler};
use hub_engine::delivery::signature::{headers, SigningKey};
use hub_engine::fast_hash::FastMap;
use hub_engine::matching::follow::{LocalSubscriptions, Subscriptions};
use hub_engine::matching::{EventFacts, MatchIndex};
use hub_engine::store::JobRecord;
use rand::SeedableRng;
use uuid::Uuid;

const KEYS: [&str; 20] = [
    "loan.approved",
    "loan.rejected",
    "loan.submitted",
    "account.created",
    "account.updated",
    "payment.settled",
    "payment.failed",
    "transfer.sent",
    "transfer.received",
    "card.issued",
    "card.blocked",
    "kyc.passed",
    "kyc.failed",
    "fee.charged",
    "fee.refunded",
    "limit.raised",
    "limit.lowered",
    "statement.ready",
    "dispute.opened",
    "dispute.closed",
];

fn subscriptions() -> Vec<Subscription> {
    (0..10_000)
        .map(|i| Subscription {
            endpoint: Some("https://example.com/h".into()),
            event_types: if i % 10 == 0 {
                vec![]
            } else {
                vec![KEYS[i % 20].into(), KEYS[(i + 7) % 20].into()]
            },
            origin: (i % 3 == 0).then(|| "lender".into()),
            verification_state: VerificationState::Active,
            ..Subscription::new(
                &format!("t{}", i % 100),
                &format!("s{i}"),
                SinkKind::Webhook,
                0,
            )
        })
        .collect()
}

fn delivery(c: &mut Criterion) {
    let subs = subscriptions();
    let index = MatchIndex::build(&subs, 1);
    let mut group = c.benchmark_group("delivery");
    group.throughput(Throughput::Elements(1));
    let ev = EventFacts {
        tenant: "t42",
        key: "payment.settled",
        source: "lender",
        major: 1,
    };
    group.bench_function("match_event_10k_subscriptions_100_tenants", |b| {
        b.iter(|| std::hint::black_box(index.matches(std::hint::black_box(&ev))))
    });

    // A subscription change on a hub of 100,000 tenants (one subscription each): what each
    // catch-up of the follower pays per revision, delivery marks included.
    let many: Vec<Subscription> = (0..100_000)
        .map(|i| Subscription {
            verification_state: VerificationState::Active,
            ..Subscription::new(&format!("t{i}"), "s", SinkKind::Webhook, 0)
        })
        .collect();
    let wide = MatchIndex::build(&many, 1);
    let changed = vec![&many[4_242]];
    group.bench_function("rebuild_one_tenant_of_100k", |b| {
        b.iter(|| std::hint::black_box(wide.rebuilt(2, [("t4242", changed.clone())])))
    });

    let mut scheduler = backlog();
    let mut next_job = 10_000u128;
    group.bench_function("schedule_take_and_done_10k_backlog", |b| {
        b.iter(|| {
            if let Some((tenant, due)) = scheduler.take_next() {
                replace(&mut scheduler, &tenant, due, &mut next_job);
            }
        })
    });

    let key = SigningKey::from_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").expect("key");
    let body = vec![b'x'; 1024];
    let event_id = axum::http::HeaderValue::from_static("01a229a2-163b-73dc-b555-885d9ae5a72c");
    group.bench_function("sign_1kib_body", |b| {
        b.iter(|| std::hint::black_box(headers(&key, None, &event_id, 1_764_000_000, &body)))
    });
    // Every header of one attempt, signatures included: what a delivery pays before it sends.
    let keys = Keys {
        current: key.clone(),
        previous: None,
    };
    let attempt = Attempt {
        endpoint: "http://127.0.0.1:9/hook",
        event_id: uuid::Uuid::now_v7(),
        event_key: "loan.approved",
        source: "lender",
        tenant: "tenant-0042",
        schema_version: "1.0.0",
        content_type: None,
        traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        tracestate: None,
        body: bytes::Bytes::from(body.clone()),
        timeout: std::time::Duration::from_secs(5),
        unix_s: 1_764_000_000,
    };
    group.bench_function("attempt_headers_1kib_body", |b| {
        b.iter(|| std::hint::black_box(attempt_headers(&attempt, &keys, uuid::Uuid::now_v7())))
    });
    // What the shards do instead of the map: the fields written as the request's lines, into a
    // buffer kept with the connection.
    let mut lines = Vec::with_capacity(2048);
    group.bench_function("attempt_fields_as_lines_1kib_body", |b| {
        b.iter(|| {
            lines.clear();
            if let Ok(fields) = AttemptFields::of(&attempt, &keys, uuid::Uuid::now_v7()) {
                fields.write_lines(&mut lines);
            }
            std::hint::black_box(lines.len())
        })
    });
    group.finish();
}

/// A lane's decisions for one job, without I/O: the scheduler's pick under a 10,000-job backlog
/// over 100 tenants and 40 destinations, the subscription and the destination's breaker looked
/// up, `dispatch`, the attempt's outcome judged by `after_attempt`, the breaker told, the
/// worker freed, and a new job pushed in its place. Once with a delivered outcome, once with a
/// 503 that is retried on the curve (its jitter drawn).
fn lane_step(c: &mut Criterion) {
    let subs: FastMap<String, Subscription> = subscriptions()
        .into_iter()
        .take(40)
        .enumerate()
        .map(|(i, sub)| (format!("d{i}"), sub))
        .collect();
    let mut group = c.benchmark_group("lane_step");
    group.throughput(Throughput::Elements(1));
    for (name, outcome) in [
        (
            "one_job_delivered",
            Outcome::delivered(Some(204), Duration::from_millis(2)),
        ),
        (
            "one_job_retried_after_a_503",
            Outcome::refused(ErrorClass::HttpStatus, "503"),
        ),
    ] {
        let mut scheduler = backlog();
        let mut breakers: FastMap<String, Breaker> = FastMap::default();
        let mut rng = rand::rngs::StdRng::seed_from_u64(17);
        let mut next_job = 10_000u128;
        let now = 1_764_000_000_000i64;
        group.bench_function(name, |b| {
            b.iter(|| {
                let Some((tenant, due)) = scheduler.take_next() else {
                    return;
                };
                let sub = subs.get(&due.destination);
                let breaker = breakers
                    .entry(due.destination.clone())
                    .or_insert_with(|| Breaker::new(BreakerConfig::default()));
                let job = JobRecord {
                    id: due.job,
                    lane: 0,
                    tenant: tenant.clone(),
                    subscription: Uuid::from_u128(due.job),
                    event_id: Uuid::from_u128(due.job),
                    event_seq: due.job as u64,
                    received_at_ms: now,
                    due_at_ms: now,
                    attempts: 0,
                    starts: 0,
                    last: None,
                };
                if dispatch(sub, None, breaker, &job, now) == Dispatch::Start {
                    let curve = sub.map(curve_of).unwrap_or_default();
                    let settled = after_attempt(&job, &curve, &outcome, now, now + 2, &mut rng);
                    breaker.record(now + 2, outcome.success);
                    std::hint::black_box(settled);
                }
                replace(&mut scheduler, &tenant, due, &mut next_job);
            })
        });
    }
    group.finish();
}

/// A webhook's signing keys for one attempt: opened from the sealed secret (what every attempt
/// paid before the shard's cache) and taken from the cache (what a shard pays now).
fn signing_keys(c: &mut Criterion) {
    let keyring = Keyring::parse(&Keyring::generate_spec("k1").expect("spec")).expect("keyring");
    let mut sub = Subscription {
        verification_state: VerificationState::Active,
        ..Subscription::new("t", "s", SinkKind::Webhook, 0)
    };
    let secret = keyring.new_signing_secret().expect("secret");
    sub.secret = Some(
        keyring
            .seal(secret.0.as_bytes(), &binding(&sub))
            .expect("seal"),
    );
    let now = 1_764_000_000_000i64;
    let mut group = c.benchmark_group("signing_keys");
    group.bench_function("opened_per_attempt", |b| {
        b.iter(|| std::hint::black_box(hub_core::sink::open_signing(&keyring, &sub, now)))
    });
    let mut cache = KeyCache::default();
    group.bench_function("from_the_shards_cache", |b| {
        b.iter(|| std::hint::black_box(cache.keys(&keyring, &sub, now)))
    });
    group.finish();
}

/// Frees the worker `due` took and pushes a new job of the same tenant and destination, so the
/// backlog stays the same size across iterations.
fn replace(scheduler: &mut Scheduler, tenant: &str, due: Due, next_job: &mut u128) {
    scheduler.done(&due.destination);
    *next_job += 1;
    let due = Due {
        job: *next_job,
        destination: due.destination,
    };
    scheduler.push(tenant, 1, due);
}

/// A scheduler holding 10,000 jobs of 100 tenants (weights 1–3) for 40 destinations.
fn backlog() -> Scheduler {
    let mut scheduler = Scheduler::new(8);
    for j in 0..10_000u128 {
        scheduler.push(
            &format!("t{}", j % 100),
            1 + (j % 3) as u32,
            Due {
                job: j,
                destination: format!("d{}", j % 40),
            },
        );
    }
    scheduler
}

criterion_group!(
    benches,
    delivery,
    lane_step,
    signing_keys,
    subscription_lookup
);
criterion_main!(benches);

/// A lane's lookup of a job's subscription (three to four per delivered event), 2,000
/// subscriptions known: from the shard's own copy (`LocalSubscriptions`, what a lane does), and
/// through the shared snapshot's lock and `Arc` (what the copy spares it; the lookup before it
/// took a `Mutex` shared by both shards).
fn subscription_lookup(c: &mut Criterion) {
    use hub_control::store::ControlStore;
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let store =
        hub_control::store::embedded::EmbeddedControlStore::open(&dir.path().join("control.redb"))
            .expect("control store");
    let subs: Vec<Subscription> = subscriptions().into_iter().take(2_000).collect();
    for sub in &subs {
        rt.block_on(store.create(sub)).expect("create");
    }
    let shared = std::sync::Arc::new(Subscriptions::default());
    rt.block_on(shared.catch_up(&store)).expect("catch up");
    let local = LocalSubscriptions::new(shared.clone());
    let mut group = c.benchmark_group("subscription_lookup");
    group.throughput(Throughput::Elements(1));
    let mut i = 0;
    group.bench_function("from_the_shards_copy", |b| {
        b.iter(|| {
            i = (i + 7) % subs.len();
            std::hint::black_box(local.get(&subs[i].tenant, subs[i].id));
        })
    });
    group.bench_function("through_the_shared_snapshot", |b| {
        b.iter(|| {
            i = (i + 7) % subs.len();
            let snapshot = shared.snapshot();
            std::hint::black_box(snapshot.get(&subs[i].tenant, subs[i].id).cloned());
        })
    });
    group.finish();
}
