//! The split deployment (issue 15, R-OP-1): `hub-control serve` and an engine as two processes on
//! one CQL keyspace, sharing key material by configuration. A subscription created and pinged
//! through the control process is delivered by the engine (which opens the secret the control
//! process sealed); what the engine holds — dead letters, health, pull pages — is read and
//! replayed through the control process; both stop cleanly on SIGTERM.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::delivery::{delivery_of, engine_env, ingest_one, start_engine, EngineEnv, Tenant};
use crate::graphql_live;
use crate::receiver::{Act, Receiver};
use crate::support::*;

/// A running `hub-control serve`.
pub(crate) struct ControlProcess {
    child: Child,
    http: String,
    log: std::path::PathBuf,
}

impl ControlProcess {
    pub(crate) fn start(
        data_dir: &std::path::Path,
        port: u16,
        env: &[(String, String)],
    ) -> ControlProcess {
        let log = data_dir.join("control.log");
        let file = std::fs::File::create(&log).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_hub-control"))
            .arg("serve")
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("STREAMING_HUB_STORE", "cql")
            .env("STREAMING_HUB_CQL_NODES", CQL)
            .env("STREAMING_HUB_DATA_DIR", data_dir)
            .env("STREAMING_HUB_CONTROL_ADDR", format!("127.0.0.1:{port}"))
            .env("STREAMING_HUB_LOG", "warn")
            .stderr(file)
            .spawn()
            .expect("hub-control starts");
        ControlProcess {
            child,
            http: format!("http://127.0.0.1:{port}"),
            log,
        }
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let r = reqwest::get(format!("{}{path}", self.http))
            .await
            .expect("request");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    pub(crate) async fn wait_ready(&self) {
        wait_ready(&self.http, "the control process").await;
    }

    /// SIGTERM, then a clean exit within a few seconds.
    pub(crate) fn stop(mut self) {
        stop_gracefully(&mut self.child);
    }
}

impl Drop for ControlProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        show_log_on_panic(&self.log, "the control process");
    }
}

