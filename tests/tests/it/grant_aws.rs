//! Delegated AWS grants (R-CP-7) against moto: the control plane's transport-free operations
//! (`setup_artifacts`, `put_grant`, the hardened probe) and a delivery through an assumed role.
//!
//! What moto cannot show: it enforces no trust policy, so *every* AssumeRole succeeds, with or
//! without an ExternalId. Against moto a grant is therefore always refused as
//! `trust_policy_unsafe` — exactly the unsafe role R-CP-7 describes — and a recorded grant can
//! never pass the hardened probe. The accepted path (a role that refuses the hub without the
//! ExternalId) is decided by `hub_core::sink::grant::check_trust`, tested against a stand-in STS
//! in `core/src/sink/grant.rs`; the delivery half of it (assume with the ExternalId, send with
//! the temporary credentials) runs here against moto.

use std::sync::Arc;

use serde_json::{json, Value};
use uuid::Uuid;

use hub_control::answer::Served;
use hub_control::auth::{mint_hs256, Mint, Principal};
use hub_control::config::{now_ms, ControlConfig};
use hub_control::service::{Control, Mutation};
use hub_core::model::{binding, SinkKind, Subscription, VerificationState};
use hub_core::sink::aws::{AwsSettings, OwnedKeys};
use hub_core::sink::credential::Credential;
use hub_core::sink::outcome::ErrorClass;
use hub_core::sink::{EventOut, Sinks};
use hub_tests::{aws_config, report, require, unique, AWS_ENDPOINT};

const SECRET: &str = "grant-test-secret-grant-test-secret";
const PRINCIPAL: &str = "arn:aws:iam::111111111111:role/streaming-hub";
const ROLE: &str = "arn:aws:iam::123456789012:role/tenant-delivery";

/// A control plane on the embedded store whose AWS calls go to `aws` (moto, or a closed port),
/// with the hub principal configured when `principal`.
async fn control(aws: &str, principal: bool) -> (Arc<Control>, Principal, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let aws = aws.to_owned();
    let config = ControlConfig::from_env(|k| match k {
        "STREAMING_HUB_JWT_HS256_SECRET" => Some(SECRET.into()),
        "STREAMING_HUB_AWS_ENDPOINT_URL" => Some(aws.clone()),
        "STREAMING_HUB_AWS_PRINCIPAL_ARN" if principal => Some(PRINCIPAL.into()),
        "AWS_ACCESS_KEY_ID" | "AWS_SECRET_ACCESS_KEY" if principal => Some("testing".into()),
        _ => None,
    })
    .expect("config");
    let (control, verifier) = config.build(dir.path()).await.expect("build");
    let tenant = format!("t-grant-{}", Uuid::now_v7().simple());
    let token = mint_hs256(
        SECRET.as_bytes(),
        &Mint {
            issuer: "access-manager",
            audience: "streaming-hub",
            subject: "u",
            tenant: &tenant,
            permissions: &["subscriptions:get", "subscriptions:post"],
            ttl_s: 600,
            now_s: u64::try_from(now_ms() / 1000).expect("now"),
        },
    )
    .expect("token");
    let who = verifier
        .verify(Some(&format!("Bearer {token}")))
        .expect("principal");
    (control, who, dir)
}

fn change<'a>(path: &'a str, key: &'a str, body: &'a [u8]) -> Mutation<'a> {
    Mutation {
        method: "PUT",
        path,
        key: Some(key),
        body,
    }
}

async fn create(control: &Control, who: &Principal, body: Value) -> Value {
    let bytes = body.to_string().into_bytes();
    let key = Uuid::now_v7().to_string();
    let m = Mutation {
        method: "POST",
        path: "/v1/subscriptions",
        key: Some(&key),
        body: &bytes,
    };
    control
        .create(who, m)
        .await
        .expect("created")
        .body
        .expect("view")
}

fn code(served: &Served) -> Option<&'static str> {
    served.as_ref().err().map(|e| e.code.as_str())
}

