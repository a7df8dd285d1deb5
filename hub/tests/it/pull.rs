//! Pull by `seq` end to end (R-CP-14, R-CP-11 pull half, R-DI-11 pull half): the
//! `streaming-hub` binary on either store, events written by HTTP ingest while readers page.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use uuid::Uuid;

use crate::delivery::{event_headers, Setup, Tenant};
use crate::support::*;

/// Posts one event of `tenant` to the engine's HTTP ingest; returns the status.
pub(crate) async fn ingest(
    client: &reqwest::Client,
    producer: &crate::support::Producer,
    tenant: &str,
    id: Uuid,
    key: &str,
) -> u16 {
    let mut post = producer
        .post(client, "lender")
        .body(format!(r#"{{"n":"{id}"}}"#));
    for (k, v) in event_headers(tenant, id) {
        let v = match k {
            "ce-type" => format!("studio.lerian.lender.{key}"),
            "ce-resourcetype" => key.split('.').next().unwrap_or_default().to_owned(),
            "ce-eventtype" => key.split('.').nth(1).unwrap_or_default().to_owned(),
            _ => v,
        };
        post = post.header(k, v);
    }
    post.send().await.expect("ingest").status().as_u16()
}

pub(crate) async fn create_pull(api: &Tenant, name: &str, extra: Value) -> String {
    let mut body = json!({"name": name, "sink_kind": "pull"});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let (status, created) = api.call("POST", "/v1/subscriptions", Some(body)).await;
    assert_eq!(status, 201, "create: {created}");
    assert_eq!(
        created["verification_state"], "active",
        "a pull subscription has nothing to probe: active at creation"
    );
    assert!(created.get("secret").is_none());
    created["id"].as_str().expect("id").to_owned()
}

/// One page: (ids in order, seqs in order, next_after).
async fn page(api: &Tenant, id: &str, query: &str) -> (Vec<String>, Vec<u64>, u64) {
    let (status, body) = api
        .call(
            "GET",
            &format!("/v1/subscriptions/{id}/events{query}"),
            None,
        )
        .await;
    assert_eq!(status, 200, "pull: {body}");
    let items = body["items"].as_array().cloned().unwrap_or_default();
    let ids = items
        .iter()
        .map(|i| i["id"].as_str().unwrap_or_default().to_owned())
        .collect();
    let seqs = items
        .iter()
        .map(|i| i["seq"].as_u64().unwrap_or(0))
        .collect();
    (ids, seqs, body["next_after"].as_u64().expect("next_after"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_cp_14_three_readers_see_every_event_once_in_seq_order_while_ingest_runs() {
    readers_see_every_event_once(Backend::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_cp_14_three_readers_see_every_event_once_in_seq_order_while_ingest_runs_cql() {
    readers_see_every_event_once(Backend::Cql).await;
}

/// 10,000 events over 20 tenants, each with a pull subscription, posted while three readers
/// page every subscription from its shared read position with small limits: together they see
/// each tenant's events exactly once, each reader in `seq` order, none skipped.
async fn readers_see_every_event_once(backend: Backend) {
    const TENANTS: usize = 20;
    const EVENTS: usize = 10_000;
    let Setup {
        env: _env, // first: dropped last, after the engine
        dir,
        receiver: _receiver,
        engine,
        tenant: base,
        api: _,
        ..
    } = Setup::start_on("pull", backend).await;
    let tenants: Vec<String> = (0..TENANTS).map(|i| format!("{base}-{i}")).collect();
    let mut subs = Vec::new();
    for t in &tenants {
        let api = Tenant::new(&engine, dir.path(), t);
        let id = create_pull(&api, "feed", json!({})).await;
        subs.push((api, id));
    }
    let subs = Arc::new(subs);
    let http = engine.producer();
    let writer = {
        let tenants = tenants.clone();
        tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut sent: HashMap<String, HashSet<String>> = HashMap::new();
            let mut flight = Vec::new();
            for i in 0..EVENTS {
                let tenant = tenants[i % TENANTS].clone();
                let id = Uuid::now_v7();
                sent.entry(tenant.clone())
                    .or_default()
                    .insert(id.to_string());
                let (client, http) = (client.clone(), http.clone());
                flight.push(async move {
                    assert_eq!(
                        ingest(&client, &http, &tenant, id, "loan_application.approved").await,
                        202
                    );
                });
                if flight.len() == 50 {
                    futures::future::join_all(flight.drain(..)).await;
                }
            }
            futures::future::join_all(flight).await;
            sent
        })
    };
    let reader = |n: usize| {
        let subs = subs.clone();
        tokio::spawn(async move {
            // (subscription index) → what this reader saw, in order.
            let mut seen: HashMap<usize, Vec<(u64, String)>> = HashMap::new();
            let deadline = Instant::now() + Duration::from_secs(300);
            let mut idle_rounds = 0;
            while Instant::now() < deadline && idle_rounds < 30 {
                let mut got = 0;
                for (i, (api, id)) in subs.iter().enumerate() {
                    let (ids, seqs, _) = page(api, id, &format!("?limit={}", 3 + n * 2)).await;
                    got += ids.len();
                    seen.entry(i).or_default().extend(seqs.into_iter().zip(ids));
                }
                idle_rounds = if got == 0 { idle_rounds + 1 } else { 0 };
                if got == 0 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            seen
        })
    };
    let readers: Vec<_> = (0..3).map(reader).collect();
    let sent = writer.await.expect("writer");
    let mut union: HashMap<usize, Vec<String>> = HashMap::new();
    for r in readers {
        for (i, items) in r.await.expect("reader") {
            let seqs: Vec<u64> = items.iter().map(|(s, _)| *s).collect();
            assert!(
                seqs.windows(2).all(|w| w[0] < w[1]),
                "a reader sees one subscription in seq order"
            );
            union
                .entry(i)
                .or_default()
                .extend(items.into_iter().map(|(_, id)| id));
        }
    }
    for (i, t) in tenants.iter().enumerate() {
        let got = union.remove(&i).unwrap_or_default();
        let unique: HashSet<String> = got.iter().cloned().collect();
        assert_eq!(got.len(), unique.len(), "{t}: no event twice");
        assert_eq!(&unique, &sent[t], "{t}: every event, none skipped");
    }
    eprintln!(
        "pull[{}]: {EVENTS} events over {TENANTS} tenants read once by three readers",
        backend.label()
    );
    engine.stop();
}

/// R-CP-14 / R-CP-11: `after` reads without moving the position; matching follows the
/// subscription's rules; a paused subscription reads empty pages; resume moves the position past
/// what arrived before it while `after` still reads it; another tenant's id is a 404; a webhook
/// subscription is not read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_cp_11_pull_pause_resume_and_after() {
    let Setup {
        env: _env,
        dir,
        receiver,
        engine,
        tenant,
        api,
        ..
    } = Setup::start("pull-pause").await;
    let client = reqwest::Client::new();
    let id = create_pull(
        &api,
        "approved only",
        json!({"event_types": ["loan_application.approved"]}),
    )
    .await;
    let (status, read) = api
        .call("GET", &format!("/v1/subscriptions/{id}"), None)
        .await;
    assert_eq!(status, 200);
    assert!(read.get("last_success_at").is_none());
    let mut approved = Vec::new();
    for i in 0..6 {
        let ev = Uuid::now_v7();
        let key = if i % 2 == 0 {
            "loan_application.approved"
        } else {
            "loan_application.rejected"
        };
        assert_eq!(
            ingest(&client, &engine.producer(), &tenant, ev, key).await,
            202
        );
        if i % 2 == 0 {
            approved.push(ev.to_string());
        }
    }
    let (ids, seqs, next) = page(&api, &id, "?after=0&limit=2").await;
    assert_eq!(
        ids,
        approved[..2].to_vec(),
        "matching events only, in seq order"
    );
    assert_eq!(seqs, vec![1, 3]);
    assert_eq!(next, 3);
    let (ids, _, next) = page(&api, &id, "?after=3").await;
    assert_eq!(ids, approved[2..].to_vec());
    assert_eq!(next, 6, "the cursor passes non-matching events");
    let (ids, _, _) = page(&api, &id, "").await;
    assert_eq!(
        ids, approved,
        "`after` reads left the position at the start"
    );
    let (ids, _, next) = page(&api, &id, "").await;
    assert!(ids.is_empty(), "the position moved past what was read");
    assert_eq!(next, 6);
    let (_, read) = api
        .call("GET", &format!("/v1/subscriptions/{id}"), None)
        .await;
    assert!(
        read.get("last_success_at").is_some(),
        "a read marks last_success_at: {read}"
    );

    let (status, _) = api
        .call("POST", &format!("/v1/subscriptions/{id}/pause"), None)
        .await;
    assert_eq!(status, 200);
    let during = Uuid::now_v7();
    assert_eq!(
        ingest(
            &client,
            &engine.producer(),
            &tenant,
            during,
            "loan_application.approved"
        )
        .await,
        202
    );
    let (ids, _, _) = page(&api, &id, "").await;
    assert!(
        ids.is_empty(),
        "a paused pull subscription reads empty pages"
    );
    let (ids, _, _) = page(&api, &id, "?after=0").await;
    assert!(ids.is_empty(), "even with after");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let (status, _) = api
        .call("POST", &format!("/v1/subscriptions/{id}/resume"), None)
        .await;
    assert_eq!(status, 200);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let later = Uuid::now_v7();
    assert_eq!(
        ingest(
            &client,
            &engine.producer(),
            &tenant,
            later,
            "loan_application.approved"
        )
        .await,
        202
    );
    let (ids, _, _) = page(&api, &id, "").await;
    assert_eq!(
        ids,
        vec![later.to_string()],
        "resume moved the position past the paused time"
    );
    let (ids, _, _) = page(&api, &id, "?after=6").await;
    assert_eq!(
        ids,
        vec![during.to_string(), later.to_string()],
        "after still reads older events"
    );

    let other = Tenant::new(&engine, dir.path(), &format!("{tenant}-other"));
    let (status, body) = other
        .call("GET", &format!("/v1/subscriptions/{id}/events"), None)
        .await;
    assert_eq!(status, 404, "another tenant's subscription: {body}");
    let (status, _) = api
        .call(
            "GET",
            &format!("/v1/subscriptions/{id}/events?limit=0"),
            None,
        )
        .await;
    assert_eq!(status, 400);
    let (hook, _) = api
        .active_webhook("hook", &receiver.url("/h"), json!({}))
        .await;
    let (status, body) = api
        .call("GET", &format!("/v1/subscriptions/{hook}/events"), None)
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (422, Some("not_a_pull_subscription"))
    );
    engine.stop();
}
