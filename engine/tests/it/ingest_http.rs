//! HTTP ingest (R-IN-10): the same verdicts, dedup and sequencing as Kafka, with the answers
//! SPEC gives — 202 accepted (with its seq), 200 duplicate, 202 dropped, 400 with the quarantine
//! reason in the error shape.

use serde_json::Value;
use uuid::Uuid;

use crate::delivery::{event_headers, Setup};

async fn post(http: &str, headers: &[(&str, String)]) -> (u16, Value) {
    post_as(http, "lender", headers).await
}

async fn post_as(http: &str, source: &str, headers: &[(&str, String)]) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{http}/ingest/{source}"))
        .body(r#"{"amount":"1.00"}"#);
    for (k, v) in headers {
        request = request.header(*k, v);
    }
    let response = request.send().await.expect("ingest");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_in_10_http_ingest_answers_accepted_duplicate_dropped_and_quarantined() {
    let setup = Setup::start("ingest-http").await;
    let http = &setup.engine.http;
    let event = event_headers(&setup.tenant, Uuid::now_v7());
    let (status, first) = post(http, &event).await;
    assert_eq!(
        (status, first["verdict"].as_str()),
        (202, Some("accepted")),
        "{first}"
    );
    let seq = first["seq"].as_u64().expect("a seq");
    let (status, again) = post(http, &event).await;
    assert_eq!(
        (status, again["verdict"].as_str()),
        (200, Some("duplicate")),
        "{again}"
    );
    let (_, next) = post(http, &event_headers(&setup.tenant, Uuid::now_v7())).await;
    assert_eq!(next["seq"].as_u64(), Some(seq + 1), "the tenant's next seq");

    let mut system = event_headers(&setup.tenant, Uuid::now_v7());
    system.push(("ce-systemevent", "true".into()));
    let (status, dropped) = post(http, &system).await;
    assert_eq!(
        (status, dropped["verdict"].as_str()),
        (202, Some("dropped")),
        "{dropped}"
    );

    let mut malformed = event_headers(&setup.tenant, Uuid::now_v7());
    malformed.retain(|(k, _)| *k != "ce-id");
    let (status, refused) = post(http, &malformed).await;
    assert_eq!(
        (status, refused["code"].as_str()),
        (400, Some("quarantined")),
        "{refused}"
    );
    assert!(refused["reason"].as_str().is_some_and(|r| !r.is_empty()));
    setup.engine.stop();
}

/// R-SEC-4: a producer cannot forge the hub's own events: source `hub` (any case) is refused
/// before anything is judged or stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_sec_4_http_ingest_refuses_the_hubs_own_source() {
    let setup = Setup::start("ingest-hub-source").await;
    let http = &setup.engine.http;
    for source in ["hub", "HUB"] {
        let mut forged = event_headers(&setup.tenant, Uuid::now_v7());
        for (k, v) in forged.iter_mut() {
            if *k == "ce-source" {
                *v = "hub".into();
            }
        }
        let (status, refused) = post_as(http, source, &forged).await;
        assert_eq!(
            (status, refused["code"].as_str()),
            (403, Some("source_reserved")),
            "{refused}"
        );
    }
    // Nothing stored: the tenant's first real event takes seq 1.
    let (_, first) = post(http, &event_headers(&setup.tenant, Uuid::now_v7())).await;
    assert_eq!(first["seq"].as_u64(), Some(1), "{first}");
    setup.engine.stop();
}
