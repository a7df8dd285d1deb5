//! The control-store conformance suite: the same checks against every `ControlStore` — the
//! embedded store in unit tests, the CQL store against the real CQL server in the tests crate.
//! `ns` makes every tenant unique, so runs never collide.

use std::sync::Arc;

use uuid::Uuid;

use super::*;
use crate::model::{SinkKind, VerificationState};

pub fn subscription(tenant: &str, name: &str) -> Subscription {
    Subscription {
        verification_state: VerificationState::PendingVerification,
        ..Subscription::new(tenant, name, SinkKind::Pull, 1)
    }
}

pub async fn run_all(store: Arc<dyn ControlStore>, ns: &str) {
    names_revisions_and_soft_delete(&*store, ns).await;
    listing_pages_in_id_order_and_skips_deleted(&*store, ns).await;
    changes_are_logged_in_order(&*store, ns).await;
    delivery_marks_are_changes_and_pass_over_deleted(&*store, ns).await;
    idempotency_keys(&*store, ns).await;
    one_of_concurrent_begins_wins(store, ns).await;
}

/// R-CP-2: a batch of delivery marks applies each in order (a success clears the failure),
/// logs each as a change, and passes over a deleted or unknown subscription.
async fn delivery_marks_are_changes_and_pass_over_deleted(store: &dyn ControlStore, ns: &str) {
    let tenant = format!("{ns}-marks");
    let (a, b) = (subscription(&tenant, "a"), subscription(&tenant, "b"));
    store.create(&a).await.expect("create a");
    store.create(&b).await.expect("create b");
    let mut gone = b.clone();
    gone.deleted = true;
    gone.revision = 2;
    store.replace(&gone, 1).await.expect("delete b");
    let before = store.changes_since(0, usize::MAX).await.expect("changes");
    let last = before.last().map_or(0, |c| c.revision);
    let mark = |id: Uuid, success: bool, at_ms: i64| DeliveryMark {
        tenant: tenant.clone(),
        subscription: id,
        success,
        at_ms,
    };
    let marks = vec![
        mark(a.id, false, 10),
        mark(b.id, true, 20),
        mark(Uuid::now_v7(), true, 30),
        mark(a.id, true, 40),
        mark(a.id, false, 50),
    ];
    store.mark_deliveries(marks).await.expect("marks");
    let a_now = store.get(&tenant, a.id).await.expect("get").expect("a");
    assert_eq!(
        (
            a_now.last_success_at_ms,
            a_now.last_failure_at_ms,
            a_now.revision
        ),
        (Some(40), Some(50), 4),
        "each mark applied in order, each a revision"
    );
    assert_eq!(
        a_now.etag(),
        a.etag(),
        "marks leave the ETag as it was (R-CP-10)"
    );
    assert_eq!(store.get(&tenant, b.id).await.expect("get"), Some(gone));
    let logged: Vec<Uuid> = (store
        .changes_since(last, usize::MAX)
        .await
        .expect("changes"))
    .into_iter()
    .filter(|c| c.tenant == tenant)
    .map(|c| c.id)
    .collect();
    assert_eq!(logged, vec![a.id; 3], "one change per mark applied");
}

async fn names_revisions_and_soft_delete(store: &dyn ControlStore, ns: &str) {
    let tenant = format!("{ns}-names");
    let a = subscription(&tenant, "orders");
    store.create(&a).await.expect("create");
    assert_eq!(
        store.create(&subscription(&tenant, "orders")).await,
        Err(ControlStoreError::NameTaken)
    );
    store
        .create(&subscription(&format!("{ns}-other"), "orders"))
        .await
        .expect("names are per tenant");
    assert_eq!(
        store.get(&tenant, a.id).await.expect("get"),
        Some(a.clone())
    );
    assert_eq!(
        store.get(&format!("{ns}-other"), a.id).await.expect("get"),
        None,
        "scoped by tenant"
    );

    let mut renamed = a.clone();
    renamed.name = "payments".into();
    renamed.revision = 2;
    assert_eq!(
        store.replace(&renamed, 7).await,
        Err(ControlStoreError::Conflict),
        "stale revision"
    );
    store.replace(&renamed, 1).await.expect("rename");
    assert_eq!(
        store.replace(&renamed, 1).await,
        Err(ControlStoreError::Conflict),
        "revision moved"
    );
    store
        .create(&subscription(&tenant, "orders"))
        .await
        .expect("the old name is free");
    let b = subscription(&tenant, "billing");
    store.create(&b).await.expect("create b");
    let mut clash = b.clone();
    clash.name = "payments".into();
    clash.revision = 2;
    assert_eq!(
        store.replace(&clash, 1).await,
        Err(ControlStoreError::NameTaken)
    );
    assert_eq!(
        store.get(&tenant, b.id).await.expect("get").map(|s| s.name),
        Some("billing".into()),
        "nothing changed"
    );

    let mut deleted = renamed.clone();
    deleted.deleted = true;
    deleted.revision = 3;
    store.replace(&deleted, 2).await.expect("soft delete");
    store
        .create(&subscription(&tenant, "payments"))
        .await
        .expect("a deleted name is free");
    let ghost = subscription(&tenant, "ghost");
    assert_eq!(
        store.replace(&ghost, 1).await,
        Err(ControlStoreError::NotFound)
    );
}

