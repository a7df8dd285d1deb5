//! The control plane's list of which engine delivers which partitions (issue 18, R-OP-1), read
//! over REST, GraphQL and gRPC: the engines publish their ownership reports to the store, and a
//! `hub-control serve` on the keyspace lists them all.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;

use hub_control::grpc::pb::admin_client::AdminClient;
use hub_control::grpc::pb::OwnershipRequest;

use crate::graphql_live::graphql;
use crate::pull_grpc::authorized;
use crate::support::*;
use crate::two_process::eventually;

/// `GET /v1/admin/ownership` with `token`: the status and the body.
pub(crate) async fn rest(control: &str, token: &str) -> (u16, Value) {
    let r = reqwest::Client::new()
        .get(format!("{control}/v1/admin/ownership"))
        .bearer_auth(token)
        .send()
        .await
        .expect("ownership");
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// Each engine's id with the `topic` partitions it is assigned, from a list of reports.
fn assigned_per_engine(engines: &[Value], topic: &str) -> Vec<(String, BTreeSet<i64>)> {
    engines
        .iter()
        .map(|e| {
            let partitions = e["lanes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|l| l["how"] == "assigned" && l["topic"] == topic)
                .filter_map(|l| l["partition"].as_i64())
                .collect();
            (
                e["engine"].as_str().unwrap_or_default().to_owned(),
                partitions,
            )
        })
        .collect()
}

/// Whether `engines` are `count` engines whose assigned `topic` partitions split `0..partitions`
/// between them, every such lane held by the engine reporting it, with its pending jobs and lag.
fn split_between(engines: &[Value], count: usize, topic: &str, partitions: i64) -> bool {
    let per_engine = assigned_per_engine(engines, topic);
    let mut all: Vec<i64> = per_engine.iter().flat_map(|(_, p)| p.clone()).collect();
    all.sort_unstable();
    let lanes_complete = engines.iter().all(|e| {
        e["lanes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|l| l["how"] == "assigned")
            .all(|l| {
                l["held_here"] == true
                    && l["holder"] == e["engine"]
                    && l["pending"].is_i64()
                    && l["lag"].is_i64()
            })
    });
    per_engine.len() == count
        && per_engine.iter().all(|(_, p)| !p.is_empty())
        && all == (0..partitions).collect::<Vec<_>>()
        && lanes_complete
}

/// The control process lists `count` engines splitting `topic`'s partitions, the same over the
/// three transports; a tenant's token is refused on each.
pub(crate) async fn lists_every_engine(
    control: &str,
    admin: &str,
    tenant: &str,
    (count, topic, partitions): (usize, &str, i64),
) {
    let listed = eventually(Duration::from_secs(60), || async {
        let (status, view) = rest(control, admin).await;
        let engines = view["engines"].as_array()?.clone();
        (status == 200 && split_between(&engines, count, topic, partitions)).then_some(engines)
    })
    .await;
    let Some(engines) = listed else {
        panic!(
            "the control process lists {count} engines splitting {topic}: {:?}",
            rest(control, admin).await
        );
    };
    let expected = assigned_per_engine(&engines, topic);

    let answer = graphql(
        control,
        admin,
        "",
        "{ ownership { engine numbering lanes { how topic partition heldHere pending lag } } }",
    )
    .await;
    let over_graphql: Vec<Value> = answer["data"]["ownership"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        assigned_per_engine(&over_graphql, topic),
        expected,
        "GraphQL lists what REST does: {answer}"
    );

    let mut grpc = AdminClient::connect(control.to_owned())
        .await
        .expect("gRPC connects");
    let over_grpc = grpc
        .ownership(authorized(OwnershipRequest {}, admin))
        .await
        .expect("Admin.Ownership")
        .into_inner();
    let over_grpc: Vec<(String, BTreeSet<i64>)> = over_grpc
        .engines
        .iter()
        .map(|e| {
            let partitions = e
                .lanes
                .iter()
                .filter(|l| l.how == "assigned" && l.topic.as_deref() == Some(topic))
                .filter_map(|l| l.partition.map(i64::from))
                .collect();
            (e.engine.clone(), partitions)
        })
        .collect();
    assert_eq!(over_grpc, expected, "gRPC lists what REST does");

    // Operators only, on every transport.
    assert_eq!(rest(control, tenant).await.0, 403);
    let refused = graphql(control, tenant, "", "{ ownership { engine } }").await;
    assert_eq!(
        refused["errors"][0]["extensions"]["code"], "forbidden",
        "{refused}"
    );
    let refused = grpc
        .ownership(authorized(OwnershipRequest {}, tenant))
        .await
        .expect_err("a tenant is refused");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied);
}

/// The standalone hub (embedded store, one engine) lists itself: its 64 lanes numbered by shard,
/// every one held and counted; the engine's own `/admin/ownership` shows the same report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_op_1_the_standalone_hub_lists_its_own_lanes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = Engine::start_with(
        dir.path(),
        &format!("own-{}", uuid::Uuid::now_v7().simple()),
        free_port(),
        Backend::Embedded,
        &[("STREAMING_HUB_KAFKA_SOURCES", "ownership")],
    );
    engine.wait_ready().await;
    let admin = token(dir.path(), "ops", &["admin"]);
    let listed = eventually(Duration::from_secs(20), || async {
        let (status, view) = rest(&engine.http, &admin).await;
        (status == 200 && view["engines"].as_array()?.len() == 1).then_some(view)
    })
    .await
    .expect("the hub lists its engine");
    let only = &listed["engines"][0];
    assert_eq!(only["numbering"], "by_shard", "{only}");
    let lanes = only["lanes"].as_array().expect("lanes");
    assert_eq!(lanes.len(), 64);
    assert!(
        lanes
            .iter()
            .all(|l| l["how"] == "shard" && l["held_here"] == true),
        "{only}"
    );
    let own: Value = reqwest::Client::new()
        .get(format!("{}/admin/ownership", engine.http))
        .bearer_auth(&admin)
        .send()
        .await
        .expect("admin ownership")
        .json()
        .await
        .expect("json");
    assert_eq!(
        (&own["engine"], &own["lanes"]),
        (&only["engine"], &only["lanes"])
    );
    // hubctl reads it over gRPC.
    let shown = crate::hubctl::hubctl(&engine.http, Some(&admin), &["--json", "ownership"]);
    assert!(shown.status.success(), "{shown:?}");
    let shown: Value = serde_json::from_slice(&shown.stdout).expect("hubctl JSON");
    assert_eq!(shown["engines"][0]["engine"], only["engine"]);
    assert_eq!(
        shown["engines"][0]["lanes"].as_array().map(Vec::len),
        Some(64)
    );
    let tenant = token(dir.path(), "t-own", &["subscriptions:get"]);
    assert_eq!(rest(&engine.http, &tenant).await.0, 403);
    let refused = crate::hubctl::hubctl(&engine.http, Some(&tenant), &["ownership"]);
    assert_eq!(refused.status.code(), Some(3), "not allowed: {refused:?}");
    engine.stop();
}