const QUEUE: &str = "arn:aws:sqs:us-east-1:123456789012:orders";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_cp_7_setup_artifacts_name_the_hub_principal_and_the_external_id() {
    let (control, who, _dir) = control(AWS_ENDPOINT, true).await;
    let sub = create(
        &control,
        &who,
        json!({"name": "q", "sink_kind": "sqs", "endpoint": QUEUE}),
    )
    .await;
    let id = sub["id"].as_str().expect("id");
    let art = control
        .setup_artifacts(&who, id)
        .await
        .expect("artifacts")
        .body
        .expect("view");
    let external = art["external_id"].as_str().expect("external id");
    assert!(
        external.contains(&id.replace('-', "")),
        "one per subscription"
    );
    let statement = &art["trust_policy"]["Statement"][0];
    assert_eq!(statement["Principal"]["AWS"], PRINCIPAL);
    assert_eq!(statement["Action"], "sts:AssumeRole");
    assert_eq!(
        statement["Condition"]["StringEquals"]["sts:ExternalId"],
        external
    );
    let allowed = &art["permissions_policy"]["Statement"][0];
    assert_eq!(
        (allowed["Action"].as_str(), allowed["Resource"].as_str()),
        (Some("sqs:SendMessage"), Some(QUEUE))
    );
    let link = art["cloudformation_quick_create_url"]
        .as_str()
        .expect("link");
    assert!(link.starts_with("https://console.aws.amazon.com/cloudformation/home?region=us-east-1"));
    assert!(
        link.contains(&format!("param_ExternalId={external}")),
        "{link}"
    );

    // A pull subscription takes no grant (nor a webhook or RabbitMQ one); a hub with no
    // principal cannot offer one.
    let hook = create(&control, &who, json!({"name": "h", "sink_kind": "pull"})).await;
    let refused = control
        .setup_artifacts(&who, hook["id"].as_str().expect("id"))
        .await;
    assert_eq!(code(&refused), Some("grant_unsupported"));
    let (bare, bare_who, _bare_dir) = control_without_principal().await;
    let sub = create(
        &bare,
        &bare_who,
        json!({"name": "q", "sink_kind": "sqs", "endpoint": QUEUE}),
    )
    .await;
    let refused = bare
        .setup_artifacts(&bare_who, sub["id"].as_str().expect("id"))
        .await;
    assert_eq!(code(&refused), Some("delegated_grants_unconfigured"));
    report("aws", "setup artifacts: trust policy with the ExternalId condition, permissions, quick-create link");
}

/// A new SQS subscription: its id, its grant's path, and its first read.
async fn queue_subscription(
    control: &Control,
    who: &Principal,
) -> (String, String, hub_control::answer::Answer) {
    let sub = create(
        control,
        who,
        json!({"name": "q", "sink_kind": "sqs", "endpoint": QUEUE}),
    )
    .await;
    let id = sub["id"].as_str().expect("id").to_owned();
    let before = control.get(who, &id).await.expect("read");
    let path = format!("/v1/subscriptions/{id}/delegated-grant");
    (id, path, before)
}

