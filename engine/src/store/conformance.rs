//! The store conformance suite (DESIGN invariant 4): the same checks run against every `Store`
//! implementation — the embedded store in the engine's unit tests, the CQL store in the
//! integration tests against a real CQL server.
//!
//! Each check uses fresh tenants and units (`ns` prefixes every name), so runs never collide.

use std::collections::BTreeSet;
use std::sync::Arc;

use uuid::Uuid;

use super::*;

/// Runs every check. `ns` must be unique per run (e.g. a UUID).
pub async fn run_all(store: Arc<dyn Store>, ns: &str) {
    dedup_first_write_wins_and_seq_increases(&*store, ns).await;
    claim_fences_stale_owner_and_offsets_are_durable(&*store, ns).await;
    seq_has_no_gap_under_concurrent_writers(store.clone(), ns).await;
    quarantine_is_listed_with_filters_and_pages(&*store, ns).await;
    dlq_is_idempotent_and_filtered(&*store, ns).await;
    pull_positions_move_only_from_the_position_read(store.clone(), ns).await;
}

/// A minimal inbox event for `tenant`.
pub fn event(tenant: &str, key: &str) -> InboxEvent {
    InboxEvent {
        tenant: tenant.to_owned(),
        id: Uuid::now_v7(),
        source: "lender".into(),
        ce_type: format!("studio.lerian.lender.{key}"),
        key: key.to_owned(),
        schema_version: "1.0.0".into(),
        schema_major: 1,
        time: "2026-11-29T20:17:42Z".into(),
        subject: None,
        data_content_type: Some("application/json".into()),
        data_schema: None,
        traceparent: None,
        tracestate: None,
        payload: bytes::Bytes::from_static(br#"{"amount":100}"#),
        received_at_ms: 1_764_000_000_000,
        offset: 0,
    }
}

/// Writes one event of tenant `t-full` with a 32 KiB payload at Kafka position `n` (the
/// full-disk tests fill a small disk with these).
pub async fn write_big_event(
    store: &dyn Store,
    unit: &UnitId,
    fence: Fence,
    n: i64,
) -> Result<(), String> {
    let mut e = event("t-full", "x.created");
    e.payload = vec![b'x'; 32 << 10].into();
    let batch = IngestBatch {
        events: vec![e],
        next_offset: Some(n + 1),
        ..Default::default()
    };
    store
        .write_batch(unit, fence, Arc::new(batch))
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

pub(super) fn quarantined(
    topic: &str,
    offset: i64,
    reason: &str,
    tenant: Option<&str>,
    at: i64,
) -> QuarantineRecord {
    QuarantineRecord {
        topic: topic.to_owned(),
        partition: 0,
        offset,
        reason: reason.to_owned(),
        detail: reason.to_owned(),
        tenant: tenant.map(str::to_owned),
        headers: vec![RawHeader {
            key: "ce-id".into(),
            value: Some(b"nope".to_vec()),
        }],
        value_prefix: b"{}".to_vec(),
        value_len: 2,
        received_at_ms: at,
    }
}

/// Writes `events` as one batch of `unit` under `fence`, its offset moved to `next`.
pub async fn write(
    store: &dyn Store,
    unit: &UnitId,
    fence: Fence,
    events: Vec<InboxEvent>,
    next: i64,
) -> BatchOutcome {
    let batch = IngestBatch {
        events,
        quarantined: vec![],
        next_offset: Some(next),
        ..Default::default()
    };
    store
        .write_batch(unit, fence, Arc::new(batch))
        .await
        .expect("batch written")
}

pub async fn dedup_first_write_wins_and_seq_increases(store: &dyn Store, ns: &str) {
    let tenant = format!("{ns}-dedup");
    let unit = UnitId::new(format!("lerian.streaming.{ns}-a"), 0);
    let (fence, _) = store.claim_unit(&unit).await.expect("claim");
    let (a, b, c) = (
        event(&tenant, "x.created"),
        event(&tenant, "x.created"),
        event(&tenant, "x.updated"),
    );
    let first = write(store, &unit, fence, vec![a.clone(), b.clone()], 2).await;
    assert_eq!(
        first.stored.iter().map(|s| s.2).collect::<Vec<_>>(),
        vec![1, 2]
    );
    assert!(first.duplicates.is_empty());

    let mut a_again = a.clone();
    a_again.payload = b"a different body must not overwrite".to_vec().into();
    let second = write(store, &unit, fence, vec![a_again, c.clone(), c.clone()], 5).await;
    assert_eq!(
        second.stored,
        vec![(tenant.clone(), c.id, 3)],
        "only the new id is stored"
    );
    assert_eq!(
        second.duplicates,
        vec![(tenant.clone(), a.id), (tenant.clone(), c.id)],
        "repeats in and across batches are dedup drops"
    );

    // The same id under another tenant is a different event (dedup is per tenant).
    let other = format!("{ns}-dedup-other");
    let mut a_other = a.clone();
    a_other.tenant = other.clone();
    let third = write(store, &unit, fence, vec![a_other], 6).await;
    assert_eq!(third.stored, vec![(other, a.id, 1)]);

    let read = store.read_events(&tenant, 0, 100).await.expect("read");
    assert_eq!(
        read.iter().map(|e| (e.seq, e.event.id)).collect::<Vec<_>>(),
        vec![(1, a.id), (2, b.id), (3, c.id)]
    );
    assert_eq!(read[0].event.payload, a.payload, "first write wins");
    assert_eq!(read[0].event, a);
    let page = store.read_events(&tenant, 1, 1).await.expect("read after");
    assert_eq!(page.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![2]);
}

pub async fn claim_fences_stale_owner_and_offsets_are_durable(store: &dyn Store, ns: &str) {
    let unit = UnitId::new(format!("lerian.streaming.{ns}-fence"), 3);
    assert_eq!(store.unit_offset(&unit).await.expect("offset"), None);
    let (old, next) = store.claim_unit(&unit).await.expect("claim");
    assert_eq!(next, None);
    write(
        store,
        &unit,
        old,
        vec![event(&format!("{ns}-fence"), "x.created")],
        10,
    )
    .await;
    assert_eq!(store.unit_offset(&unit).await.expect("offset"), Some(10));

    let (new, next) = store.claim_unit(&unit).await.expect("second claim");
    assert!(new.generation > old.generation);
    assert_eq!(
        next,
        Some(10),
        "a new owner resumes from the durable offset"
    );
    let stale = store
        .write_batch(
            &unit,
            old,
            Arc::new(IngestBatch {
                events: vec![event(&format!("{ns}-fence"), "x.created")],
                quarantined: vec![],
                next_offset: Some(11),
                ..Default::default()
            }),
        )
        .await;
    assert!(
        matches!(stale, Err(StoreError::Fenced { .. })),
        "stale owner refused: {stale:?}"
    );
    assert_eq!(
        store.unit_offset(&unit).await.expect("offset"),
        Some(10),
        "nothing of the refused batch landed"
    );
    assert_eq!(
        store
            .read_events(&format!("{ns}-fence"), 0, 10)
            .await
            .expect("read")
            .len(),
        1
    );
    write(store, &unit, new, vec![], 12).await;
    assert_eq!(store.unit_offset(&unit).await.expect("offset"), Some(12));
}

/// R-IN-8: one tenant written concurrently through several units; a concurrent reader only ever
/// sees a gap-free prefix `1..=n`, and in the end every event has exactly one `seq`.
pub async fn seq_has_no_gap_under_concurrent_writers(store: Arc<dyn Store>, ns: &str) {
    const WRITERS: usize = 4;
    const BATCHES: usize = 10;
    const PER_BATCH: usize = 5;
    let tenant = format!("{ns}-salted");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (store, tenant, stop) = (store.clone(), tenant.clone(), stop.clone());
        tokio::spawn(async move {
            let mut highest = 0;
            let mut reads = 0;
            loop {
                let done = stop.load(std::sync::atomic::Ordering::Acquire);
                let all = store.read_events(&tenant, 0, 100_000).await.expect("read");
                let seqs: Vec<u64> = all.iter().map(|e| e.seq).collect();
                let prefix: Vec<u64> = (1..=seqs.len() as u64).collect();
                assert_eq!(seqs, prefix, "visible seqs form a gap-free prefix");
                assert!(seqs.len() as u64 >= highest, "nothing visible disappears");
                highest = seqs.len() as u64;
                reads += 1;
                if done {
                    return (highest, reads);
                }
                tokio::task::yield_now().await;
            }
        })
    };
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let (store, tenant) = (store.clone(), tenant.clone());
        let unit = UnitId::new(format!("lerian.streaming.{ns}-salt"), w as i32);
        writers.push(tokio::spawn(async move {
            let (fence, _) = store.claim_unit(&unit).await.expect("claim");
            let mut ids = Vec::new();
            for b in 0..BATCHES {
                let events: Vec<_> = (0..PER_BATCH)
                    .map(|_| event(&tenant, "x.created"))
                    .collect();
                ids.extend(events.iter().map(|e| e.id));
                let batch = IngestBatch {
                    events,
                    quarantined: vec![],
                    next_offset: Some((b * PER_BATCH) as i64),
                    ..Default::default()
                };
                store
                    .write_batch(&unit, fence, Arc::new(batch))
                    .await
                    .expect("write");
            }
            ids
        }));
    }
    let mut written = BTreeSet::new();
    for w in writers {
        written.extend(w.await.expect("writer"));
    }
    stop.store(true, std::sync::atomic::Ordering::Release);
    let (highest, _reads) = reader.await.expect("reader");
    let total = (WRITERS * BATCHES * PER_BATCH) as u64;
    assert_eq!(highest, total);
    let all = store.read_events(&tenant, 0, 100_000).await.expect("read");
    let stored: BTreeSet<Uuid> = all.iter().map(|e| e.event.id).collect();
    assert_eq!(stored, written, "every event stored exactly once");
}

