//! Ingest back-pressure (issue 17): while delivery is behind its bound, HTTP ingest answers 429
//! with `Retry-After` (nothing stored) and `/metrics` says so; once delivery catches up, ingest
//! goes on, and every event accepted is delivered.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use uuid::Uuid;

use crate::delivery::{event_headers, Setup};
use crate::receiver::Counter;
use crate::support::Backend;

/// Posts one event; its status, `Retry-After` and body.
async fn post_event(setup: &Setup<Counter>, id: Uuid) -> (u16, Option<u64>, Value) {
    let mut request = setup
        .engine
        .post_ingest(&reqwest::Client::new(), "lender")
        .body(r#"{"amount":"1.00"}"#);
    for (k, v) in event_headers(&setup.tenant, id) {
        request = request.header(k, v);
    }
    let response = request.send().await.expect("ingest");
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok()?.parse().ok());
    (
        status,
        retry_after,
        response.json().await.unwrap_or(Value::Null),
    )
}

/// An engine with two workers, so one destination runs one attempt at a time (R-DI-3), a lag
/// bound of half a second and pauses of at most `max_pause_ms`; one webhook to a receiver that
/// takes 300 ms an event (~3 a second).
async fn slow_destination(name: &str, max_pause_ms: &str) -> Setup<Counter> {
    let setup = Setup::counting(
        name,
        Backend::Embedded,
        &[
            ("STREAMING_HUB_DELIVERY_WORKERS", "2"),
            ("STREAMING_HUB_BACKPRESSURE_LAG_MS", "500"),
            ("STREAMING_HUB_BACKPRESSURE_MAX_PAUSE_MS", max_pause_ms),
        ],
    )
    .await;
    setup
        .api
        .active_webhook("slow", &setup.receiver.url("/slow"), json!({}))
        .await;
    setup.receiver.delay("/slow", Duration::from_millis(300));
    setup
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_in_10_http_ingest_answers_429_with_retry_after_while_delivery_is_behind() {
    let setup = slow_destination("backpressure", "3000").await;
    let counter = &setup.receiver;

    // Events arrive faster than the destination takes them (~3 a second): delivery falls
    // behind, and ingest is held back.
    let mut accepted = HashSet::new();
    let mut refused = None;
    let deadline = Instant::now() + Duration::from_secs(30);
    while refused.is_none() && Instant::now() < deadline {
        let id = Uuid::now_v7();
        match post_event(&setup, id).await {
            (202, _, _) => {
                accepted.insert(id.to_string());
            }
            (429, retry_after, body) => refused = Some((id, retry_after, body)),
            other => panic!("unexpected answer {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (refused_id, retry_after, body) = refused.expect("a 429 within 30 s");
    assert_eq!(body["code"], "ingest_throttled", "{body}");
    assert!(
        retry_after.is_some_and(|s| (1..=3).contains(&s)),
        "Retry-After within the longest pause: {retry_after:?}"
    );
    let metrics = setup.engine.metrics().await;
    assert_eq!(metrics.get("streaming_hub_ingest_backpressure"), Some(&1));
    assert!(metrics["streaming_hub_ingest_throttled_total"] >= 1);
    assert!(metrics["streaming_hub_ingest_backpressure_pauses_total"] >= 1);
    let text = reqwest::get(format!("{}/metrics", setup.engine.http))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("body");
    for shown in [
        "streaming_hub_ingest_backpressure_bound{kind=\"delivery_lag_seconds\"} 0.5",
        "streaming_hub_ingest_backpressure_bound{kind=\"max_pause_seconds\"} 3",
        "streaming_hub_delivery_lag_seconds ",
    ] {
        assert!(text.contains(shown), "/metrics shows {shown}");
    }

    // The destination recovers: the backlog drains, the gate opens, the next event is taken.
    counter.delay("/slow", Duration::ZERO);
    let deadline = Instant::now() + Duration::from_secs(60);
    let last = loop {
        let id = Uuid::now_v7();
        match post_event(&setup, id).await {
            (202, _, _) => break id,
            (429, _, _) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            other => panic!("ingest did not go on within 60 s: {other:?}"),
        }
    };
    accepted.insert(last.to_string());

    // Every accepted event is delivered; the refused one was never stored.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let delivered: HashSet<String> = counter.counts().into_keys().map(|(_, id)| id).collect();
        if accepted.is_subset(&delivered) {
            assert!(
                !delivered.contains(&refused_id.to_string()),
                "a refused event was delivered"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {} accepted events delivered",
            accepted.intersection(&delivered).count(),
            accepted.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        setup
            .engine
            .metrics()
            .await
            .get("streaming_hub_ingest_backpressure"),
        Some(&0)
    );
    setup.engine.stop();
}

/// Waits (bounded) until `/metrics` shows ingest held back.
async fn wait_held_back(setup: &Setup<Counter>, within: Duration) {
    let deadline = Instant::now() + within;
    while setup
        .engine
        .metrics()
        .await
        .get("streaming_hub_ingest_backpressure")
        != Some(&1)
    {
        assert!(Instant::now() < deadline, "ingest never held back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn stored(metrics: &std::collections::HashMap<String, u64>) -> u64 {
    metrics
        .get("streaming_hub_ingest_verdicts_total{verdict=\"stored\"}")
        .copied()
        .unwrap_or(0)
}

/// R-IN-7 with back-pressure: held back, the Kafka consumer pauses its partitions (no record is
/// stored while the gate is closed); once delivery catches up it resumes where it stopped, and
/// every produced event is delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_in_7_kafka_ingest_pauses_while_delivery_is_behind_and_loses_nothing() {
    // It produces to the shared `lender` topic, which a test holding the broker may delete.
    let _broker = crate::support::exclusive_broker().await;
    // Long enough that the gate stays closed while the test looks.
    let setup = slow_destination("backpressure-kafka", "60000").await;
    let counter = &setup.receiver;

    let mut produced = crate::delivery::produce(&setup.tenant, 60).await;
    wait_held_back(&setup, Duration::from_secs(30)).await;
    // Whatever the shards held when the gate closed is stored by now.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = stored(&setup.engine.metrics().await);
    produced.extend(crate::delivery::produce(&setup.tenant, 60).await);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let metrics = setup.engine.metrics().await;
    assert_eq!(
        metrics.get("streaming_hub_ingest_backpressure"),
        Some(&1),
        "still held back"
    );
    assert_eq!(stored(&metrics), before, "nothing consumed while held back");

    counter.delay("/slow", Duration::ZERO);
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let delivered: HashSet<String> = counter.counts().into_keys().map(|(_, id)| id).collect();
        let missing = produced
            .keys()
            .filter(|id| !delivered.contains(*id))
            .count();
        if missing == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{missing} of {} produced events not delivered",
            produced.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    setup.engine.stop();
}
