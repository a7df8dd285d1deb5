//! The SQS and EventBridge sinks end to end (SPEC §4, R-SK-1, R-CP-6): the `streaming-hub`
//! binary, real Kafka, and moto (SQS, EventBridge) started by `scripts/services`, reached through
//! the operator's `STREAMING_HUB_AWS_ENDPOINT_URL`. An EventBridge rule targeting an SQS queue
//! lets the test read what the hub put on the bus.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use aws_sdk_sqs::types::MessageSystemAttributeName;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::delivery::{produce, Setup, Tenant};
use crate::support::*;

const MOTO: &str = "http://127.0.0.1:5055";
const ACCOUNT: &str = "123456789012";
const REGION: &str = "us-east-1";
const ENV: &[(&str, &str)] = &[("STREAMING_HUB_AWS_ENDPOINT_URL", MOTO)];

fn sqs() -> aws_sdk_sqs::Client {
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
        .region(aws_sdk_sqs::config::Region::new(REGION))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "testing", "testing", None, None, "tests",
        ))
        .endpoint_url(MOTO)
        .build();
    aws_sdk_sqs::Client::from_conf(config)
}

fn eventbridge() -> aws_sdk_eventbridge::Client {
    let config = aws_sdk_eventbridge::Config::builder()
        .behavior_version(aws_sdk_eventbridge::config::BehaviorVersion::latest())
        .region(aws_sdk_eventbridge::config::Region::new(REGION))
        .credentials_provider(aws_sdk_eventbridge::config::Credentials::new(
            "testing", "testing", None, None, "tests",
        ))
        .endpoint_url(MOTO)
        .build();
    aws_sdk_eventbridge::Client::from_conf(config)
}

/// A fresh queue: (name, its URL on moto).
async fn queue() -> (String, String) {
    let name = format!("hub-it-{}", Uuid::now_v7().simple());
    let url = sqs()
        .create_queue()
        .queue_name(&name)
        .send()
        .await
        .expect("moto on 127.0.0.1:5055 (scripts/services up)")
        .queue_url
        .expect("queue url");
    (name, url)
}

/// One message as the test reads it: its body and string attributes.
struct Got {
    body: String,
    attributes: HashMap<String, String>,
}

/// Receives from `url` until `want` messages pass `keep` or `limit` passes.
async fn receive(url: &str, want: usize, limit: Duration, keep: impl Fn(&Got) -> bool) -> Vec<Got> {
    let client = sqs();
    let deadline = tokio::time::Instant::now() + limit;
    let mut got = Vec::new();
    while got.len() < want && tokio::time::Instant::now() < deadline {
        let out = client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .message_attribute_names("All")
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .wait_time_seconds(1)
            .send()
            .await
            .expect("receive");
        for m in out.messages() {
            let attributes = m
                .message_attributes()
                .map(|a| {
                    a.iter()
                        .filter_map(|(k, v)| Some((k.clone(), v.string_value()?.to_owned())))
                        .collect()
                })
                .unwrap_or_default();
            let g = Got {
                body: m.body().unwrap_or_default().to_owned(),
                attributes,
            };
            if let Some(handle) = m.receipt_handle() {
                let _ = client
                    .delete_message()
                    .queue_url(url)
                    .receipt_handle(handle)
                    .send()
                    .await;
            }
            if keep(&g) {
                got.push(g);
            }
        }
    }
    got
}