async fn control_without_principal() -> (Arc<Control>, Principal, tempfile::TempDir) {
    control(AWS_ENDPOINT, false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_cp_7_a_role_that_does_not_demand_the_external_id_is_refused_and_nothing_written() {
    require("moto", "127.0.0.1:5055");
    let (control, who, _dir) = control(AWS_ENDPOINT, true).await;
    let (id, path, before) = queue_subscription(&control, &who).await;
    let id = id.as_str();
    let body = json!({"role_arn": ROLE, "region": "us-east-1", "destination": QUEUE}).to_string();
    // moto lets anyone assume any role without an ExternalId: the unsafe role of R-CP-7.
    let refused = control
        .put_grant(&who, id, change(&path, "k-1", body.as_bytes()))
        .await;
    assert_eq!(code(&refused), Some("trust_policy_unsafe"));
    let after = control.get(&who, id).await.expect("read");
    assert_eq!(before.etag, after.etag, "nothing written");
    // The refusal released the key: the same key is answered afresh, not replayed.
    let again = control
        .put_grant(&who, id, change(&path, "k-1", body.as_bytes()))
        .await;
    assert_eq!(code(&again), Some("trust_policy_unsafe"));

    // Bad input: each a 422 (or 400 without a key), nothing written.
    let bad = [
        json!({"role_arn": "arn:aws:iam::123456789012:user/x", "region": "us-east-1"}),
        json!({"role_arn": ROLE, "region": "us-east-9"}),
        json!({"role_arn": ROLE}),
        json!({"role_arn": ROLE, "region": "us-east-1", "destination": "arn:aws:sqs:us-east-1:123456789012:other"}),
        json!({"role_arn": ROLE, "region": "us-east-1", "access_key_id": "AKIA"}),
    ];
    for (i, body) in bad.iter().enumerate() {
        let bytes = body.to_string().into_bytes();
        let key = format!("bad-{i}");
        let refused = control
            .put_grant(&who, id, change(&path, &key, &bytes))
            .await;
        assert_eq!(code(&refused), Some("validation_failed"), "{body}");
    }
    let unkeyed = Mutation {
        method: "PUT",
        path: &path,
        key: None,
        body: body.as_bytes(),
    };
    assert_eq!(
        code(&control.put_grant(&who, id, unkeyed).await),
        Some("missing_idempotency_key")
    );
    assert_eq!(control.get(&who, id).await.expect("read").etag, before.etag);
    report("aws", &format!("{AWS_ENDPOINT}: a role assumable without the ExternalId is refused (422 trust_policy_unsafe), nothing written"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_cp_7_sts_unreachable_answers_500_and_writes_nothing() {
    // A closed port: STS cannot answer the check.
    let (control, who, _dir) = control("http://127.0.0.1:9", true).await;
    let (id, path, before) = queue_subscription(&control, &who).await;
    let id = id.as_str();
    let body = json!({"role_arn": ROLE, "region": "us-east-1"}).to_string();
    let refused = control
        .put_grant(&who, id, change(&path, "k", body.as_bytes()))
        .await;
    let e = refused.as_ref().expect_err("refused");
    assert_eq!((e.code.as_str(), e.status()), ("sts_unavailable", 500));
    assert_eq!(
        control.get(&who, id).await.expect("read").etag,
        before.etag,
        "nothing written"
    );
}

/// A subscription of `kind` whose sealed credential is a grant on `ROLE`.
fn granted(control: &Control, endpoint: &str) -> Subscription {
    let mut sub = Subscription {
        endpoint: Some(endpoint.into()),
        verification_state: VerificationState::Active,
        ..Subscription::new("t-grant", "granted", SinkKind::Sqs, 0)
    };
    let grant = Credential::AwsRole {
        role_arn: ROLE.into(),
        region: "us-east-1".into(),
    };
    sub.secret = Some(
        control
            .keyring
            .seal(&grant.to_bytes(), &binding(&sub))
            .expect("sealed"),
    );
    sub
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_cp_7_deliveries_through_a_grant_use_the_assumed_roles_credentials() {
    require("moto", "127.0.0.1:5055");
    let sqs = aws_sdk_sqs::Client::new(&aws_config().await);
    let name = unique("hub-grant");
    let url = sqs
        .create_queue()
        .queue_name(&name)
        .send()
        .await
        .expect("queue")
        .queue_url
        .expect("url");
    let (control, _who, _dir) = control(AWS_ENDPOINT, true).await;
    let sub = granted(
        &control,
        &format!("arn:aws:sqs:us-east-1:123456789012:{name}"),
    );
    // The engine's path: open the sealed grant, assume the role with the ExternalId, send.
    let sinks = Sinks::new(
        control.policy.clone(),
        AwsSettings {
            endpoint_url: Some(AWS_ENDPOINT.into()),
            principal: Some(OwnedKeys {
                access_key_id: "testing".into(),
                secret_access_key: "testing".into(),
                session_token: None,
            }),
            principal_arn: Some(PRINCIPAL.into()),
            grant_template_url: String::new(),
        },
    )
    .expect("sinks");
    let ev = EventOut {
        id: Uuid::now_v7(),
        key: "loan.approved",
        source: "lender",
        tenant: "t-grant",
        schema_version: "1.0.0",
        time: "2026-12-01T00:00:00Z",
        subject: None,
        content_type: None,
        traceparent: None,
        tracestate: None,
        body: bytes::Bytes::from_static(br#"{"amount":1}"#),
    };
    let outcome = sinks.deliver(&control.keyring, &sub, &ev, now_ms()).await;
    assert!(outcome.success, "{outcome:?}");
    let got = sqs
        .receive_message()
        .queue_url(&url)
        .wait_time_seconds(2)
        .send()
        .await
        .expect("receive");
    let body = got.messages()[0].body().expect("body");
    assert!(body.contains("\"amount\":1"), "{body}");

    // The hardened probe (verify) refuses the same grant against moto: the role is assumable
    // without the ExternalId, so it never counts as verified.
    let probe = control.probe_destination(&sub, None).await;
    assert_eq!(probe.error_class, Some(ErrorClass::TrustPolicyUnsafe));
    report("aws", &format!("{AWS_ENDPOINT}: delivered to {name} with the assumed role's credentials; the hardened probe refuses moto's trust-anything role"));
}