pub async fn quarantine_is_listed_with_filters_and_pages(store: &dyn Store, ns: &str) {
    let unit = UnitId::new(format!("lerian.streaming.{ns}q"), 0);
    let (fence, _) = store.claim_unit(&unit).await.expect("claim");
    let tenant = format!("{ns}-q");
    let topic = unit.topic.clone();
    let records = vec![
        quarantined(&topic, 1, "invalid_id", Some(&tenant), 1000),
        quarantined(&topic, 2, "missing_tenant", None, 2000),
        quarantined(&topic, 3, "invalid_id", Some(&tenant), 3000),
    ];
    let batch = IngestBatch {
        events: vec![],
        quarantined: records.clone(),
        next_offset: Some(4),
        ..Default::default()
    };
    assert_eq!(
        store
            .write_batch(&unit, fence, Arc::new(batch))
            .await
            .expect("write")
            .quarantined,
        3
    );

    // A replayed batch (crash before the offset commit) quarantines nothing twice.
    let replay = IngestBatch {
        events: vec![],
        quarantined: records.clone(),
        next_offset: Some(4),
        ..Default::default()
    };
    let again = store
        .write_batch(&unit, fence, Arc::new(replay))
        .await
        .expect("replay");
    assert_eq!(again.quarantined, 0);

    let source = format!("{ns}q");
    let by_source = ForensicsFilter {
        source: Some(source.clone()),
        ..Default::default()
    };
    let all = collect_quarantine(store, &by_source, 2).await;
    assert_eq!(
        all, records,
        "paging in twos returns every record once, in order"
    );
    let by_reason = ForensicsFilter {
        source: Some(source.clone()),
        class: Some("invalid_id".into()),
        ..Default::default()
    };
    assert_eq!(collect_quarantine(store, &by_reason, 10).await.len(), 2);
    let by_tenant = ForensicsFilter {
        tenant: Some(tenant),
        ..Default::default()
    };
    assert_eq!(collect_quarantine(store, &by_tenant, 10).await.len(), 2);
    let by_time = ForensicsFilter {
        source: Some(source),
        since_ms: Some(1500),
        until_ms: Some(2500),
        ..Default::default()
    };
    assert_eq!(
        collect_quarantine(store, &by_time, 10).await,
        vec![records[1].clone()]
    );
}

