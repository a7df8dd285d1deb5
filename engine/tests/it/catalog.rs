//! R-CP-15: keys of accepted events join the control plane's catalog (standalone hub, in-process
//! control plane), so subscriptions can name them and unknown keys are refused from then on.

use hub_control::auth::{mint_hs256, Mint};
use serde_json::Value;

use crate::support::*;

fn valid_event(id: &str) -> Vec<(&'static str, String)> {
    vec![
        ("ce-specversion", "1.0".into()),
        ("ce-id", id.into()),
        ("ce-source", "lender".into()),
        (
            "ce-type",
            "studio.lerian.lender.loan_application.approved".into(),
        ),
        ("ce-time", "2026-11-29T20:17:42Z".into()),
        ("ce-schemaversion", "2.1.0".into()),
        ("ce-resourcetype", "loan_application".into()),
        ("ce-eventtype", "approved".into()),
        ("ce-tenantid", "t-cat".into()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_cp_15_accepted_event_keys_join_the_catalog() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = Engine::start(
        dir.path(),
        &format!("cat-{}", uuid::Uuid::now_v7().simple()),
        free_port(),
        Backend::Embedded,
    );
    engine.wait_ready().await;
    let secret =
        std::fs::read_to_string(dir.path().join("jwt-hs256.secret")).expect("generated secret");
    let now = u64::try_from(hub_control::config::now_ms() / 1000).expect("now");
    let token = mint_hs256(
        secret.trim().as_bytes(),
        &Mint {
            issuer: "access-manager",
            audience: "streaming-hub",
            subject: "test",
            tenant: "t-cat",
            permissions: &["subscriptions:get", "subscriptions:post"],
            ttl_s: 600,
            now_s: now,
        },
    )
    .expect("token");
    let client = reqwest::Client::new();
    let catalog = || async {
        client
            .get(format!("{}/v1/catalog", engine.http))
            .bearer_auth(&token)
            .send()
            .await
            .expect("catalog")
            .json::<Value>()
            .await
            .expect("json")
    };
    assert_eq!(
        catalog().await["items"],
        serde_json::json!([]),
        "empty before any event"
    );

    let mut post = client
        .post(format!("{}/ingest/lender", engine.http))
        .body("{}");
    for (k, v) in valid_event(&uuid::Uuid::now_v7().to_string()) {
        post = post.header(k, v);
    }
    assert_eq!(post.send().await.expect("ingest").status().as_u16(), 202);

    let items = catalog().await["items"].clone();
    assert_eq!(
        items,
        serde_json::json!([{"eventKey": "loan_application.approved", "origin": "lender", "majors": [2]}])
    );
    // From now on the catalog is checked: a key it does not list is refused.
    let refused = client
        .post(format!("{}/v1/subscriptions", engine.http))
        .bearer_auth(&token)
        .header("x-idempotency", "c1")
        .body(r#"{"name":"n","sink_kind":"pull","event_types":["loan_application.rejected"]}"#)
        .send()
        .await
        .expect("create");
    assert_eq!(refused.status().as_u16(), 422);
    let body: Value = refused.json().await.expect("json");
    assert_eq!(body["code"], "unknown_event_type");
    engine.stop();
}