/// Creates a subscription of `kind` to `endpoint` and onboards it with moto's test key.
async fn onboarded(api: &Tenant, kind: &str, endpoint: &str) -> String {
    let (status, created) = api
        .call(
            "POST",
            "/v1/subscriptions",
            Some(
                json!({"name": kind, "sink_kind": kind, "endpoint": endpoint, "origin": "lender"}),
            ),
        )
        .await;
    assert_eq!(status, 201, "create: {created}");
    assert_eq!(created["verification_state"], "pending_verification");
    let id = created["id"].as_str().expect("id").to_owned();
    let (status, put) = api
        .call(
            "PUT",
            &format!("/v1/subscriptions/{id}/credential"),
            Some(json!({"access_key_id": "testing", "secret_access_key": "testing-secret"})),
        )
        .await;
    assert_eq!(status, 200, "credential: {put}");
    assert_eq!(put["verification_state"], "active");
    assert!(!put.to_string().contains("testing-secret"));
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_sk_1_kafka_events_reach_an_sqs_queue_once_with_ce_attributes() {
    let _broker = exclusive_broker().await;
    let Setup {
        env: _env, // first: dropped last, after the engine
        dir: _dir,
        receiver: _receiver,
        engine,
        tenant,
        api,
        ..
    } = Setup::start_with("sqs", Backend::Embedded, ENV).await;
    let (name, url) = queue().await;
    onboarded(
        &api,
        "sqs",
        &format!("https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{name}"),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let sent = produce(&tenant, 200).await;
    let got = receive(&url, sent.len(), Duration::from_secs(60), |g| {
        g.attributes.get("ce-type").map(String::as_str) != Some("destination.ping")
    })
    .await;
    let ids: Vec<&str> = got
        .iter()
        .filter_map(|g| g.attributes.get("ce-id").map(String::as_str))
        .collect();
    assert_eq!(
        ids.iter().copied().collect::<HashSet<_>>().len(),
        sent.len(),
        "every event"
    );
    assert_eq!(ids.len(), sent.len(), "each once");
    for g in &got {
        let id = &g.attributes["ce-id"];
        assert_eq!(
            g.body.as_bytes(),
            sent[id].as_slice(),
            "the payload is the body"
        );
        assert_eq!(
            g.attributes["ce-type"], "loan_application.approved",
            "R-SK-1: the plain key"
        );
        assert_eq!(g.attributes["ce-tenantid"], tenant);
        assert_eq!(g.attributes["ce-source"], "lender");
        assert!(
            g.attributes.len() <= 10,
            "SQS carries at most 10 attributes"
        );
    }
    eprintln!(
        "sqs: {} events from Kafka sent to {name} once each",
        sent.len()
    );
    engine.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_sk_1_kafka_events_reach_an_eventbridge_bus_with_the_plain_key() {
    let _broker = exclusive_broker().await;
    let Setup {
        env: _env,
        dir: _dir,
        receiver: _receiver,
        engine,
        tenant,
        api,
        ..
    } = Setup::start_with("eventbridge", Backend::Embedded, ENV).await;
    let eb = eventbridge();
    let bus = format!("hub-it-{}", Uuid::now_v7().simple());
    let arn = eb
        .create_event_bus()
        .name(&bus)
        .send()
        .await
        .expect("bus")
        .event_bus_arn
        .expect("bus arn");
    let (qname, qurl) = queue().await;
    eb.put_rule()
        .name("to-queue")
        .event_bus_name(&bus)
        .event_pattern(json!({"source": ["studio.lerian.streaming-hub"]}).to_string())
        .send()
        .await
        .expect("rule");
    eb.put_targets()
        .rule("to-queue")
        .event_bus_name(&bus)
        .targets(
            aws_sdk_eventbridge::types::Target::builder()
                .id("q")
                .arn(format!("arn:aws:sqs:{REGION}:{ACCOUNT}:{qname}"))
                .build()
                .expect("target"),
        )
        .send()
        .await
        .expect("target");
    onboarded(&api, "eventbridge", &arn).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let sent = produce(&tenant, 50).await;
    let got = receive(&qurl, sent.len(), Duration::from_secs(60), |g| {
        !g.body.contains("\"destination.ping\"")
    })
    .await;
    let events: Vec<Value> = got
        .iter()
        .map(|g| serde_json::from_str(&g.body).expect("an EventBridge event"))
        .collect();
    let ids: HashSet<String> = events
        .iter()
        .filter_map(|e| e["detail"]["id"].as_str().map(str::to_owned))
        .collect();
    let want: HashSet<String> = sent.keys().cloned().collect();
    assert_eq!(ids, want, "every event reaches the bus");
    assert_eq!(events.len(), want.len(), "each once");
    for e in &events {
        assert_eq!(
            e["detail-type"], "loan_application.approved",
            "DetailType: the plain key"
        );
        assert_eq!(
            e["detail"]["type"], "loan_application.approved",
            "Detail.type too"
        );
        assert_eq!(
            e["source"], "studio.lerian.streaming-hub",
            "Source: the hub"
        );
        assert_eq!(
            e["detail"]["source"], "lender",
            "the producer stays in the detail"
        );
        assert!(
            e["detail"]["data"].is_object(),
            "JSON payloads as JSON: {e}"
        );
    }
    eprintln!(
        "eventbridge: {} events from Kafka put on {bus} once each",
        sent.len()
    );
    engine.stop();
}

/// R-CP-6 for AWS kinds: a queue that does not exist fails the credential probe (classified,
/// nothing stored); a tenant cannot point the hub at a host (R-SK-2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_cp_6_a_missing_queue_fails_onboarding_and_stores_nothing() {
    let Setup {
        env: _env,
        dir: _dir,
        receiver: _receiver,
        engine,
        tenant: _,
        api,
        ..
    } = Setup::start_with("sqs-missing", Backend::Embedded, ENV).await;
    let (status, created) = api
        .call(
            "POST",
            "/v1/subscriptions",
            Some(json!({"name": "gone", "sink_kind": "sqs",
                "endpoint": format!("arn:aws:sqs:{REGION}:{ACCOUNT}:hub-none-{}", Uuid::now_v7().simple())})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().expect("id");
    let (status, body) = api
        .call(
            "PUT",
            &format!("/v1/subscriptions/{id}/credential"),
            Some(json!({"access_key_id": "testing", "secret_access_key": "testing"})),
        )
        .await;
    assert_eq!(
        (status, body["error_class"].as_str()),
        (422, Some("destination_missing")),
        "{body}"
    );
    let (_, read) = api
        .call("GET", &format!("/v1/subscriptions/{id}"), None)
        .await;
    assert_eq!(read["verification_state"], "pending_verification");
    for (kind, endpoint) in [
        ("sqs", "https://127.0.0.1/123456789012/q"),
        (
            "sqs",
            "https://sqs.us-east-1.amazonaws.com.evil.example/123456789012/q",
        ),
        (
            "eventbridge",
            "arn:aws:events:us-east-1:123456789012:event-bus/x?endpoint=https://10.0.0.1",
        ),
    ] {
        let (status, body) = api
            .call(
                "POST",
                "/v1/subscriptions",
                Some(json!({"name": "bad", "sink_kind": kind, "endpoint": endpoint})),
            )
            .await;
        assert_eq!(
            (status, body["code"].as_str()),
            (422, Some("invalid_endpoint")),
            "{endpoint}: {body}"
        );
    }
    let (status, body) = api
        .call(
            "PUT",
            &format!("/v1/subscriptions/{id}/credential"),
            Some(json!({"username": "guest", "password": "guest"})),
        )
        .await;
    assert_eq!(status, 422, "an AWS kind takes an AWS key pair: {body}");
    engine.stop();
}