async fn collect_quarantine(
    store: &dyn Store,
    filter: &ForensicsFilter,
    page: usize,
) -> Vec<QuarantineRecord> {
    let (mut out, mut cursor) = (Vec::new(), 0);
    loop {
        let p = store
            .list_quarantine(filter, cursor, page)
            .await
            .expect("list");
        out.extend(p.items);
        match p.next_cursor {
            Some(c) => cursor = c,
            None => return out,
        }
    }
}

pub async fn dlq_is_idempotent_and_filtered(store: &dyn Store, ns: &str) {
    let topic = format!("lerian.streaming.{ns}d.dlq");
    let obs = |offset: i64, class: &str| DlqObservation {
        topic: topic.clone(),
        partition: 0,
        offset,
        source: format!("{ns}d"),
        tenant: Some(format!("{ns}-d")),
        error_class: Some(class.to_owned()),
        headers: vec![RawHeader {
            key: "x-lerian-dlq-error-class".into(),
            value: Some(class.as_bytes().to_vec()),
        }],
        value_prefix: b"{}".to_vec(),
        value_len: 2,
        observed_at_ms: 1000 + offset,
    };
    store
        .record_dlq(vec![obs(0, "timeout"), obs(1, "validation")])
        .await
        .expect("record");
    store
        .record_dlq(vec![obs(1, "validation"), obs(2, "timeout")])
        .await
        .expect("record again");
    let filter = ForensicsFilter {
        source: Some(format!("{ns}d")),
        ..Default::default()
    };
    let mut all = Vec::new();
    let mut cursor = 0;
    loop {
        let p = store.list_dlq(&filter, cursor, 2).await.expect("list");
        all.extend(p.items);
        match p.next_cursor {
            Some(c) => cursor = c,
            None => break,
        }
    }
    assert_eq!(
        all.iter().map(|o| o.offset).collect::<Vec<_>>(),
        vec![0, 1, 2],
        "a re-read record is recorded once"
    );
    let timeouts = ForensicsFilter {
        class: Some("timeout".into()),
        ..filter
    };
    assert_eq!(
        store
            .list_dlq(&timeouts, 0, 10)
            .await
            .expect("list")
            .items
            .len(),
        2
    );
}

