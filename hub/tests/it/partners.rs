//! Partners through the gateway relay (R-CP-17), against the standalone hub and a stand-in for
//! Access Manager's partner directory (an HTTP server on loopback answering
//! `GET /partners/{id}` with `{"status": …}`): a partner reaches only the push subscriptions it
//! created, may not create pull ones nor call what is not relayed; its subscription delivers only
//! while the directory shows it active; with no directory configured every relayed call is
//! refused with 403 `delegated_relay_refused`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use crate::delivery::{delivery_of, ingest_one, Setup, Tenant};
use crate::receiver::Act;
use crate::support::partner_token;
use crate::two_process::eventually;

/// The stand-in directory: partner id → status.
#[derive(Clone, Default)]
struct Directory(Arc<Mutex<HashMap<String, String>>>);

impl Directory {
    fn set(&self, partner: &str, status: &str) {
        self.0
            .lock()
            .expect("lock")
            .insert(partner.into(), status.into());
    }

    async fn serve(&self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let known = self.0.clone();
        let app = axum::Router::new().route(
            "/partners/{id}",
            axum::routing::get(
                move |axum::extract::Path(id): axum::extract::Path<String>| {
                    let status = known.lock().expect("lock").get(&id).cloned();
                    async move {
                        match status {
                            Some(s) => (
                                axum::http::StatusCode::OK,
                                axum::Json(json!({"id": id, "status": s})),
                            ),
                            None => (axum::http::StatusCode::NOT_FOUND, axum::Json(json!({}))),
                        }
                    }
                },
            ),
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}")
    }
}

const ALL: &[&str] = &[
    "subscriptions:get",
    "subscriptions:post",
    "subscriptions:patch",
    "subscriptions:delete",
];

fn partner(setup: &Setup, id: &str) -> Tenant {
    Tenant::at(
        &setup.engine.http,
        partner_token(setup.dir.path(), &setup.tenant, ALL, Some(id)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_cp_17_partners_reach_only_their_push_subscriptions_and_deliver_only_while_active() {
    let directory = Directory::default();
    directory.set("fund-1", "active");
    let url = directory.serve().await;
    let setup = Setup::start_with(
        "partners",
        crate::support::Backend::Embedded,
        &[
            ("STREAMING_HUB_PARTNERS_URL", url.as_str()),
            ("STREAMING_HUB_PARTNERS_REFRESH_MS", "1000"),
        ],
    )
    .await;
    let fund1 = partner(&setup, "fund-1");
    let fund2 = partner(&setup, "fund-2");

    // The partner creates and activates its own webhook subscription.
    let (id, _secret) = fund1
        .active_webhook("fund-feed", &setup.receiver.url("/fund"), json!({}))
        .await;
    let (_, own) = setup
        .api
        .call("GET", &format!("/v1/subscriptions/{id}"), None)
        .await;
    assert_eq!(own["partner_id"], "fund-1", "the tenant sees whose it is");

    // Not pull; not another's; not the tenant's; not what is not relayed.
    let (status, body) = fund1
        .call(
            "POST",
            "/v1/subscriptions",
            Some(json!({"name": "p", "sink_kind": "pull"})),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (422, Some("validation_failed"))
    );
    let (status, tenants) = setup
        .api
        .call(
            "POST",
            "/v1/subscriptions",
            Some(json!({"name": "tenant-own", "sink_kind": "pull"})),
        )
        .await;
    assert_eq!(status, 201);
    let tenants_id = tenants["id"].as_str().expect("id");
    for (who, path) in [
        (&fund1, format!("/v1/subscriptions/{tenants_id}")),
        (&fund2, format!("/v1/subscriptions/{id}")),
    ] {
        let (status, body) = who.call("GET", &path, None).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (404, Some("subscription_not_found"))
        );
    }
    let (_, page) = fund1.call("GET", "/v1/subscriptions", None).await;
    let listed: Vec<&str> = page["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert_eq!(listed, vec![id.as_str()], "a partner lists only its own");
    for (method, path) in [
        ("POST", format!("/v1/subscriptions/{id}/verify")),
        ("GET", format!("/v1/subscriptions/{id}/dead-letters")),
        ("GET", "/v1/catalog".to_owned()),
    ] {
        let (status, body) = fund1.call(method, &path, None).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (403, Some("delegated_relay_refused")),
            "{method} {path}"
        );
    }
    let (status, _) = fund1
        .call("GET", &format!("/v1/subscriptions/{id}/health"), None)
        .await;
    assert_eq!(status, 200, "health is relayed");

    // Active: delivered.
    setup.receiver.script(&[], Act::Status(204));
    let first = ingest_one(&setup.engine, &setup.tenant, &[]).await;
    assert!(
        delivery_of(&setup.receiver, first).await.is_some(),
        "delivered while the partner is active"
    );

    // Inactive: held (no attempt), then delivered once active again.
    directory.set("fund-1", "inactive");
    tokio::time::sleep(Duration::from_millis(2500)).await; // past a refresh
    let held = ingest_one(&setup.engine, &setup.tenant, &[]).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let attempted = |event: uuid::Uuid| {
        setup
            .receiver
            .received()
            .iter()
            .any(|r| r.header("x-lerian-event-id") == event.to_string())
    };
    assert!(
        !attempted(held),
        "nothing is sent while the partner is inactive"
    );
    directory.set("fund-1", "active");
    eventually(Duration::from_secs(20), || async {
        attempted(held).then_some(())
    })
    .await
    .expect("delivered once the partner is active again");
    let (_, health) = fund1
        .call("GET", &format!("/v1/subscriptions/{id}/health"), None)
        .await;
    assert_eq!(
        health["failed_attempts"], 0,
        "holding counted no attempt: {health}"
    );
    setup.engine.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_cp_17_without_a_partner_directory_every_relayed_call_is_refused() {
    let setup = Setup::start("no-partners").await;
    let fund = partner(&setup, "fund-1");
    for (method, path, body) in [
        (
            "POST",
            "/v1/subscriptions",
            Some(
                json!({"name": "x", "sink_kind": "webhook", "endpoint": setup.receiver.url("/x")}),
            ),
        ),
        ("GET", "/v1/subscriptions", None),
    ] {
        let (status, answer) = fund.call(method, path, body).await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (403, Some("delegated_relay_refused")),
            "{method} {path}"
        );
    }
    // The tenant's own calls are unaffected.
    assert_eq!(
        setup.api.call("GET", "/v1/subscriptions", None).await.0,
        200
    );
    setup.engine.stop();
}
