//! Edits reaching delivery: an active subscription's endpoint moves (R-CP-10, R-CP-2) only after
//! the new destination answers a probe made with the stored secret (a failed probe answers 422
//! `destination_probe_failed` with its classification and changes nothing); in the standalone
//! hub a write is in the engine's index when it answers (R-MA-3).

use std::time::Duration;

use serde_json::json;

use crate::delivery::{delivery_of, ingest_one, Setup, Tenant};
use crate::support::free_port;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_cp_10_an_active_webhook_moves_only_after_its_new_endpoint_answers_a_probe() {
    let Setup {
        env: _env, // first: dropped last, after the engine
        dir,
        receiver,
        engine,
        tenant,
        api,
        ..
    } = Setup::start("move").await;
    let (id, secret) = api
        .active_webhook("m", &receiver.url("/old"), json!({}))
        .await;
    let path = format!("/v1/subscriptions/{id}");
    let api = Tenant::with_permissions(
        &engine,
        dir.path(),
        &tenant,
        &[
            "subscriptions:get",
            "subscriptions:post",
            "subscriptions:patch",
        ],
    );

    let nowhere = format!("http://127.0.0.1:{}/hook", free_port());
    let (status, body) = api
        .call(
            "PATCH",
            &path,
            Some(json!({"schema_major": 1, "endpoint": nowhere})),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["code"], "destination_probe_failed");
    assert_eq!(body["error_class"], "connection_failed", "{body}");
    let (_, read) = api.call("GET", &path, None).await;
    assert_eq!(read["endpoint"], receiver.url("/old"), "nothing changed");

    let (status, moved) = api
        .call(
            "PATCH",
            &path,
            Some(json!({"schema_major": 1, "endpoint": receiver.url("/new")})),
        )
        .await;
    assert_eq!(status, 200, "{moved}");
    assert_eq!(moved["endpoint"], receiver.url("/new"));
    assert_eq!(moved["verification_state"], "active");
    let probe = receiver
        .received()
        .into_iter()
        .find(|r| r.path == "/new")
        .expect("the new endpoint was probed");
    assert!(probe.verifies_with(&secret), "with the stored secret");

    // The engine follows the revision log every 250 ms.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let event = ingest_one(&engine, &tenant, &[]).await;
    let got = delivery_of(&receiver, event).await;
    assert_eq!(
        got.map(|r| r.path),
        Some("/new".to_owned()),
        "deliveries go to the new endpoint"
    );
    engine.stop();
}

/// R-TR-4 (read-your-writes; R-MA-3 in one process): in the standalone hub a control-plane write answers only once the
/// engine's index has it, so an event posted right after the ping that activated its
/// subscription is delivered — no wait for the follower.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_tr_4_in_the_standalone_hub_an_event_right_after_a_ping_is_delivered() {
    let Setup {
        env: _env,
        dir: _dir,
        receiver,
        engine,
        tenant,
        api,
        ..
    } = Setup::start("right-after").await;
    api.active_webhook("now", &receiver.url("/now"), json!({}))
        .await;
    let event = ingest_one(&engine, &tenant, &[]).await;
    let got = delivery_of(&receiver, event).await;
    assert_eq!(
        got.map(|r| r.path),
        Some("/now".to_owned()),
        "the event posted right after the ping is delivered"
    );
    engine.stop();
}

/// R-CP-9 / R-DI-12: a rotation returns the new secret and the overlap's end; during the overlap
/// deliveries carry both signatures, so a receiver verifies with either secret; a second
/// rotation keeps only the newest previous one; a pull subscription has no secret to rotate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_cp_9_a_rotation_signs_with_both_secrets_during_the_overlap() {
    let Setup {
        env: _env,
        dir: _dir,
        receiver,
        engine,
        tenant,
        api,
        ..
    } = Setup::start("rotate").await;
    let (id, first) = api
        .active_webhook("r", &receiver.url("/r"), json!({}))
        .await;
    let rotate = format!("/v1/subscriptions/{id}/secret/rotate");
    let (status, rotated) = api.call("POST", &rotate, Some(json!({}))).await;
    assert_eq!(status, 200, "{rotated}");
    let second = rotated["secret"]
        .as_str()
        .expect("the new secret")
        .to_owned();
    assert_ne!(second, first);
    assert!(rotated["overlapUntil"].as_str().is_some(), "{rotated}");
    let (_, read) = api
        .call("GET", &format!("/v1/subscriptions/{id}"), None)
        .await;
    assert!(!read.to_string().contains("whsec_"), "no secret on a read");

    let e1 = ingest_one(&engine, &tenant, &[]).await;
    let got = delivery_of(&receiver, e1).await.expect("delivered");
    assert!(!got.header("x-lerian-signature-previous").is_empty());
    assert!(got.verifies_with(&second), "the new secret verifies");
    assert!(
        got.verifies_with(&first),
        "and the previous one, during the overlap"
    );

    let (status, again) = api.call("POST", &rotate, Some(json!({}))).await;
    assert_eq!(status, 200, "{again}");
    let third = again["secret"].as_str().expect("secret").to_owned();
    let e2 = ingest_one(&engine, &tenant, &[]).await;
    let got = delivery_of(&receiver, e2).await.expect("delivered");
    assert!(got.verifies_with(&third) && got.verifies_with(&second));
    assert!(
        !got.verifies_with(&first),
        "only the newest previous secret signs"
    );

    let (status, pull) = api
        .call(
            "POST",
            "/v1/subscriptions",
            Some(json!({"name": "p", "sink_kind": "pull"})),
        )
        .await;
    assert_eq!(status, 201);
    let (status, body) = api
        .call(
            "POST",
            &format!(
                "/v1/subscriptions/{}/secret/rotate",
                pull["id"].as_str().unwrap_or_default()
            ),
            Some(json!({})),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (422, Some("rotation_unsupported"))
    );
    engine.stop();
}

/// R-CP-9: once the overlap ends (shortened here to 1.5 s) only the new secret signs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_cp_9_after_the_overlap_only_the_new_secret_signs() {
    let Setup {
        env: _env,
        dir: _dir,
        receiver,
        engine,
        tenant,
        api,
        ..
    } = Setup::start_with(
        "overlap",
        crate::support::Backend::Embedded,
        &[("STREAMING_HUB_ROTATION_OVERLAP_MS", "1500")],
    )
    .await;
    let (id, first) = api
        .active_webhook("o", &receiver.url("/o"), json!({}))
        .await;
    let (status, rotated) = api
        .call(
            "POST",
            &format!("/v1/subscriptions/{id}/secret/rotate"),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 200, "{rotated}");
    let second = rotated["secret"].as_str().expect("secret").to_owned();
    let during = ingest_one(&engine, &tenant, &[]).await;
    let got = delivery_of(&receiver, during).await.expect("delivered");
    assert!(
        got.verifies_with(&first) && got.verifies_with(&second),
        "both during"
    );
    tokio::time::sleep(std::time::Duration::from_millis(2000)).await;
    let after = ingest_one(&engine, &tenant, &[]).await;
    let got = delivery_of(&receiver, after).await.expect("delivered");
    assert!(got.verifies_with(&second), "the new secret signs");
    assert!(
        !got.verifies_with(&first),
        "the previous one no longer does"
    );
    assert!(got.header("x-lerian-signature-previous").is_empty());
    engine.stop();
}
