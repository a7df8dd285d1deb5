//! The CQL store against the real CQL server: the shared conformance suite (R-OP-2), plus the
//! recovery paths only a store without multi-partition transactions has.

use std::sync::Arc;

use hub_engine::store::conformance::{event, run_all};
use hub_engine::store::cql::{CqlSettings, CqlStore};
use hub_engine::store::{IngestBatch, Store, UnitId};
use hub_tests::{report, require, unique, CQL};
use scylla::client::session_builder::SessionBuilder;

/// Writes the dedup claim a crashed writer leaves: origin and intended seq, nothing in the log.
async fn leave_claim(
    session: &scylla::client::session::Session,
    ev: &hub_engine::store::InboxEvent,
    origin: String,
    intent: i64,
) {
    let hour = i64::try_from(ev.id.get_timestamp().expect("v7").to_unix().0 / 3600).expect("hour");
    session
        .query_unpaged(
            "INSERT INTO hub_it.dedup (tenant, id_bucket, id, origin, claimed_at, intent) \
             VALUES (?, ?, ?, ?, ?, ?)",
            (&ev.tenant, hour, ev.id, origin, 0_i64, intent),
        )
        .await
        .expect("leave a claim");
}

/// Tiny buckets and appends, so every run crosses bucket and batch boundaries many times.
fn settings() -> CqlSettings {
    CqlSettings {
        nodes: vec![CQL.into()],
        keyspace: "hub_it".into(),
        bucket_size: 8,
        append_bytes: 1024,
        ..CqlSettings::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_op_2_cql_store_passes_the_conformance_suite() {
    require("cassandra", CQL);
    let store = CqlStore::connect(settings()).await.expect("connect");
    let ns = unique("cql");
    run_all(Arc::new(store), &ns).await;
    report(
        "cassandra",
        &format!("{CQL}: store conformance suite passed (namespace {ns})"),
    );
}

/// R-IN-7 / R-IN-6: a crash after the dedup claim but before the append leaves a claim whose
/// origin is the record's own Kafka position. The replay must finish it, not drop it as a
/// duplicate; and a second replay must then drop it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_in_7_cql_replay_finishes_a_claim_left_by_a_crash() {
    require("cassandra", CQL);
    let store = CqlStore::connect(settings()).await.expect("connect");
    let ns = unique("cqlcrash");
    let tenant = format!("{ns}-t");
    let unit = UnitId::new(format!("lerian.streaming.{ns}"), 2);
    let mut ev = event(&tenant, "x.created");
    ev.offset = 41;

    // What a crashed writer leaves: the claim, naming seq 1, and nothing in the log.
    let session = SessionBuilder::new()
        .known_node(CQL)
        .build()
        .await
        .expect("session");
    leave_claim(&session, &ev, format!("{}/2/41", unit.topic), 1).await;

    let (fence, _) = store.claim_unit(&unit).await.expect("claim unit");
    let batch = Arc::new(IngestBatch {
        events: vec![ev.clone()],
        quarantined: vec![],
        next_offset: Some(42),
        ..Default::default()
    });
    let replay = store
        .write_batch(&unit, fence, batch.clone())
        .await
        .expect("replay");
    assert_eq!(
        replay.stored,
        vec![(tenant.clone(), ev.id, 1)],
        "the claim is finished"
    );
    let again = store
        .write_batch(&unit, fence, batch)
        .await
        .expect("second replay");
    assert!(again.stored.is_empty());
    assert_eq!(again.duplicates, vec![(tenant.clone(), ev.id)]);
    let read = store.read_events(&tenant, 0, 10).await.expect("read");
    assert_eq!(read.len(), 1);
    assert_eq!(read[0].event, ev);

    // A replayed batch in which one event's claim was left unfinished and the others are new:
    // the claims of one dedup partition go as one conditional batch, refused for the one that
    // exists; that one must still be finished, not dropped.
    let mut left = event(&tenant, "x.created");
    left.offset = 50;
    let (b, c) = (event(&tenant, "x.created"), event(&tenant, "x.created"));
    leave_claim(&session, &left, format!("{}/2/50", unit.topic), 2).await;
    let mixed = store
        .write_batch(
            &unit,
            fence,
            Arc::new(IngestBatch {
                events: vec![left.clone(), b.clone(), c.clone()],
                quarantined: vec![],
                next_offset: Some(53),
                ..Default::default()
            }),
        )
        .await
        .expect("mixed replay");
    let stored: Vec<_> = mixed.stored.iter().map(|s| s.1).collect();
    assert_eq!(
        stored,
        vec![left.id, b.id, c.id],
        "the unfinished claim is finished too"
    );
    let order: Vec<_> = store
        .read_events(&tenant, 0, 10)
        .await
        .expect("read")
        .iter()
        .map(|e| e.event.id)
        .collect();
    assert_eq!(
        order,
        vec![ev.id, left.id, b.id, c.id],
        "seq follows the partition's order, the finished claim included"
    );

    // The same id from another position is a duplicate, even while the claim is unfinished.
    let other_tenant = format!("{ns}-u");
    let mut first = event(&other_tenant, "x.created");
    first.offset = 7;
    leave_claim(&session, &first, format!("{}/2/7", unit.topic), 1).await;
    let mut resent = first.clone();
    resent.offset = 9;
    let out = store
        .write_batch(
            &unit,
            fence,
            Arc::new(IngestBatch {
                events: vec![resent],
                quarantined: vec![],
                next_offset: Some(10),
                ..Default::default()
            }),
        )
        .await
        .expect("write");
    assert_eq!(out.duplicates, vec![(other_tenant, first.id)]);
    report(
        "cassandra",
        "an unfinished claim is finished by its own replay, refused to others",
    );
}
