//! HTTP ingest (R-IN-10): the same verdicts, dedup and sequencing as Kafka, with the answers
//! SPEC gives — 202 accepted (with its seq), 200 duplicate, 202 dropped, 400 with the quarantine
//! reason in the error shape.

use serde_json::Value;
use uuid::Uuid;

use crate::delivery::{event_headers, Setup};
use crate::support::{ingest_token_signed, token, Producer};

async fn post(producer: &Producer, headers: &[(&str, String)]) -> (u16, Value) {
    post_as(producer, "lender", headers).await
}

async fn post_as(producer: &Producer, source: &str, headers: &[(&str, String)]) -> (u16, Value) {
    let mut request = producer
        .post(&reqwest::Client::new(), source)
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
    let http = &setup.engine.producer();
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
    let http = &setup.engine.producer();
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

/// R-SEC-4: HTTP ingest takes only a producer's token with the `ingest` permission naming the
/// source, checked before the verdict: none or a forged one is 401, a tenant's token or one for
/// another source 403, and nothing refused is stored. The token never reaches the store (a
/// quarantined record keeps its headers, but not `authorization`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_sec_4_http_ingest_requires_a_producer_token_for_the_source() {
    let setup = Setup::start("ingest-auth").await;
    let engine = &setup.engine;
    let client = reqwest::Client::new();
    let secret =
        std::fs::read_to_string(setup.dir.path().join("jwt-hs256.secret")).expect("secret");
    let send = |token: Option<String>| {
        let mut post = client
            .post(format!("{}/ingest/lender", engine.http))
            .body("{}");
        if let Some(t) = token {
            post = post.bearer_auth(t);
        }
        for (k, v) in event_headers(&setup.tenant, Uuid::now_v7()) {
            post = post.header(k, v);
        }
        async move {
            let r = post.send().await.expect("ingest");
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let refusals = [
        (None, 401, "unauthorized"),
        (Some("not-a-jwt".to_owned()), 401, "unauthorized"),
        (
            Some(ingest_token_signed("someone-elses-secret", &["lender"])),
            401,
            "unauthorized",
        ),
        (
            Some(token(
                setup.dir.path(),
                &setup.tenant,
                &["subscriptions:post", "admin"],
            )),
            403,
            "forbidden",
        ),
        (
            Some(ingest_token_signed(&secret, &["crm"])),
            403,
            "forbidden",
        ),
    ];
    for (token, status, code) in refusals {
        let (got, body) = send(token).await;
        assert_eq!((got, body["code"].as_str()), (status, Some(code)), "{body}");
    }
    let (status, first) = send(Some(ingest_token_signed(&secret, &["crm", "lender"]))).await;
    assert_eq!(
        (status, first["seq"].as_u64()),
        (202, Some(1)),
        "the first accepted event takes seq 1: nothing refused was stored: {first}"
    );

    // A malformed record is quarantined with its headers, the bearer token not among them.
    let producer_token = ingest_token_signed(&secret, &["lender"]);
    let (status, _) = {
        let r = client
            .post(format!("{}/ingest/lender", engine.http))
            .bearer_auth(&producer_token)
            .header("ce-specversion", "1.0")
            .header("ce-id", "not-a-uuid")
            .body("{}")
            .send()
            .await
            .expect("ingest");
        (r.status().as_u16(), ())
    };
    assert_eq!(status, 400);
    let admin = token(setup.dir.path(), "ops", &["admin"]);
    let quarantine = client
        .get(format!("{}/admin/quarantine", engine.http))
        .bearer_auth(&admin)
        .send()
        .await
        .expect("quarantine")
        .text()
        .await
        .expect("body");
    assert!(quarantine.contains("not-a-uuid"), "{quarantine}");
    assert!(
        !quarantine.to_ascii_lowercase().contains("authorization")
            && !quarantine.contains(&producer_token),
        "the producer's token is not kept"
    );
    setup.engine.stop();
}

/// R-SEC-4: beside Kafka, HTTP ingest is off unless turned on: the route answers 404
/// `http_ingest_off`, token or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_sec_4_http_ingest_is_off_beside_kafka_unless_turned_on() {
    let setup = Setup::start_with(
        "ingest-off",
        crate::support::Backend::Embedded,
        &[("STREAMING_HUB_HTTP_INGEST", "false")],
    )
    .await;
    let producer = setup.engine.producer();
    let (status, body) = post(&producer, &event_headers(&setup.tenant, Uuid::now_v7())).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("http_ingest_off")),
        "{body}"
    );
    setup.engine.stop();
}

