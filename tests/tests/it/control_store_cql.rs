//! The control plane's CQL store against the real CQL server: the shared conformance suite.

use std::sync::Arc;

use hub_control::store::conformance::run_all;
use hub_control::store::cql::CqlControlStore;
use hub_tests::{report, require, unique, CQL};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_cp_13_cql_control_store_passes_the_conformance_suite() {
    require("cassandra", CQL);
    let store = CqlControlStore::connect(
        &[CQL.to_owned()],
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
