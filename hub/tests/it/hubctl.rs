//! `hubctl` against a running standalone hub (R-TR-3): create a pull subscription, list it, tail
//! its events as they are stored, and the exit codes of refusals.

use std::process::{Command, Output};

use serde_json::{json, Value};
use uuid::Uuid;

use crate::delivery::Setup;
use crate::pull::ingest;
use crate::support::*;

/// `hubctl`, built beside this test binary by `cargo test --workspace` (it is hub-control's).
fn hubctl_path() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test binary");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir");
    let path = dir.join("hubctl");
    assert!(
        path.exists(),
        "{} is missing: build it with `cargo build -p hub-control --bin hubctl` (the workspace test run does)",
        path.display()
    );
    path
}

pub(crate) fn hubctl(addr: &str, token: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = Command::new(hubctl_path());
    cmd.arg("--addr").arg(addr).env_remove("HUBCTL_TOKEN");
    if let Some(t) = token {
        cmd.env("HUBCTL_TOKEN", t);
    }
    cmd.args(args).output().expect("hubctl runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_tr_3_hubctl_creates_lists_tails_and_says_what_failed() {
    let setup = Setup::start("hubctl").await;
    let addr = setup.engine.http.clone();
    let every = [
        "subscriptions:get",
        "subscriptions:post",
        "subscriptions:patch",
        "subscriptions:delete",
    ];
    let api = crate::delivery::Tenant::with_permissions(
        &setup.engine,
        setup.dir.path(),
        &setup.tenant,
        &every,
    );
    let token = api.token().to_owned();
    let tok = Some(token.as_str());

    let made = hubctl(
        &addr,
        tok,
        &[
            "--json",
            "subscriptions",
            "create",
            "--name",
            "feed",
            "--kind",
            "pull",
        ],
    );
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let made: Value = serde_json::from_str(stdout(&made).trim()).expect("one JSON object");
    assert_eq!(made["verification_state"], "active");
    let id = made["id"].as_str().expect("id").to_owned();

    let listed = hubctl(&addr, tok, &["subscriptions", "list"]);
    assert!(listed.status.success());
    let table = stdout(&listed);
    assert!(
        table.starts_with("ID ") && table.contains(&id) && table.contains("feed"),
        "{table}"
    );

    let http = reqwest::Client::new();
    let mut produced = Vec::new();
    for _ in 0..3 {
        let event = Uuid::now_v7();
        assert_eq!(
            ingest(
                &http,
                &setup.engine.producer(),
                &setup.tenant,
                event,
                "loan.approved"
            )
            .await,
            202
        );
        produced.push(event.to_string());
    }
    let tail = hubctl(
        &addr,
        tok,
        &[
            "--json", "events", "tail", &id, "--after", "0", "--count", "3",
        ],
    );
    assert!(
        tail.status.success(),
        "{}",
        String::from_utf8_lossy(&tail.stderr)
    );
    let tailed: Vec<String> = stdout(&tail)
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).expect("a JSON line per event")["id"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(tailed, produced);

    // A webhook that always fails dead-letters its one event; hubctl lists and replays it.
    let (hook, _) = setup
        .api
        .active_webhook(
            "failing",
            &setup.receiver.url("/fail"),
            json!({"retry_schedule": [0]}),
        )
        .await;
    setup
        .receiver
        .script(&[], crate::receiver::Act::Status(500));
    tokio::time::sleep(std::time::Duration::from_millis(800)).await; // the index learns of it
    let event = crate::delivery::ingest_one(&setup.engine, &setup.tenant, &[]).await;
    let mut listed = String::new();
    for _ in 0..100 {
        let out = hubctl(&addr, tok, &["--json", "dead-letters", "list", &hook]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        listed = stdout(&out);
        if listed.contains(&event.to_string()) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        listed.contains(&event.to_string()),
        "the dead letter is listed: {listed}"
    );
    let health = hubctl(&addr, tok, &["health", &hook]);
    assert!(
        stdout(&health).starts_with("Failing"),
        "{}",
        stdout(&health)
    );
    setup
        .receiver
        .script(&[], crate::receiver::Act::Status(204));
    let replay = hubctl(&addr, tok, &["dead-letters", "replay", &hook]);
    assert_eq!(stdout(&replay).trim(), "replayed 1");

    let missing = hubctl(
        &addr,
        tok,
        &["subscriptions", "get", &Uuid::now_v7().to_string()],
    );
    assert_eq!(missing.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("subscription_not_found"));
    let anonymous = hubctl(&addr, None, &["subscriptions", "list"]);
    assert_eq!(anonymous.status.code(), Some(3));
    let stale = hubctl(
        &addr,
        tok,
        &[
            "subscriptions",
            "edit",
            &id,
            "--schema-major",
            "1",
            "--if-match",
            "\"stale\"",
        ],
    );
    assert_eq!(
        stale.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&stale.stderr)
    );
    let unreachable = hubctl(
        &format!("http://127.0.0.1:{}", free_port()),
        tok,
        &["catalog"],
    );
    assert_eq!(unreachable.status.code(), Some(7));
    let catalog = hubctl(&addr, tok, &["catalog"]);
    assert!(catalog.status.success() && stdout(&catalog).contains("EVENT KEY"));
    setup.engine.stop();
}