/// Issue 19's sweep on HTTP ingest (R-IN-10, R-CP-18): a header that is not UTF-8 and a value
/// over the value limit are quarantined (400 with the reason); a body over the listener's limit
/// is 413 and a header block over 32 KiB 431, both before anything is judged; none is an event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_in_10_bad_input_on_http_ingest_gets_a_code_and_is_never_an_event() {
    let setup = Setup::start("ingest-bad").await;
    let producer = setup.engine.producer();
    let client = reqwest::Client::new();
    let send = |headers: Vec<(&'static str, reqwest::header::HeaderValue)>, body: Vec<u8>| {
        let mut post = producer.post(&client, "lender").body(body);
        for (k, v) in headers {
            post = post.header(k, v);
        }
        async move {
            let r = post.send().await.expect("ingest");
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let event = |id: Uuid| -> Vec<(&'static str, reqwest::header::HeaderValue)> {
        event_headers(&setup.tenant, id)
            .into_iter()
            .map(|(k, v)| {
                (
                    k,
                    reqwest::header::HeaderValue::from_str(&v).expect("value"),
                )
            })
            .collect()
    };

    let mut not_utf8 = event(Uuid::now_v7());
    not_utf8.retain(|(k, _)| *k != "ce-subject");
    not_utf8.push((
        "ce-subject",
        reqwest::header::HeaderValue::from_bytes(b"loan-\xff\xfe").expect("opaque bytes"),
    ));
    let (status, body) = send(not_utf8, b"{}".to_vec()).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("quarantined")),
        "{body}"
    );

    let (status, body) = send(event(Uuid::now_v7()), vec![b'x'; 100 * 1024]).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("quarantined")),
        "{body}"
    );

    let (status, body) = send(event(Uuid::now_v7()), vec![b'x'; 3 * 1024 * 1024]).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (413, Some("payload_too_large")),
        "{body}"
    );

    let mut huge = event(Uuid::now_v7());
    huge.push((
        "x-padding",
        reqwest::header::HeaderValue::from_str(&"p".repeat(40 * 1024)).expect("value"),
    ));
    let (status, body) = send(huge, b"{}".to_vec()).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (431, Some("headers_too_large")),
        "{body}"
    );

    let admin = crate::support::token(setup.dir.path(), "ops", &["admin"]);
    let inbox = setup.engine.admin_events(&admin, &setup.tenant).await;
    assert_eq!(inbox["items"], serde_json::json!([]), "none is an event");
    setup.engine.stop();
}

/// Issue 19's clock skew, R-IN-3 and R-IN-8: a producer whose clock is far off still writes
/// valid events. A `ce-time` decades in the past or centuries ahead is accepted and kept as
/// sent, and `seq` follows arrival, never the producer's clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_in_8_events_with_a_skewed_ce_time_are_accepted_and_seq_follows_arrival() {
    let setup = Setup::start("ingest-clock-skew").await;
    let http = &setup.engine.producer();
    let times = [
        "2999-12-31T23:59:59.999999999Z",
        "1970-01-01T00:00:00Z",
        "2026-11-29T20:17:42+09:30",
        "2000-02-29T12:00:00-23:59",
    ];
    let mut seqs = Vec::new();
    for time in times {
        let mut event = event_headers(&setup.tenant, Uuid::now_v7());
        for (k, v) in event.iter_mut() {
            if *k == "ce-time" {
                *v = time.into();
            }
        }
        let (status, answer) = post(http, &event).await;
        assert_eq!(
            (status, answer["verdict"].as_str()),
            (202, Some("accepted")),
            "ce-time {time}: {answer}"
        );
        seqs.push(answer["seq"].as_u64().expect("a seq"));
    }
    let first = seqs[0];
    let arrival: Vec<u64> = (first..first + times.len() as u64).collect();
    assert_eq!(seqs, arrival, "seq is the order of arrival");

    let admin = crate::support::token(setup.dir.path(), "ops", &["admin"]);
    let inbox = setup.engine.admin_events(&admin, &setup.tenant).await;
    let stored: Vec<(u64, String)> = inbox["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|e| {
            let seq = e["seq"].as_u64().expect("seq");
            (seq, e["time"].as_str().unwrap_or_default().to_owned())
        })
        .collect();
    let sent: Vec<(u64, String)> = arrival
        .into_iter()
        .zip(times.iter().map(|t| t.to_string()))
        .collect();
    assert_eq!(stored, sent, "listed in seq order, each time kept as sent");
    setup.engine.stop();
}