/// R-CP-14: a pull position starts at 0, moves only from the value read (compare and set), is
/// kept per (tenant, subscription), and concurrent movers from one value: exactly one wins.
pub async fn pull_positions_move_only_from_the_position_read(store: Arc<dyn Store>, ns: &str) {
    let tenant = format!("{ns}-pull");
    let sub = Uuid::now_v7();
    let other = Uuid::now_v7();
    assert_eq!(store.pull_position(&tenant, sub).await.expect("read"), 0);
    assert!(store
        .advance_pull_position(&tenant, sub, 0, 5)
        .await
        .expect("first move"));
    assert!(
        !store
            .advance_pull_position(&tenant, sub, 0, 9)
            .await
            .expect("stale move"),
        "a move from a stale position is refused"
    );
    assert_eq!(store.pull_position(&tenant, sub).await.expect("read"), 5);
    assert_eq!(
        store.pull_position(&tenant, other).await.expect("read"),
        0,
        "positions are per subscription"
    );
    assert_eq!(
        store
            .pull_position(&format!("{ns}-pull-2"), sub)
            .await
            .expect("read"),
        0,
        "and per tenant"
    );
    let racers = (0..4u64).map(|i| {
        let store = store.clone();
        let tenant = tenant.clone();
        async move { store.advance_pull_position(&tenant, sub, 5, 10 + i).await }
    });
    let won: Vec<bool> = futures::future::join_all(racers)
        .await
        .into_iter()
        .map(|r| r.expect("move"))
        .collect();
    assert_eq!(
        won.iter().filter(|w| **w).count(),
        1,
        "one mover wins: {won:?}"
    );
    let now = store.pull_position(&tenant, sub).await.expect("read");
    assert!((10..14).contains(&now));
}
