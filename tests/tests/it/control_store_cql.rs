//! The control plane's CQL store against the real CQL server: the shared conformance suite.

use std::sync::Arc;

use hub_control::store::conformance::run_all;
use hub_control::store::cql::CqlControlStore;
use hub_tests::{report, require, unique, CQL};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_cp_13_cql_control_store_passes_the_conformance_suite() {
    require("cassandra", CQL);
    let store = CqlControlStore::connect(
        (&[CQL.to_owned()], &hub_core::cql::CqlAccess::default()),
        "hub_control_it",
        "{'class': 'NetworkTopologyStrategy', 'replication_factor': 1}",
        86_400,
    )
    .await
    .expect("connect");
    let ns = unique("ctl");
    run_all(Arc::new(store), &ns).await;
    report(
        "cassandra",
        &format!("{CQL}: control-store conformance suite passed (namespace {ns})"),
    );
}

/// R-CP-15 across processes: keys an engine records in the shared keyspace reach a control plane
/// that runs on its own, through its store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_cp_15_engine_recorded_keys_reach_the_control_store() {
    use hub_engine::store::cql::{CqlSettings, CqlStore};
    use hub_engine::store::Ingest;
    require("cassandra", CQL);
    let keyspace = "hub_catalog_it";
    let engine_store = CqlStore::connect(CqlSettings {
        nodes: vec![CQL.into()],
        keyspace: keyspace.into(),
        ..CqlSettings::default()
    })
    .await
    .expect("engine store");
    let key = format!("{}.approved", unique("res").replace('-', "_"));
    engine_store
        .record_catalog_keys(vec![(key.clone(), "lender".into(), 2)])
        .await
        .expect("record");
    let control = CqlControlStore::connect(
        (&[CQL.to_owned()], &hub_core::cql::CqlAccess::default()),
        keyspace,
        "{'class': 'NetworkTopologyStrategy', 'replication_factor': 1}",
        86_400,
    )
    .await
    .expect("control store");
    use hub_control::store::ControlStore;
    let keys = control.observed_keys().await.expect("observed");
    assert!(
        keys.contains(&(key.clone(), "lender".into(), 2)),
        "{key} missing from {keys:?}"
    );
    report(
        "cassandra",
        "an engine's recorded event key is read by the control store",
    );
}
