//! R-CP-15: keys of accepted events join the control plane's catalog (standalone hub, in-process
//! control plane), so subscriptions can name them and unknown keys are refused from then on.

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
    // Events come over HTTP only: on Kafka the engine follows a source nobody writes, so other
    // tests' events on the shared topics never reach this catalog.
    let engine = Engine::start_with(
        dir.path(),
        &format!("cat-{}", uuid::Uuid::now_v7().simple()),
        free_port(),
        Backend::Embedded,
        &[("STREAMING_HUB_KAFKA_SOURCES", "catalog")],
    );
    engine.wait_ready().await;
    let token = token(
        dir.path(),
        "t-cat",
        &["subscriptions:get", "subscriptions:post"],
    );
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

    let mut post = engine.post_ingest(&client, "lender").body("{}");
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

/// `/admin` reads every tenant's records: 401 without a token, 403 for a tenant's token, 200 for
/// an operator's (`admin`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_cp_1_admin_needs_an_operator_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = Engine::start(
        dir.path(),
        &format!("adm-{}", uuid::Uuid::now_v7().simple()),
        free_port(),
        Backend::Embedded,
    );
    engine.wait_ready().await;
    let client = reqwest::Client::new();
    let url = format!("{}/admin/quarantine", engine.http);
    let status = |t: Option<String>| {
        let mut req = client.get(&url);
        if let Some(t) = t {
            req = req.bearer_auth(t);
        }
        async move { req.send().await.expect("admin").status().as_u16() }
    };
    assert_eq!(status(None).await, 401);
    assert_eq!(
        status(Some(token(dir.path(), "t-1", &["subscriptions:get"]))).await,
        403
    );
    assert_eq!(
        status(Some(token(dir.path(), "ops", &["admin"]))).await,
        200
    );
    assert_eq!(
        client
            .get(format!("{}/metrics", engine.http))
            .send()
            .await
            .expect("metrics")
            .status()
            .as_u16(),
        200,
        "metrics stay open for scrapers"
    );
    engine.stop();
}
