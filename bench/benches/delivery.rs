//! Delivery's hot pure code: matching an event against 10,000 subscriptions of 100 tenants,
//! one scheduling decision (take + done) under a 10,000-job backlog, and signing a 1 KiB body.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use hub_core::model::{SinkKind, Subscription, VerificationState};
use hub_engine::delivery::fairness::{Due, Scheduler};
use hub_engine::delivery::signature::{headers, SigningKey};
use hub_engine::matching::{EventFacts, MatchIndex};

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
    let mut next_job = 10_000u128;
    group.bench_function("schedule_take_and_done_10k_backlog", |b| {
        b.iter(|| {
            if let Some((tenant, due)) = scheduler.take_next() {
                scheduler.done(&due.destination);
                next_job += 1;
                scheduler.push(
                    &tenant,
                    1,
                    Due {
                        job: next_job,
                        destination: due.destination,
                    },
                );
            }
        })
    });

    let key = SigningKey::from_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").expect("key");
    let body = vec![b'x'; 1024];
    group.bench_function("sign_1kib_body", |b| {
        b.iter(|| {
            std::hint::black_box(headers(
                &key,
                None,
                "01a229a2-163b-73dc-b555-885d9ae5a72c",
                1_764_000_000,
                &body,
            ))
        })
    });
    group.finish();
}

criterion_group!(benches, delivery);
criterion_main!(benches);
