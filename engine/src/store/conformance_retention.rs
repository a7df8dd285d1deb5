//! Retention conformance (R-OP-5), for a store opened with [`short_windows`]: after the
//! windows pass and a retention pass runs, events, dedup marks, quarantine records, DLQ
//! observations and dead letters are gone, and `seq` goes on where it was.

use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use super::conformance::{event, quarantined};
use super::conformance_jobs::{due, step, write_with_jobs};
use super::{
    DlqObservation, ForensicsFilter, IngestBatch, Lane, Retention, Settled, Settlement, Store,
    UnitId,
};

/// Every window, in seconds: long enough for the writes to land before it ends.
pub const WINDOW_S: u32 = 2;

/// The windows the store under test must be opened with.
pub fn short_windows() -> Retention {
    Retention {
        events_s: WINDOW_S,
        dedup_s: WINDOW_S,
        forensics_s: WINDOW_S,
    }
}

pub async fn everything_expires_after_its_window(store: Arc<dyn Store>, ns: &str, lane: Lane) {
    let store = &*store;
    let tenant = format!("{ns}-ret");
    let source = format!("{ns}ret");
    let now = crate::clock::now_ms();
    let fresh = |key: &str| {
        let mut e = event(&tenant, key);
        e.received_at_ms = now;
        e
    };
    let events = vec![fresh("x.created"), fresh("x.updated"), fresh("x.deleted")];
    let sub = Uuid::now_v7();
    let http = UnitId::new(format!("http:{ns}-ret"), 0);
    write_with_jobs(store, &http, lane, events.clone(), &[sub]).await;
    bury_one_and_cancel_the_rest(store, &tenant, lane, now).await;

    let topic = format!("lerian.streaming.{source}");
    let kafka = UnitId::new(topic.clone(), 0);
    let (fence, _) = store.claim_unit(&kafka).await.expect("claim");
    let batch = IngestBatch {
        quarantined: vec![quarantined(
            &topic,
            0,
            "malformed_header",
            Some(&tenant),
            now,
        )],
        next_offset: Some(1),
        ..Default::default()
    };
    store
        .write_batch(&kafka, fence, Arc::new(batch))
        .await
        .expect("quarantine written");
    store
        .record_dlq(vec![observation(&topic, now)])
        .await
        .expect("dlq recorded");
    let by_source = ForensicsFilter {
        source: Some(source.clone()),
        ..Default::default()
    };
    assert_eq!(held(store, &tenant, sub, &by_source).await, (3, 1, 1, 1));

    tokio::time::sleep(Duration::from_millis(u64::from(WINDOW_S) * 1_000 + 1_500)).await;
    store
        .expire(crate::clock::now_ms())
        .await
        .expect("retention pass");
    assert_eq!(
        held(store, &tenant, sub, &by_source).await,
        (0, 0, 0, 0),
        "{ns}: events, dead letters, quarantine and DLQ rows outlived their windows"
    );

    // The dedup marks went with the events: the same id is a new event, and seq goes on.
    let mut again = events[0].clone();
    again.received_at_ms = crate::clock::now_ms();
    let batch = IngestBatch {
        events: vec![again.clone()],
        ..Default::default()
    };
    let out = store
        .write_batch(&http, super::Fence::UNFENCED, Arc::new(batch))
        .await
        .expect("written again");
    assert_eq!(out.stored, vec![(tenant.clone(), again.id, 4)], "{ns}");
}

/// Dead-letters one of the tenant's jobs and cancels the others.
async fn bury_one_and_cancel_the_rest(store: &dyn Store, tenant: &str, lane: Lane, now: i64) {
    let mine: Vec<_> = due(store, lane, now)
        .await
        .into_iter()
        .filter(|j| &*j.tenant == tenant)
        .collect();
    assert_eq!(mine.len(), 3);
    let settle = mine
        .iter()
        .enumerate()
        .map(|(i, j)| Settlement {
            job: j.id,
            settled: if i == 0 {
                Settled::DeadLetter {
                    reason: "attempts exhausted".into(),
                    attempt: None,
                }
            } else {
                Settled::Cancelled
            },
        })
        .collect();
    store
        .delivery_step(step(settle, vec![], now))
        .await
        .expect("settled");
}

fn observation(topic: &str, at: i64) -> DlqObservation {
    DlqObservation {
        topic: format!("{topic}.dlq"),
        partition: 0,
        offset: 0,
        source: topic.trim_start_matches("lerian.streaming.").to_owned(),
        tenant: None,
        error_class: Some("timeout".into()),
        headers: vec![],
        value_prefix: b"{}".to_vec(),
        value_len: 2,
        observed_at_ms: at,
    }
}

/// What the store still holds: (events, dead letters, quarantine records, DLQ observations).
async fn held(
    store: &dyn Store,
    tenant: &str,
    sub: Uuid,
    by_source: &ForensicsFilter,
) -> (usize, usize, usize, usize) {
    let events = store.read_events(tenant, 0, 100).await.expect("events");
    let (letters, _) = store
        .dead_letters(tenant, sub, None, 100)
        .await
        .expect("dead letters");
    let quarantine = store
        .list_quarantine(by_source, 0, 100)
        .await
        .expect("quarantine");
    let dlq = store.list_dlq(by_source, 0, 100).await.expect("dlq");
    (
        events.len(),
        letters.len(),
        quarantine.items.len(),
        dlq.items.len(),
    )
}