/// Polls `read` for up to `within` until it answers `Some`.
pub(crate) async fn eventually<T, F, Fut>(within: Duration, mut read: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Some(v) = read().await {
            return Some(v);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// An engine and a control process on one CQL keyspace, sharing keys and a JWT secret; the
/// engine is told of changes by the control process (R-TR-4). Fields drop in order: the
/// processes before the keyspace.
struct Split {
    engine: Engine,
    control: ControlProcess,
    control_port: u16,
    jwt: String,
    env: EngineEnv,
    control_dir: tempfile::TempDir,
    _engine_dir: tempfile::TempDir,
}

impl Split {
    /// Both processes started and ready; `extra` goes to both.
    async fn start(name: &str, extra: &[(&str, &str)]) -> Split {
        let key = base64::engine::general_purpose::STANDARD.encode(rand::random::<[u8; 32]>());
        let jwt = format!("jwt-{}", Uuid::now_v7().simple());
        let control_port = free_port();
        let shared = [
            ("STREAMING_HUB_MASTER_KEYS", format!("k1:{key}")),
            ("STREAMING_HUB_JWT_HS256_SECRET", jwt.clone()),
            (
                "STREAMING_HUB_CONTROL_URL",
                format!("http://127.0.0.1:{control_port}"),
            ),
        ];
        let mut vars: Vec<(&str, &str)> = shared.iter().map(|(k, v)| (*k, v.as_str())).collect();
        vars.extend_from_slice(extra);
        let env = engine_env(Backend::Cql, &vars);
        let engine_dir = tempfile::tempdir().expect("tempdir");
        let control_dir = tempfile::tempdir().expect("tempdir");
        let group = format!("{name}-{}", Uuid::now_v7().simple());
        let engine = start_engine(engine_dir.path(), &group, free_port(), Backend::Cql, &env);
        let control = ControlProcess::start(control_dir.path(), control_port, &env.vars);
        engine.wait_ready().await;
        control.wait_ready().await;
        Split {
            engine,
            control,
            control_port,
            jwt,
            env,
            control_dir,
            _engine_dir: engine_dir,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_op_1_r_tr_4_control_process_and_engine_share_one_keyspace_changes_pushed() {
    // R-TR-4: the engine's own poll of the revision log is slowed to a minute, so only the
    // push can make a change visible fast.
    let Split {
        engine,
        control,
        jwt,
        env: _keyspace,
        control_dir: _control_dir,
        _engine_dir,
        ..
    } = Split::start("two-process", &[("STREAMING_HUB_FOLLOW_MS", "60000")]).await;

    let (status, health) = control.get("/health").await;
    assert_eq!(status, 200);
    let components: Vec<(&str, &str)> = health["components"]
        .as_array()
        .expect("components")
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or_default(),
                c["state"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        components,
        vec![("control_store", "up"), ("engine_store", "up")]
    );

    let tenant = format!("t-split-{}", Uuid::now_v7().simple());
    let token = token_signed(&jwt, &tenant, &["subscriptions:get", "subscriptions:post"]);
    let api = Tenant::at(&control.http, token);

    // Created and pinged through the control process; delivered by the engine, signed with the
    // secret the control process sealed.
    let good = Receiver::start().await;
    good.script(&[], Act::Status(204));
    let (good_id, secret) = api
        .active_webhook("good", &good.url("/in"), json!({}))
        .await;
    // R-TR-4: pushed to the engine at once (its own poll runs once a minute here).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let event = ingest_one(&engine, &tenant, &[]).await;
    let received = eventually(Duration::from_secs(20), || async {
        good.received()
            .into_iter()
            .find(|r| r.header("x-lerian-event-id") == event.to_string())
    })
    .await
    .expect("the engine delivers a subscription made through the control process");
    assert!(
        received.verifies_with(&secret),
        "signed with the sealed secret"
    );

    // A failing destination: the dead letter and the health are read through the control
    // process, and replayed through it.
    let bad = Receiver::start().await;
    bad.script(&[], Act::Status(204));
    let (bad_id, _) = api
        .active_webhook("bad", &bad.url("/in"), json!({"retry_schedule": [0]}))
        .await;
    bad.script(&[], Act::Status(500));
    // GraphQL's live outcomes from the control process: relayed by the engine through the store.
    let mut ws = graphql_live::connect(&control.http, api.token()).await;
    let query = "subscription($id: String!) { deliveryOutcomes(subscriptionId: $id) { \
                 eventId attempt outcome statusCode } }";
    graphql_live::send(
        &mut ws,
        json!({"id": "1", "type": "subscribe", "payload": {"query": query, "variables": {"id": bad_id}}}),
    )
    .await;
    // The engine reads outcome watches every second.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let failing = ingest_one(&engine, &tenant, &[]).await;
    let m = graphql_live::next(&mut ws).await;
    let o = &m["payload"]["data"]["deliveryOutcomes"];
    assert_eq!(
        (
            o["eventId"].as_str(),
            o["attempt"].as_u64(),
            o["outcome"].as_str(),
            o["statusCode"].as_u64()
        ),
        (
            Some(failing.to_string().as_str()),
            Some(1),
            Some("dead_lettered"),
            Some(500)
        ),
        "{m}"
    );
    let dead_path = format!("/v1/subscriptions/{bad_id}/dead-letters");
    let letters = eventually(Duration::from_secs(20), || async {
        let (status, body) = api.call("GET", &dead_path, None).await;
        assert_eq!(status, 200, "{body}");
        body["items"].as_array().filter(|a| !a.is_empty()).cloned()
    })
    .await
    .expect("a dead letter, read through the control process");
    assert_eq!(letters[0]["event_id"], failing.to_string());
    // Statistics reach the store at most once a second per lane.
    let health_path = format!("/v1/subscriptions/{bad_id}/health");
    let health = eventually(Duration::from_secs(10), || async {
        let (_, health) = api.call("GET", &health_path, None).await;
        (health["dead_letters"].as_u64() == Some(1)).then_some(health)
    })
    .await
    .expect("health counts the dead letter, read through the control process");
    assert_eq!(health["status"], "Failing", "{health}");
    bad.script(&[], Act::Status(204));
    let (status, replayed) = api
        .call("POST", &format!("{dead_path}/replay"), Some(json!({})))
        .await;
    assert_eq!((status, replayed["replayed"].as_u64()), (200, Some(1)));
    eventually(Duration::from_secs(40), || async {
        bad.received()
            .iter()
            .any(|r| {
                r.header("x-lerian-event-id") == failing.to_string() && r.act == Act::Status(204)
            })
            .then_some(())
    })
    .await
    .expect("the engine delivers what the control process replayed");
    let m = graphql_live::next(&mut ws).await;
    let o = &m["payload"]["data"]["deliveryOutcomes"];
    assert_eq!(
        (o["eventId"].as_str(), o["outcome"].as_str()),
        (Some(failing.to_string().as_str()), Some("delivered")),
        "the replay's outcome is relayed too: {m}"
    );
    drop(ws);

    // A pull subscription reads the engine's log through the control process.
    let (status, pull) = api
        .call(
            "POST",
            "/v1/subscriptions",
            Some(json!({"name": "reader", "sink_kind": "pull", "origin": "lender"})),
        )
        .await;
    assert_eq!(status, 201, "{pull}");
    let pull_id = pull["id"].as_str().expect("id").to_owned();
    let (status, page) = api
        .call(
            "GET",
            &format!("/v1/subscriptions/{pull_id}/events?after=0"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{page}");
    let seen: Vec<&str> = page["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|e| e["id"].as_str())
        .collect();
    assert!(
        seen.contains(&event.to_string().as_str()) && seen.contains(&failing.to_string().as_str()),
        "both events in the pull page: {page}"
    );
    let good_health = format!("/v1/subscriptions/{good_id}/health");
    let delivered = eventually(Duration::from_secs(10), || async {
        let (_, health) = api.call("GET", &good_health, None).await;
        (health["delivered"].as_u64() >= Some(1)).then_some(health)
    })
    .await
    .expect("the engine's delivery counted, read through the control process");
    assert_eq!(delivered["status"], "Healthy", "{delivered}");

    control.stop();
    engine.stop();
}

/// Issue 19's control-process fault, R-OP-1: the engine never depends on the control process.
/// Killed with SIGKILL in the middle of a stream of events, the control process takes nothing
/// with it: every event is delivered while it is gone; restarted on the same port it serves
/// again, and a subscription made through it reaches the engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_op_1_deliveries_go_on_while_the_control_process_is_killed_and_restarted() {
    let split = Split::start("control-restart", &[]).await;
    let (engine, jwt) = (&split.engine, &split.jwt);

    let tenant = format!("t-ctl-restart-{}", Uuid::now_v7().simple());
    let token = token_signed(jwt, &tenant, &["subscriptions:get", "subscriptions:post"]);
    let api = Tenant::at(&split.control.http, token.clone());
    let first = Receiver::start().await;
    first.script(&[], Act::Status(204));
    api.active_webhook("before", &first.url("/in"), json!({}))
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mut sent = Vec::new();
    for _ in 0..20 {
        sent.push(ingest_one(engine, &tenant, &[]).await);
    }
    let Split {
        engine,
        mut control,
        control_port,
        env,
        control_dir,
        _engine_dir,
        ..
    } = split;
    control.child.kill().expect("SIGKILL the control process");
    control.child.wait().expect("reaped");
    for _ in 0..40 {
        sent.push(ingest_one(&engine, &tenant, &[]).await);
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let all_delivered = || {
        let got: std::collections::HashSet<String> = first
            .received()
            .iter()
            .map(|r| r.header("x-lerian-event-id").to_owned())
            .collect();
        sent.iter().all(|id| got.contains(&id.to_string()))
    };
    eventually(Duration::from_secs(30), || async {
        all_delivered().then_some(())
    })
    .await
    .expect("every event delivered while the control process was gone");
    let (status, ready) = {
        let r = reqwest::get(format!("{}/ready", engine.http))
            .await
            .expect("engine /ready");
        (r.status().as_u16(), r.text().await.unwrap_or_default())
    };
    assert_eq!(
        status, 200,
        "the engine stays ready without its control process: {ready}"
    );
    drop(control);

    // Restarted on the same port and keyspace: it serves the same subscriptions, and a new one
    // made through it is delivered by the engine that never stopped.
    let control = ControlProcess::start(control_dir.path(), control_port, &env.vars);
    control.wait_ready().await;
    let api = Tenant::at(&control.http, token);
    let (status, listed) = api.call("GET", "/v1/subscriptions", None).await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(
        listed["items"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
    let second = Receiver::start().await;
    second.script(&[], Act::Status(204));
    api.active_webhook("after", &second.url("/in"), json!({}))
        .await;
    let after = eventually(Duration::from_secs(20), || async {
        let event = ingest_one(&engine, &tenant, &[]).await;
        delivery_of(&second, event).await.map(|_| event)
    })
    .await
    .expect("a subscription made through the restarted control process is delivered");
    assert!(
        delivery_of(&first, after).await.is_some(),
        "the first subscription still gets new events"
    );
    control.stop();
    engine.stop();
}