async fn listing_pages_in_id_order_and_skips_deleted(store: &dyn ControlStore, ns: &str) {
    let tenant = format!("{ns}-list");
    let mut ids = Vec::new();
    for i in 0..5 {
        let s = subscription(&tenant, &format!("s{i}"));
        store.create(&s).await.expect("create");
        ids.push(s);
    }
    let mut gone = ids[2].clone();
    gone.deleted = true;
    gone.revision = 2;
    store.replace(&gone, 1).await.expect("delete");
    let first = store.list(&tenant, None, 2).await.expect("list");
    let second = store
        .list(&tenant, first.last().map(|s| s.id), 10)
        .await
        .expect("list");
    let seen: Vec<Uuid> = first.iter().chain(&second).map(|s| s.id).collect();
    assert_eq!(seen, vec![ids[0].id, ids[1].id, ids[3].id, ids[4].id]);
}

async fn changes_are_logged_in_order(store: &dyn ControlStore, ns: &str) {
    let tenant = format!("{ns}-log");
    let before = store.changes_since(0, 1_000_000).await.expect("log");
    let start = before.last().map_or(0, |c| c.revision);
    let s = subscription(&tenant, "logged");
    store.create(&s).await.expect("create");
    let mut next = s.clone();
    next.paused = true;
    next.revision = 2;
    store.replace(&next, 1).await.expect("replace");
    let changes: Vec<Change> = store
        .changes_since(start, 1000)
        .await
        .expect("log")
        .into_iter()
        .filter(|c| c.tenant == tenant)
        .collect();
    assert_eq!(changes.len(), 2);
    assert!(changes[0].revision < changes[1].revision);
    assert!(changes.iter().all(|c| c.id == s.id && c.revision > start));
}

async fn idempotency_keys(store: &dyn ControlStore, ns: &str) {
    let tenant = format!("{ns}-idem");
    let t = |now_ms| IdemTimes {
        now_ms,
        retention_ms: 1000,
        stale_ms: 100,
    };
    let (fa, fb) = ([1u8; 32], [2u8; 32]);
    assert_eq!(
        store
            .idem_begin(&tenant, "k", fa, t(0))
            .await
            .expect("begin"),
        IdemBegin::Fresh
    );
    assert_eq!(
        store
            .idem_begin(&tenant, "k", fa, t(10))
            .await
            .expect("begin"),
        IdemBegin::InFlight
    );
    let response = StoredResponse {
        status: 201,
        headers: vec![("etag".into(), "\"x\"".into())],
        body: b"{}".to_vec(),
    };
    store
        .idem_finish(&tenant, "k", fa, response.clone(), 20)
        .await
        .expect("finish");
    assert_eq!(
        store
            .idem_begin(&tenant, "k", fa, t(30))
            .await
            .expect("begin"),
        IdemBegin::Replay(response)
    );
    assert_eq!(
        store
            .idem_begin(&tenant, "k", fb, t(30))
            .await
            .expect("begin"),
        IdemBegin::Mismatch
    );
    assert_eq!(
        store
            .idem_begin(&format!("{ns}-idem2"), "k", fb, t(30))
            .await
            .expect("begin"),
        IdemBegin::Fresh,
        "keys are per tenant"
    );
    assert_eq!(
        store
            .idem_begin(&tenant, "k", fb, t(5000))
            .await
            .expect("begin"),
        IdemBegin::Fresh,
        "expired"
    );

    assert_eq!(
        store
            .idem_begin(&tenant, "released", fa, t(0))
            .await
            .expect("begin"),
        IdemBegin::Fresh
    );
    store
        .idem_release(&tenant, "released")
        .await
        .expect("release");
    assert_eq!(
        store
            .idem_begin(&tenant, "released", fb, t(1))
            .await
            .expect("begin"),
        IdemBegin::Fresh
    );

    assert_eq!(
        store
            .idem_begin(&tenant, "lost", fa, t(0))
            .await
            .expect("begin"),
        IdemBegin::Fresh
    );
    store
        .idem_unrecorded(&tenant, "lost", 1)
        .await
        .expect("mark");
    assert_eq!(
        store
            .idem_begin(&tenant, "lost", fa, t(2))
            .await
            .expect("begin"),
        IdemBegin::Unrecorded
    );
    assert_eq!(
        store
            .idem_begin(&tenant, "stale", fa, t(0))
            .await
            .expect("begin"),
        IdemBegin::Fresh
    );
    assert_eq!(
        store
            .idem_begin(&tenant, "stale", fa, t(500))
            .await
            .expect("begin"),
        IdemBegin::Unrecorded,
        "a dead request's mark"
    );
}

async fn one_of_concurrent_begins_wins(store: Arc<dyn ControlStore>, ns: &str) {
    let tenant = format!("{ns}-race");
    let runs: Vec<_> = (0..8)
        .map(|_| {
            let (store, tenant) = (store.clone(), tenant.clone());
            tokio::spawn(async move {
                let t = IdemTimes {
                    now_ms: 0,
                    retention_ms: 1000,
                    stale_ms: 100,
                };
                store
                    .idem_begin(&tenant, "same", [9; 32], t)
                    .await
                    .expect("begin")
            })
        })
        .collect();
    let mut fresh = 0;
    for r in runs {
        if r.await.expect("join") == IdemBegin::Fresh {
            fresh += 1;
        }
    }
    assert_eq!(fresh, 1, "exactly one request holds the key");
}
