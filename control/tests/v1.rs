//! REST `/v1` end to end through the router, on the real embedded control store (a redb file in a
//! temporary directory), with real tokens. Named by requirement.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use hub_control::auth::{mint_hs256, Mint};
use hub_control::config::{now_ms, ControlConfig};
use serde_json::{json, Value};
use tower::ServiceExt;

const SECRET: &str = "v1-test-secret-v1-test-secret-v1";
const ALL: &[&str] = &[
    "subscriptions:get",
    "subscriptions:post",
    "subscriptions:patch",
    "subscriptions:delete",
];

/// Which control store a test runs on: every test runs on both.
#[derive(Debug, Clone, Copy)]
enum Store {
    Embedded,
    /// The CQL server started by `scripts/services up` (keyspace `hub_control_v1_it`).
    Cql,
}

struct Hub {
    router: Router,
    /// The service behind the router, for what the engine writes beside the API (delivery
    /// marks).
    control: Arc<hub_control::service::Control>,
    /// Makes this test's tenants unique, so runs on the shared CQL keyspace never meet.
    ns: String,
    _dir: tempfile::TempDir,
}

async fn hub(store: Store) -> Hub {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = ControlConfig::from_env(|k| match (k, store) {
        ("STREAMING_HUB_JWT_HS256_SECRET", _) => Some(SECRET.into()),
        ("STREAMING_HUB_ALLOW_PRIVATE_HOSTS", _) => Some("127.0.0.1".into()),
        ("STREAMING_HUB_STORE", Store::Cql) => Some("cql".into()),
        ("STREAMING_HUB_CQL_KEYSPACE", Store::Cql) => Some("hub_control_v1_it".into()),
        _ => None,
    })
    .expect("config");
    let (control, verifier) = config.build(dir.path()).await.expect("build");
    Hub {
        router: hub_control::http::router(control.clone(), verifier),
        control,
        ns: uuid::Uuid::now_v7().simple().to_string(),
        _dir: dir,
    }
}

impl Hub {
    fn token(&self, tenant: &str, perms: &[&str]) -> String {
        token(&format!("{}-{tenant}", self.ns), perms)
    }
}

/// Runs an `async fn(Store)` test once per store.
macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {
        mod embedded {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::Store::Embedded).await })*
        }
        mod cql {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::Store::Cql).await })*
        }
    };
}

fn token(tenant: &str, perms: &[&str]) -> String {
    let now = u64::try_from(now_ms() / 1000).expect("now");
    let m = Mint {
        issuer: "access-manager",
        audience: "streaming-hub",
        subject: "u",
        tenant,
        permissions: perms,
        ttl_s: 600,
        now_s: now,
    };
    mint_hs256(SECRET.as_bytes(), &m).expect("mint")
}

struct Answer {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    raw: Vec<u8>,
    json: Value,
}

async fn call(
    hub: &Hub,
    method: &str,
    path: &str,
    tok: Option<&str>,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    call_bytes(hub, method, path, tok, headers, body.as_bytes().to_vec()).await
}

/// As `call`, with a body of any bytes.
async fn call_bytes(
    hub: &Hub,
    method: &str,
    path: &str,
    tok: Option<&str>,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Answer {
    let mut req = Request::builder().method(method).uri(path);
    if let Some(t) = tok {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let response = hub
        .router
        .clone()
        .oneshot(req.body(Body::from(body)).expect("request"))
        .await
        .expect("response");
    let status = response.status();
    let headers = response.headers().clone();
    let raw = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes()
        .to_vec();
    let json = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    Answer {
        status,
        headers,
        raw,
        json,
    }
}

async fn read_sub(hub: &Hub, tok: &str, id: &str) -> Answer {
    let path = format!("/v1/subscriptions/{id}");
    call(hub, "GET", &path, Some(tok), &[], "").await
}

fn webhook(name: &str) -> String {
    json!({"name": name, "sink_kind": "webhook", "endpoint": "http://127.0.0.1:9/hook"}).to_string()
}

async fn create(hub: &Hub, tok: &str, key: &str, body: &str) -> Answer {
    call(
        hub,
        "POST",
        "/v1/subscriptions",
        Some(tok),
        &[("x-idempotency", key), ("content-type", "application/json")],
        body,
    )
    .await
}

async fn r_cp_1_no_token_is_401_and_a_missing_permission_403(store: Store) {
    let hub = hub(store).await;
    let a = call(&hub, "GET", "/v1/subscriptions", None, &[], "").await;
    assert_eq!(
        (a.status, a.json["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("unauthorized"))
    );
    let reader = hub.token("t-1", &["subscriptions:get"]);
    let a = create(&hub, &reader, "k1", &webhook("w")).await;
    assert_eq!(
        (a.status, a.json["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("forbidden"))
    );
}

async fn r_cp_3_create_returns_the_secret_once_and_reads_never_show_it(store: Store) {
    let hub = hub(store).await;
    let tok = hub.token("t-1", ALL);
    let a = create(&hub, &tok, "k1", &webhook("orders")).await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.json);
    let secret = a.json["secret"]
        .as_str()
        .expect("secret on create")
        .to_owned();
    assert!(secret.starts_with("whsec_"));
    assert_eq!(a.json["verification_state"], "pending_verification");
    assert_eq!(
        (a.json["enabled"].as_bool(), a.json["paused"].as_bool()),
        (Some(true), Some(false))
    );
    assert!(
        a.json.get("origin").is_none(),
        "fields without a value are omitted"
    );
    let id = a.json["id"].as_str().expect("id").to_owned();
    let read = read_sub(&hub, &tok, &id).await;
    assert_eq!(read.status, StatusCode::OK);
    assert!(read.headers.get("etag").is_some());
    let list = call(&hub, "GET", "/v1/subscriptions", Some(&tok), &[], "").await;
    for answer in [&read, &list] {
        let text = String::from_utf8_lossy(&answer.raw);
        assert!(
            !text.contains(&secret) && !text.contains("whsec_"),
            "no secret on a read: {text}"
        );
    }
}

async fn r_cp_13_idempotency_replay_conflict_and_missing_key(store: Store) {
    let hub = hub(store).await;
    let tok = hub.token("t-1", ALL);
    let missing = call(
        &hub,
        "POST",
        "/v1/subscriptions",
        Some(&tok),
        &[],
        &webhook("a"),
    )
    .await;
    assert_eq!(
        (missing.status, missing.json["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("missing_idempotency_key"))
    );
    let first = create(&hub, &tok, "key-1", &webhook("a")).await;
    let replay = create(&hub, &tok, "key-1", &webhook("a")).await;
    assert_eq!(replay.status, StatusCode::CREATED);
    assert_eq!(replay.raw, first.raw, "byte for byte, secret included");
    assert_eq!(replay.headers["x-idempotency-replayed"], "true");
    let other = create(&hub, &tok, "key-1", &webhook("b")).await;
    assert_eq!(
        (other.status, other.json["code"].as_str()),
        (StatusCode::CONFLICT, Some("idempotency_conflict"))
    );
    let list = call(&hub, "GET", "/v1/subscriptions", Some(&tok), &[], "").await;
    assert_eq!(
        list.json["items"].as_array().map(Vec::len),
        Some(1),
        "one subscription"
    );
    // A key is the tenant's own: another tenant may use the same key.
    let b = create(&hub, &hub.token("t-2", ALL), "key-1", &webhook("a")).await;
    assert_eq!(b.status, StatusCode::CREATED);
}

async fn r_cp_13_two_simultaneous_creates_with_one_key_make_one_subscription(store: Store) {
    let hub = Arc::new(hub(store).await);
    let tok = hub.token("t-1", ALL);
    let runs: Vec<_> = (0..8)
        .map(|_| {
            let (hub, tok) = (hub.clone(), tok.clone());
            tokio::spawn(async move { create(&hub, &tok, "same", &webhook("once")).await.status })
        })
        .collect();
    let mut statuses = Vec::new();
    for r in runs {
        statuses.push(r.await.expect("join"));
    }
    assert!(
        statuses
            .iter()
            .all(|s| *s == StatusCode::CREATED || *s == StatusCode::CONFLICT),
        "{statuses:?}"
    );
    let list = call(&hub, "GET", "/v1/subscriptions", Some(&tok), &[], "").await;
    assert_eq!(list.json["items"].as_array().map(Vec::len), Some(1));
}

async fn r_cp_2_names_are_unique_per_tenant_until_deleted(store: Store) {
    let hub = hub(store).await;
    let tok = hub.token("t-1", ALL);
    assert_eq!(
        create(&hub, &tok, "k1", &webhook("dup")).await.status,
        StatusCode::CREATED
    );
    let taken = create(&hub, &tok, "k2", &webhook("dup")).await;
    assert_eq!(
        (taken.status, taken.json["code"].as_str()),
        (StatusCode::CONFLICT, Some("subscription_name_taken"))
    );
    // The refused request wrote nothing, so its key is free for a corrected request.
    let id = create(&hub, &tok, "k3", &webhook("dup-2")).await.json["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let first_id = call(&hub, "GET", "/v1/subscriptions", Some(&tok), &[], "")
        .await
        .json["items"][0]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let del = call(
        &hub,
        "DELETE",
        &format!("/v1/subscriptions/{first_id}"),
        Some(&tok),
        &[("x-idempotency", "d1")],
        "",
    )
    .await;
    assert_eq!(del.status, StatusCode::NO_CONTENT);
    assert_eq!(
        call(
            &hub,
            "GET",
            &format!("/v1/subscriptions/{first_id}"),
            Some(&tok),
            &[],
            ""
        )
        .await
        .status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        create(&hub, &tok, "k4", &webhook("dup")).await.status,
        StatusCode::CREATED,
        "the name is free again"
    );
    assert_ne!(id, first_id);
}

async fn r_cp_10_patch_with_etags(store: Store) {
    let hub = hub(store).await;
    let tok = hub.token("t-1", ALL);
    let created = create(&hub, &tok, "k", &webhook("p")).await;
    let id = created.json["id"].as_str().expect("id").to_owned();
    let etag = created.headers["etag"].to_str().expect("etag").to_owned();
    let path = format!("/v1/subscriptions/{id}");
    let patch = |key: &'static str, if_match: Option<&'static str>, body: Value| {
        let (hub, tok, path) = (&hub, tok.clone(), path.clone());
        async move {
            let mut headers = vec![("x-idempotency", key)];
            if let Some(m) = if_match {
                headers.push(("if-match", m));
            }
            call(hub, "PATCH", &path, Some(&tok), &headers, &body.to_string()).await
        }
    };
    let no_major = patch("p0", None, json!({"name": "q"})).await;
    assert_eq!(
        (no_major.status, no_major.json["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("validation_failed"))
    );
    let malformed = patch("p1", Some("not-a-tag"), json!({"schema_major": 1})).await;
    assert_eq!(
        (malformed.status, malformed.json["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("bad_request"))
    );
    let leaked: &'static str = Box::leak(etag.clone().into_boxed_str());
    let ok = patch(
        "p2",
        Some(leaked),
        json!({"schema_major": 2, "name": "renamed", "timeout_ms": 5000}),
    )
    .await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.json);
    assert_eq!(
        (
            ok.json["name"].as_str(),
            ok.json["schema_major"].as_u64(),
            ok.json["timeout_ms"].as_u64()
        ),
        (Some("renamed"), Some(2), Some(5000))
    );
    assert_ne!(ok.headers["etag"].to_str().expect("etag"), etag);
    // A delivery marked by the engine moves the revision but not the ETag: an edit made
    // with the ETag read before it still applies.
    hub.control
        .store
        .mark_deliveries(vec![hub_control::store::DeliveryMark {
            tenant: format!("{}-t-1", hub.ns),
            subscription: id.parse().expect("uuid"),
            success: true,
            at_ms: now_ms(),
        }])
        .await
        .expect("mark");
    let marked = call(&hub, "GET", &path, Some(&tok), &[], "").await;
    assert!(
        marked.json["last_success_at"].is_string(),
        "{}",
        marked.json
    );
    assert_eq!(marked.headers["etag"], ok.headers["etag"]);
    let after_mark: &'static str = Box::leak(
        ok.headers["etag"]
            .to_str()
            .expect("etag")
            .to_owned()
            .into_boxed_str(),
    );
    let applied = patch(
        "p2b",
        Some(after_mark),
        json!({"schema_major": 2, "name": "marked"}),
    )
    .await;
    assert_eq!(applied.status, StatusCode::OK, "{}", applied.json);
    let ok = applied;
    // Any other change counts: a pause moves the ETag.
    assert_eq!(
        call(&hub, "POST", &format!("{path}/pause"), Some(&tok), &[], "")
            .await
            .status,
        StatusCode::OK
    );
    let fresh: &'static str = Box::leak(
        ok.headers["etag"]
            .to_str()
            .expect("etag")
            .to_owned()
            .into_boxed_str(),
    );
    let stale = patch("p3", Some(fresh), json!({"schema_major": 1})).await;
    assert_eq!(
        (stale.status, stale.json["code"].as_str()),
        (
            StatusCode::PRECONDITION_FAILED,
            Some("subscription_changed")
        )
    );
    let read = call(&hub, "GET", &path, Some(&tok), &[], "").await;
    assert_eq!(
        (
            read.json["paused"].as_bool(),
            read.json["enabled"].as_bool()
        ),
        (Some(true), Some(false)),
        "edits never touch states"
    );
}

async fn r_cp_11_pause_and_resume_are_repeatable(store: Store) {
    let hub = hub(store).await;
    let tok = hub.token("t-1", ALL);
    let id = create(&hub, &tok, "k", &webhook("pr")).await.json["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let path = format!("/v1/subscriptions/{id}");
    for (action, paused) in [
        ("pause", true),
        ("pause", true),
        ("resume", false),
        ("resume", false),
    ] {
        let r = call(
            &hub,
            "POST",
            &format!("{path}/{action}"),
            Some(&tok),
            &[],
            "",
        )
        .await;
        assert_eq!((r.status, r.raw.len()), (StatusCode::OK, 0), "{action}");
        let read = call(&hub, "GET", &path, Some(&tok), &[], "").await;
        assert_eq!(
            (
                read.json["paused"].as_bool(),
                read.json["enabled"].as_bool()
            ),
            (Some(paused), Some(!paused))
        );
    }
}

async fn r_sec_2_destinations_are_checked_before_any_write(store: Store) {
    let hub = hub(store).await;
    let tok = hub.token("t-1", ALL);
    for (endpoint, code) in [
        ("https://10.0.0.1/hook", "destination_not_allowed"),
        ("https://0xa.1/hook", "destination_not_allowed"), // 10.0.0.1 in inet_aton hex
        (
            "https://[::ffff:169.254.169.254]/",
            "destination_not_allowed",
        ),
        ("ftp://127.0.0.1/", "invalid_endpoint"),
    ] {
        let body =
            json!({"name": endpoint, "sink_kind": "webhook", "endpoint": endpoint}).to_string();
        let r = create(&hub, &tok, endpoint, &body).await;
        assert_eq!(
            (r.status, r.json["code"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some(code)),
            "{endpoint}"
        );
    }
    assert_eq!(
        call(&hub, "GET", "/v1/subscriptions", Some(&tok), &[], "")
            .await
            .json["items"],
        json!([]),
        "nothing written"
    );
}

async fn bad_input_gets_a_4xx_with_the_error_body_and_writes_nothing(store: Store) {
    let hub = hub(store).await;
    let tok = hub.token("t-1", ALL);
    let malformed = create(&hub, &tok, "k1", "{\"name\":").await;
    assert_eq!(
        (malformed.status, malformed.json["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("bad_request"))
    );
    let wrong_type = create(
        &hub,
        &tok,
        "k2",
        &json!({"name": 5, "sink_kind": "webhook"}).to_string(),
    )
    .await;
    assert_eq!(wrong_type.status, StatusCode::UNPROCESSABLE_ENTITY);
    let unknown = create(
        &hub,
        &tok,
        "k3",
        &json!({"name": "n", "sink_kind": "pull", "colour": 1}).to_string(),
    )
    .await;
    assert_eq!(unknown.status, StatusCode::UNPROCESSABLE_ENTITY);
    let huge = create(
        &hub,
        &tok,
        "k4",
        &format!("{{\"name\":\"{}\"}}", "x".repeat(100_000)),
    )
    .await;
    assert_eq!(
        (huge.status, huge.json["code"].as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("payload_too_large"))
    );
    let req = Request::builder()
        .method("GET")
        .uri("/v1/subscriptions")
        .header(
            "authorization",
            axum::http::HeaderValue::from_bytes(b"Bearer \xff\xfe").expect("bytes"),
        )
        .body(Body::empty())
        .expect("request");
    let r = hub.router.clone().oneshot(req).await.expect("response");
    assert!(r.status().is_client_error());
    assert_eq!(
        call(&hub, "GET", "/v1/subscriptions", Some(&tok), &[], "")
            .await
            .json["items"],
        json!([])
    );
}

/// R-CP-18: what the HTTP framework answers by itself — a query it cannot read, an unknown route,
/// a method a route does not take, headers or a body over the limits — is the error shape with a
/// code, like every other error.
async fn r_cp_18_framework_refusals_are_the_error_shape(store: Store) {
    let hub = hub(store).await;
    let tok = hub.token("t-1", ALL);
    let huge = "x".repeat(hub_core::error::MAX_HEADER_BYTES + 1);
    let big_header: &[(&str, &str)] = &[("x-padding", huge.as_str())];
    let big_body = "x".repeat(hub_control::http::MAX_BODY + 1);
    for (method, path, headers, body, status, code) in [
        (
            "GET",
            "/v1/subscriptions?limit=many",
            &[][..],
            "",
            400,
            "bad_request",
        ),
        ("GET", "/v1/no-such-route", &[], "", 404, "route_not_found"),
        ("PUT", "/v1/catalog", &[], "", 405, "method_not_allowed"),
        (
            "GET",
            "/v1/subscriptions",
            big_header,
            "",
            431,
            "headers_too_large",
        ),
        (
            "POST",
            "/v1/subscriptions",
            &[],
            big_body.as_str(),
            413,
            "payload_too_large",
        ),
    ] {
        let r = call(&hub, method, path, Some(&tok), headers, body).await;
        assert_eq!(r.status.as_u16(), status, "{method} {path}");
        assert_eq!(r.json["code"], code, "{method} {path}: {:?}", r.raw);
        assert!(r.json["message"].as_str().is_some_and(|m| !m.is_empty()));
        assert_eq!(
            r.headers.get("content-type").map(|v| v.as_bytes()),
            Some(&b"application/json"[..])
        );
    }
}

async fn r_cp_19_the_openapi_document_is_served_and_names_every_route(store: Store) {
    let hub = hub(store).await;
    let doc = call(&hub, "GET", "/v1/openapi.json", None, &[], "").await;
    assert_eq!(doc.status, StatusCode::OK);
    for p in [
        "/v1/subscriptions",
        "/v1/subscriptions/{id}",
        "/v1/subscriptions/{id}/pause",
        "/v1/subscriptions/{id}/credential",
        "/v1/subscriptions/{id}/events",
        "/v1/subscriptions/{id}/secret/rotate",
        "/v1/catalog",
    ] {
        assert!(doc.json["paths"].get(p).is_some(), "{p}");
    }
}

/// A GraphQL request to the same router; answers (data, the first error's code).
async fn gql(
    hub: &Hub,
    tok: Option<&str>,
    query: &str,
    variables: Value,
) -> (Value, Option<String>) {
    let body = json!({"query": query, "variables": variables}).to_string();
    let r = call(
        hub,
        "POST",
        "/graphql",
        tok,
        &[("content-type", "application/json")],
        &body,
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&r.raw)
    );
    let code = r.json["errors"][0]["extensions"]["code"]
        .as_str()
        .map(str::to_owned);
    (r.json["data"].clone(), code)
}

/// The REST view's fields in GraphQL's names, for field-by-field comparison.
const VIEW_FIELDS: &[(&str, &str)] = &[
    ("id", "id"),
    ("name", "name"),
    ("sink_kind", "sinkKind"),
    ("endpoint", "endpoint"),
    ("event_types", "eventTypes"),
    ("schema_major", "schemaMajor"),
    ("timeout_ms", "timeoutMs"),
    ("enabled", "enabled"),
    ("paused", "paused"),
    ("verification_state", "verificationState"),
    ("revision", "revision"),
    ("created_at", "createdAt"),
    ("updated_at", "updatedAt"),
];

const SUB_FIELDS: &str = "id name sinkKind endpoint eventTypes schemaMajor timeoutMs enabled \
    paused verificationState revision createdAt updatedAt etag secret";

fn same_view(rest: &Value, graphql: &Value) {
    for (r, g) in VIEW_FIELDS {
        assert_eq!(rest[*r], graphql[*g], "{r} / {g}");
    }
}

/// R-CP-19, R-TR-1: the same operations over REST and GraphQL against one hub give the same
/// subscriptions, states and error codes — create (and its idempotent replay), read, list, edit
/// with If-Match (and a stale one), pause, resume, delete, catalog — and the same refusals:
/// no token, a missing permission, another tenant's id.
async fn r_cp_19_graphql_and_rest_agree_operation_by_operation(store: Store) {
    let hub = hub(store).await;
    let tok = hub.token("t-1", ALL);
    let rest = create(&hub, &tok, "rest-1", &webhook("by-rest")).await;
    assert_eq!(rest.status, StatusCode::CREATED);
    let create_q = format!(
        "mutation($input: CreateSubscriptionInput!, $key: String!) {{ \
         createSubscription(input: $input, idempotencyKey: $key) {{ {SUB_FIELDS} }} }}"
    );
    let input = json!({"name": "by-graphql", "sinkKind": "WEBHOOK",
        "endpoint": "http://127.0.0.1:9/hook"});
    let (made, err) = gql(
        &hub,
        Some(&tok),
        &create_q,
        json!({"input": input, "key": "gql-1"}),
    )
    .await;
    assert_eq!(err, None, "{made}");
    let made = &made["createSubscription"];
    assert!(made["secret"]
        .as_str()
        .is_some_and(|s| s.starts_with("whsec_")));
    let (replay, _) = gql(
        &hub,
        Some(&tok),
        &create_q,
        json!({"input": input, "key": "gql-1"}),
    )
    .await;
    assert_eq!(
        replay["createSubscription"]["id"], made["id"],
        "a replay answers the same"
    );
    let id = made["id"].as_str().expect("id").to_owned();

    // Read: the REST view of the GraphQL-made subscription is GraphQL's, field by field.
    let read_rest = read_sub(&hub, &tok, &id).await;
    let read_q = format!("query($id: String!) {{ subscription(id: $id) {{ {SUB_FIELDS} }} }}");
    let (read_gql, _) = gql(&hub, Some(&tok), &read_q, json!({"id": id})).await;
    let read_gql = &read_gql["subscription"];
    same_view(&read_rest.json, read_gql);
    assert_eq!(
        read_gql["secret"],
        Value::Null,
        "reads never show the secret"
    );
    assert_eq!(
        read_rest.headers["etag"].to_str().expect("etag"),
        read_gql["etag"].as_str().expect("etag")
    );

    // List: the same items in the same order.
    let (list_gql, _) = gql(
        &hub,
        Some(&tok),
        "{ subscriptions { items { id name } } }",
        json!({}),
    )
    .await;
    let list_rest = call(&hub, "GET", "/v1/subscriptions", Some(&tok), &[], "").await;
    let ids = |items: &Value| -> Vec<Value> {
        items
            .as_array()
            .expect("items")
            .iter()
            .map(|i| i["id"].clone())
            .collect()
    };
    assert_eq!(
        ids(&list_gql["subscriptions"]["items"]),
        ids(&list_rest.json["items"])
    );
    assert_eq!(ids(&list_rest.json["items"]).len(), 2);

    // Edit with If-Match, then the same stale tag: subscription_changed on both.
    let etag = read_gql["etag"].as_str().expect("etag").to_owned();
    let edit_q = format!(
        "mutation($id: String!, $input: EditSubscriptionInput!, $key: String!, $m: String) {{ \
         editSubscription(id: $id, input: $input, idempotencyKey: $key, ifMatch: $m) {{ {SUB_FIELDS} }} }}"
    );
    let vars = |key: &str| {
        json!({"id": id, "input": {"schemaMajor": 2, "name": "renamed"},
        "key": key, "m": etag})
    };
    let (edited, err) = gql(&hub, Some(&tok), &edit_q, vars("e-1")).await;
    assert_eq!(err, None);
    assert_eq!(edited["editSubscription"]["name"], "renamed");
    assert_eq!(edited["editSubscription"]["schemaMajor"], 2);
    // timeoutMs: a value, then null puts the default back (REST's 0).
    for (timeout, want) in [(json!(5000), 5000), (Value::Null, 10000)] {
        let vars = json!({"id": id, "key": format!("t-{want}"), "m": null,
            "input": {"schemaMajor": 2, "timeoutMs": timeout}});
        let (timed, err) = gql(&hub, Some(&tok), &edit_q, vars).await;
        assert_eq!(err, None, "{timed}");
        assert_eq!(timed["editSubscription"]["timeoutMs"], want);
    }
    let (_, stale) = gql(&hub, Some(&tok), &edit_q, vars("e-2")).await;
    let stale_rest = call(
        &hub,
        "PATCH",
        &format!("/v1/subscriptions/{id}"),
        Some(&tok),
        &[("x-idempotency", "e-3"), ("if-match", &etag)],
        &json!({"schema_major": 1}).to_string(),
    )
    .await;
    assert_eq!(stale.as_deref(), Some("subscription_changed"));
    assert_eq!(stale_rest.json["code"], "subscription_changed");

    // Pause and resume show the state REST reads.
    let (paused, _) = gql(
        &hub,
        Some(&tok),
        "mutation($id: String!) { pauseSubscription(id: $id) { paused enabled } }",
        json!({"id": id}),
    )
    .await;
    assert_eq!(
        paused["pauseSubscription"],
        json!({"paused": true, "enabled": false})
    );
    let after = read_sub(&hub, &tok, &id).await;
    assert_eq!(
        (
            after.json["paused"].as_bool(),
            after.json["enabled"].as_bool()
        ),
        (Some(true), Some(false))
    );
    let (resumed, _) = gql(
        &hub,
        Some(&tok),
        "mutation($id: String!) { resumeSubscription(id: $id) { paused } }",
        json!({"id": id}),
    )
    .await;
    assert_eq!(resumed["resumeSubscription"]["paused"], false);

    // Refusals: the same codes.
    let (_, none) = gql(&hub, None, "{ subscriptions { items { id } } }", json!({})).await;
    assert_eq!(none.as_deref(), Some("unauthorized"));
    let reader = hub.token("t-1", &["subscriptions:get"]);
    let (_, denied) = gql(
        &hub,
        Some(&reader),
        &create_q,
        json!({"input": input, "key": "gql-2"}),
    )
    .await;
    assert_eq!(denied.as_deref(), Some("forbidden"));
    let other = hub.token("t-2", ALL);
    let (_, foreign) = gql(&hub, Some(&other), &read_q, json!({"id": id})).await;
    let foreign_rest = read_sub(&hub, &other, &id).await;
    assert_eq!(foreign.as_deref(), Some("subscription_not_found"));
    assert_eq!(foreign_rest.json["code"], "subscription_not_found");
    let (_, bad_endpoint) = gql(&hub, Some(&tok), &create_q, json!({"input":
        {"name": "x", "sinkKind": "WEBHOOK", "endpoint": "https://169.254.169.254/hook"}, "key": "gql-3"})).await;
    assert_eq!(bad_endpoint.as_deref(), Some("destination_not_allowed"));

    // Catalog: the same entries.
    let (cat, _) = gql(
        &hub,
        Some(&tok),
        "{ catalog { hub { eventKey origin majors } } }",
        json!({}),
    )
    .await;
    let cat_rest = call(&hub, "GET", "/v1/catalog", Some(&tok), &[], "").await;
    assert_eq!(cat["catalog"]["hub"], cat_rest.json["hub"]);

    // Delete: gone on both.
    let (deleted, err) = gql(
        &hub,
        Some(&tok),
        "mutation($id: String!) { deleteSubscription(id: $id, idempotencyKey: \"d-1\") }",
        json!({"id": id}),
    )
    .await;
    assert_eq!(
        (deleted["deleteSubscription"].as_bool(), err),
        (Some(true), None)
    );
    let gone = read_sub(&hub, &tok, &id).await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
}

/// R-TR-1 bad input: malformed GraphQL, unknown fields and over-deep queries are errors that say
/// so; nothing is written.
async fn r_tr_1_malformed_graphql_is_refused_and_writes_nothing(store: Store) {
    let hub = hub(store).await;
    let tok = hub.token("t-1", ALL);
    for query in [
        "{ subscriptions { items { id }",
        "{ subscriptions { items { colour } } }",
        "mutation { createSubscription(input: {name: 1}, idempotencyKey: \"k\") { id } }",
    ] {
        let body = json!({"query": query}).to_string();
        let r = call(
            &hub,
            "POST",
            "/graphql",
            Some(&tok),
            &[("content-type", "application/json")],
            &body,
        )
        .await;
        assert!(
            r.json["errors"][0]["message"].as_str().is_some(),
            "{query}: {}",
            r.json
        );
    }
    let deep = format!(
        "{{ __schema {{ types {{ fields {{ type {} }} }} }} }}",
        "{ ofType ".repeat(10) + "{ name }" + &" }".repeat(10)
    );
    let r = call(
        &hub,
        "POST",
        "/graphql",
        Some(&tok),
        &[("content-type", "application/json")],
        &json!({"query": deep}).to_string(),
    )
    .await;
    assert!(
        r.json["errors"][0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("nested")),
        "{}",
        r.json
    );
    let not_json = call(
        &hub,
        "POST",
        "/graphql",
        Some(&tok),
        &[("content-type", "application/json")],
        "{",
    )
    .await;
    assert!(not_json.status.is_client_error());
    assert!(
        not_json.json["code"].as_str().is_some(),
        "{}",
        String::from_utf8_lossy(&not_json.raw)
    );
    let list = call(&hub, "GET", "/v1/subscriptions", Some(&tok), &[], "").await;
    assert_eq!(list.json["items"], json!([]));
    let ide = call(&hub, "GET", "/graphql", None, &[], "").await;
    assert!(String::from_utf8_lossy(&ide.raw).contains("graphiql"));
}

/// Serves the hub's router on a loopback port (gRPC needs a real HTTP/2 connection).
async fn serve(hub: &Hub) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let router = hub.router.clone();
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{addr}")
}

fn grpc_request<T>(
    message: T,
    tok: Option<&str>,
    meta: &[(&'static str, &str)],
) -> tonic::Request<T> {
    let mut r = tonic::Request::new(message);
    if let Some(t) = tok {
        r.metadata_mut().insert(
            "authorization",
            format!("Bearer {t}").parse().expect("metadata"),
        );
    }
    for (k, v) in meta {
        r.metadata_mut().insert(*k, v.parse().expect("metadata"));
    }
    r
}

/// The error code a gRPC status carries in its ErrorInfo.
fn reason(s: &tonic::Status) -> String {
    use tonic_types::StatusExt;
    s.get_details_error_info()
        .map(|i| i.reason)
        .unwrap_or_default()
}

/// R-CP-19, R-TR-2: the same operations over gRPC and REST against one hub agree — create (and
/// its replay by `x-idempotency`), read, list, edit with a stale `if-match`, pause, delete — with
/// the mapped status codes and the error code as ErrorInfo reason (unauthenticated, permission,
/// another tenant's id); `grpc.health.v1` answers and reflection lists the services.
async fn r_tr_2_grpc_and_rest_agree_operation_by_operation(store: Store) {
    use hub_control::grpc::pb;
    let hub = hub(store).await;
    let base = serve(&hub).await;
    let tok = hub.token("t-1", ALL);
    let mut subs = pb::subscriptions_client::SubscriptionsClient::connect(base.clone())
        .await
        .expect("connect");
    let new = || pb::CreateSubscriptionRequest {
        name: "by-grpc".into(),
        sink_kind: "webhook".into(),
        endpoint: Some("http://127.0.0.1:9/hook".into()),
        ..Default::default()
    };
    let made = subs
        .create(grpc_request(new(), Some(&tok), &[("x-idempotency", "g-1")]))
        .await
        .expect("create")
        .into_inner();
    assert!(made
        .secret
        .as_deref()
        .is_some_and(|s| s.starts_with("whsec_")));
    let replay = subs
        .create(grpc_request(new(), Some(&tok), &[("x-idempotency", "g-1")]))
        .await
        .expect("replay")
        .into_inner();
    assert_eq!(replay.id, made.id);
    let missing_key = subs
        .create(grpc_request(new(), Some(&tok), &[]))
        .await
        .expect_err("no key");
    assert_eq!(
        (missing_key.code(), reason(&missing_key).as_str()),
        (tonic::Code::InvalidArgument, "missing_idempotency_key")
    );

    let id = made.id.clone();
    let got = subs
        .get(grpc_request(
            pb::GetSubscriptionRequest { id: id.clone() },
            Some(&tok),
            &[],
        ))
        .await
        .expect("get")
        .into_inner();
    let rest = read_sub(&hub, &tok, &id).await;
    assert_eq!(rest.json["name"], got.name);
    assert_eq!(rest.json["sink_kind"], got.sink_kind);
    assert_eq!(
        rest.json["endpoint"],
        got.endpoint.clone().expect("endpoint")
    );
    assert_eq!(rest.json["verification_state"], got.verification_state);
    assert_eq!(rest.json["revision"], got.revision);
    assert_eq!(rest.json["created_at"], got.created_at);
    assert_eq!(rest.headers["etag"].to_str().expect("etag"), got.etag);
    assert_eq!(got.secret, None, "reads never show the secret");

    let list = subs
        .list(grpc_request(
            pb::ListSubscriptionsRequest::default(),
            Some(&tok),
            &[],
        ))
        .await
        .expect("list")
        .into_inner();
    assert_eq!(list.items.len(), 1);

    let edit = |key: &'static str| {
        grpc_request(
            pb::EditSubscriptionRequest {
                id: id.clone(),
                schema_major: 2,
                name: Some("renamed".into()),
                ..Default::default()
            },
            Some(&tok),
            &[("x-idempotency", key), ("if-match", &got.etag)],
        )
    };
    let edited = subs.edit(edit("e-1")).await.expect("edit").into_inner();
    assert_eq!((edited.name.as_str(), edited.schema_major), ("renamed", 2));
    let stale = subs.edit(edit("e-2")).await.expect_err("stale");
    assert_eq!(
        (stale.code(), reason(&stale).as_str()),
        (tonic::Code::FailedPrecondition, "subscription_changed")
    );

    let paused = subs
        .pause(grpc_request(
            pb::SubscriptionId { id: id.clone() },
            Some(&tok),
            &[],
        ))
        .await
        .expect("pause")
        .into_inner();
    assert!(paused.paused && !paused.enabled);
    assert_eq!(read_sub(&hub, &tok, &id).await.json["paused"], true);

    let none = subs
        .list(grpc_request(
            pb::ListSubscriptionsRequest::default(),
            None,
            &[],
        ))
        .await
        .expect_err("no token");
    assert_eq!(
        (none.code(), reason(&none).as_str()),
        (tonic::Code::Unauthenticated, "unauthorized")
    );
    let reader = hub.token("t-1", &["subscriptions:get"]);
    let denied = subs
        .create(grpc_request(
            new(),
            Some(&reader),
            &[("x-idempotency", "g-2")],
        ))
        .await
        .expect_err("permission");
    assert_eq!(
        (denied.code(), reason(&denied).as_str()),
        (tonic::Code::PermissionDenied, "forbidden")
    );
    let other = hub.token("t-2", ALL);
    let foreign = subs
        .get(grpc_request(
            pb::GetSubscriptionRequest { id: id.clone() },
            Some(&other),
            &[],
        ))
        .await
        .expect_err("another tenant's");
    assert_eq!(
        (foreign.code(), reason(&foreign).as_str()),
        (tonic::Code::NotFound, "subscription_not_found")
    );

    let mut catalog = pb::catalog_client::CatalogClient::connect(base.clone())
        .await
        .expect("connect");
    let cat = catalog
        .list(grpc_request(pb::ListCatalogRequest {}, Some(&tok), &[]))
        .await
        .expect("catalog")
        .into_inner();
    let rest_cat = call(&hub, "GET", "/v1/catalog", Some(&tok), &[], "").await;
    assert_eq!(
        cat.hub.len(),
        rest_cat.json["hub"].as_array().expect("hub").len()
    );

    subs.delete(grpc_request(
        pb::SubscriptionId { id: id.clone() },
        Some(&tok),
        &[("x-idempotency", "d-1")],
    ))
    .await
    .expect("delete");
    assert_eq!(
        read_sub(&hub, &tok, &id).await.status,
        StatusCode::NOT_FOUND
    );

    let channel = tonic::transport::Endpoint::from_shared(base)
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    let serving = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "lerian.streaming.v1.Subscriptions".into(),
        })
        .await
        .expect("health")
        .into_inner();
    assert_eq!(
        serving.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );

    use tonic_reflection::pb::v1 as reflection;
    let mut reflect = reflection::server_reflection_client::ServerReflectionClient::new(channel);
    let ask = reflection::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            reflection::server_reflection_request::MessageRequest::ListServices(String::new()),
        ),
    };
    let mut answers = reflect
        .server_reflection_info(futures::stream::iter([ask]))
        .await
        .expect("reflection")
        .into_inner();
    let first = answers.message().await.expect("answer").expect("one");
    let Some(reflection::server_reflection_response::MessageResponse::ListServicesResponse(list)) =
        first.message_response
    else {
        panic!("not a service list");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    for want in [
        "lerian.streaming.v1.Subscriptions",
        "lerian.streaming.v1.Catalog",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
    }
}

/// R-CP-19: the OpenAPI document is as strict as the server at the edges a schema fuzzer found —
/// each of these is refused by the server and outside what the document allows.
async fn r_cp_19_the_document_refuses_what_the_server_refuses(store: Store) {
    let hub = hub(store).await;
    let tok = hub.token("t-1", ALL);
    let doc = call(&hub, "GET", "/v1/openapi.json", None, &[], "")
        .await
        .json;
    let param = |path: &str, method: &str, name: &str| -> Value {
        let op = &doc["paths"][path];
        op[method]["parameters"]
            .as_array()
            .into_iter()
            .chain(op["parameters"].as_array())
            .flatten()
            .find(|p| p["name"] == name)
            .map(|p| p["schema"].clone())
            .unwrap_or(Value::Null)
    };
    let schemas = &doc["components"]["schemas"];

    // An empty idempotency key.
    assert_eq!(
        param("/v1/subscriptions", "post", "X-Idempotency")["minLength"],
        1
    );
    assert_eq!(
        create(&hub, &tok, "", &webhook("e")).await.status,
        StatusCode::BAD_REQUEST
    );
    // An empty cursor.
    assert_eq!(param("/v1/subscriptions", "get", "cursor")["minLength"], 1);
    let r = call(
        &hub,
        "GET",
        "/v1/subscriptions?cursor=",
        Some(&tok),
        &[],
        "",
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    // schema_major over 1000.
    assert_eq!(
        schemas["NewSubscription"]["properties"]["schema_major"]["maximum"],
        1000
    );
    let big = json!({"name": "m", "sink_kind": "pull", "schema_major": 1001}).to_string();
    assert_eq!(
        create(&hub, &tok, "k-major", &big).await.status,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    // A property the resource does not have.
    assert_eq!(schemas["NewSubscription"]["additionalProperties"], false);
    assert_eq!(schemas["Edit"]["additionalProperties"], false);
    let extra = json!({"name": "x", "sink_kind": "pull", "colour": 1}).to_string();
    assert_eq!(
        create(&hub, &tok, "k-extra", &extra).await.status,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    // timeout_ms on a kind that is not a webhook.
    assert!(schemas["NewSubscription"]["allOf"]
        .to_string()
        .contains("timeout_ms"));
    let timed = json!({"name": "t", "sink_kind": "pull", "timeout_ms": 2000}).to_string();
    assert_eq!(
        create(&hub, &tok, "k-timeout", &timed).await.status,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    // An unquoted If-Match.
    let pattern = param("/v1/subscriptions/{id}", "patch", "If-Match")["pattern"]
        .as_str()
        .expect("If-Match has a pattern")
        .to_owned();
    assert!(pattern.contains('"'), "{pattern}");
    let made = create(&hub, &tok, "k-ok", &webhook("ok")).await;
    let id = made.json["id"].as_str().expect("id");
    let unquoted = call(
        &hub,
        "PATCH",
        &format!("/v1/subscriptions/{id}"),
        Some(&tok),
        &[("x-idempotency", "k-im"), ("if-match", "abc")],
        &json!({"schema_major": 1}).to_string(),
    )
    .await;
    assert_eq!(unquoted.status, StatusCode::BAD_REQUEST);
}

/// Opens `graphql-transport-ws` as `tok`, subscribes `document`, and answers the first message.
async fn ws_first_answer(hub: &Hub, tok: &str, document: &str, variables: Value) -> Value {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Message;
    let url = serve(hub).await.replace("http://", "ws://") + "/graphql/ws";
    let mut request = url.into_client_request().expect("request");
    request.headers_mut().insert(
        "sec-websocket-protocol",
        "graphql-transport-ws".parse().expect("header"),
    );
    let (mut ws, _) = tokio_tungstenite::connect_async(request)
        .await
        .expect("websocket");
    let init =
        json!({"type": "connection_init", "payload": {"authorization": format!("Bearer {tok}")}});
    ws.send(Message::Text(init.to_string().into()))
        .await
        .expect("send");
    let ack = ws.next().await.expect("open").expect("frame");
    assert!(ack.to_text().expect("text").contains("connection_ack"));
    let subscribe = json!({"id": "1", "type": "subscribe",
        "payload": {"query": document, "variables": variables}});
    ws.send(Message::Text(subscribe.to_string().into()))
        .await
        .expect("send");
    let answer = ws.next().await.expect("open").expect("frame");
    serde_json::from_str(answer.to_text().expect("text")).expect("JSON")
}

/// The error code of a live subscription's first answer: a resolver's error comes as a result
/// with errors (`next`), a request's as `error`.
fn ws_code(answer: &Value) -> Option<&str> {
    answer["payload"]["errors"][0]["extensions"]["code"]
        .as_str()
        .or(answer["payload"][0]["extensions"]["code"].as_str())
}

/// R-TR-1: a control process with no engine refuses the live `deliveryOutcomes` with
/// `served_by_the_engine` (it has no outcomes to stream), over `graphql-transport-ws`.
async fn r_tr_1_a_control_process_alone_says_where_live_outcomes_are(store: Store) {
    let hub = hub(store).await;
    let tok = hub.token("t-1", ALL);
    let made = create(&hub, &tok, "k", &webhook("w")).await;
    let id = made.json["id"].as_str().expect("id").to_owned();
    let query = "subscription($id: String!) { deliveryOutcomes(subscriptionId: $id) { outcome } }";
    let answer = ws_first_answer(&hub, &tok, query, json!({"id": id})).await;
    assert_eq!(ws_code(&answer), Some("served_by_the_engine"), "{answer}");
    // So do the queries over what an engine holds.
    let (_, code) = gql(
        &hub,
        Some(&tok),
        "query($id: String!) { deadLetters(subscriptionId: $id) { items { id } } }",
        json!({"id": id}),
    )
    .await;
    assert_eq!(code.as_deref(), Some("served_by_the_engine"));
}

/// R-TR-2 bad input: a malformed protobuf message and a huge one are refused with a gRPC status
/// (no panic), and nothing is written.
async fn r_tr_2_malformed_protobuf_is_refused_and_writes_nothing(store: Store) {
    let hub = hub(store).await;
    let tok = hub.token("t-1", ALL);
    let framed = |payload: &[u8]| {
        let mut body = vec![0u8];
        body.extend_from_slice(&u32::try_from(payload.len()).expect("len").to_be_bytes());
        body.extend_from_slice(payload);
        body
    };
    let garbage = framed(&[0xff, 0xff, 0xff, 0xff, 0x0f, 0x12]);
    let huge = framed(&vec![b'a'; 5 * 1024 * 1024]);
    for (what, body) in [("garbage", garbage), ("5 MiB", huge)] {
        let request = Request::post("/lerian.streaming.v1.Subscriptions/Create")
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header("authorization", format!("Bearer {tok}"))
            .header("x-idempotency", "k-bad")
            .body(Body::from(body))
            .expect("request");
        let response = hub.router.clone().oneshot(request).await.expect("response");
        let headers = response.headers().clone();
        let collected = response.into_body().collect().await.expect("body");
        let status = headers
            .get("grpc-status")
            .or(collected.trailers().and_then(|t| t.get("grpc-status")))
            .map(|v| v.to_str().unwrap_or_default().to_owned());
        assert!(
            status.as_deref().is_some_and(|s| s != "0"),
            "{what}: a gRPC error status, got {status:?}"
        );
    }
    let list = call(&hub, "GET", "/v1/subscriptions", Some(&tok), &[], "").await;
    assert_eq!(list.json["items"], json!([]), "nothing written");
}

/// R-CP-16: a delete (idempotency key; over GraphQL here, REST and gRPC elsewhere) soft-deletes:
/// reads and edits answer 404 on every transport, a replay of the delete answers the same, and the
/// name is free again.
async fn r_cp_16_delete_soft_deletes_and_frees_the_name(store: Store) {
    let hub = hub(store).await;
    let tok = hub.token("t-1", ALL);
    let made = create(&hub, &tok, "k-1", &webhook("reused")).await;
    let id = made.json["id"].as_str().expect("id").to_owned();
    let delete = "mutation($id: String!) { deleteSubscription(id: $id, idempotencyKey: \"d\") }";
    let (deleted, err) = gql(&hub, Some(&tok), delete, json!({"id": id})).await;
    assert_eq!(
        (deleted["deleteSubscription"].as_bool(), err),
        (Some(true), None)
    );
    let (replayed, err) = gql(&hub, Some(&tok), delete, json!({"id": id})).await;
    assert_eq!(
        (replayed["deleteSubscription"].as_bool(), err),
        (Some(true), None),
        "a replay"
    );
    assert_eq!(
        read_sub(&hub, &tok, &id).await.status,
        StatusCode::NOT_FOUND
    );
    let edit = call(
        &hub,
        "PATCH",
        &format!("/v1/subscriptions/{id}"),
        Some(&tok),
        &[("x-idempotency", "e")],
        &json!({"schema_major": 1}).to_string(),
    )
    .await;
    assert_eq!(edit.status, StatusCode::NOT_FOUND);
    let again = create(&hub, &tok, "k-2", &webhook("reused")).await;
    assert_eq!(again.status, StatusCode::CREATED, "the name is free again");
    assert_ne!(again.json["id"], made.json["id"]);
}

/// Every log line of this test binary, at TRACE, for the secrets check.
static LOGS: std::sync::Mutex<Vec<u8>> = std::sync::Mutex::new(Vec::new());

struct Capture;

impl std::io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut logs) = LOGS.lock() {
            logs.extend_from_slice(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn capture_logs() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(|| Capture)
            .try_init();
    });
}

/// R-SEC-1: a secret appears in the create response and nowhere else: not in reads, errors, replays
/// of other requests, or any log line written meanwhile.
async fn r_sec_1_no_secret_in_reads_errors_or_logs(store: Store) {
    capture_logs();
    let hub = hub(store).await;
    let tok = hub.token("t-1", ALL);
    let created = create(&hub, &tok, "s1", &webhook("secretive")).await;
    let secret = created.json["secret"].as_str().expect("secret").to_owned();
    let id = created.json["id"].as_str().expect("id").to_owned();
    let path = format!("/v1/subscriptions/{id}");
    let mut answers = vec![
        call(&hub, "GET", &path, Some(&tok), &[], "").await,
        call(&hub, "GET", "/v1/subscriptions", Some(&tok), &[], "").await,
        create(&hub, &tok, "s1", &webhook("other-body")).await,
        create(&hub, &tok, "s2", &webhook("secretive")).await,
        call(
            &hub,
            "PATCH",
            &path,
            Some(&tok),
            &[("x-idempotency", "p")],
            "{\"schema_major\": 1, \"name\": \"renamed\"}",
        )
        .await,
        call(
            &hub,
            "PATCH",
            &path,
            Some(&tok),
            &[("x-idempotency", "q")],
            "{\"secret\": \"x\"}",
        )
        .await,
    ];
    answers.push(
        call(
            &hub,
            "DELETE",
            &path,
            Some(&tok),
            &[("x-idempotency", "d")],
            "",
        )
        .await,
    );
    for a in &answers {
        let text = String::from_utf8_lossy(&a.raw);
        assert!(
            !text.contains(&secret) && !text.contains("whsec_"),
            "{}: {text}",
            a.status
        );
    }
    let logs =
        String::from_utf8_lossy(&LOGS.lock().map(|l| l.clone()).unwrap_or_default()).into_owned();
    assert!(
        !logs.contains(&secret) && !logs.contains("whsec_"),
        "a secret reached the logs"
    );
    // At rest: the idempotency record of the create holds its answer, secret included — sealed
    // like the subscription's own copy, so the store's file never shows one.
    if let Store::Embedded = store {
        for entry in std::fs::read_dir(hub._dir.path())
            .expect("data dir")
            .flatten()
        {
            let bytes = std::fs::read(entry.path()).unwrap_or_default();
            assert!(
                !bytes.windows(6).any(|w| w == b"whsec_"),
                "a signing secret in the clear in {}",
                entry.path().display()
            );
        }
    }
}

/// Issue 16 (R-SEC-2): an endpoint is stored in the form deliveries use — what a read shows is
/// what is called — and a spelling the URL parser would repair silently is refused, writing
/// nothing.
async fn r_sec_2_endpoints_are_stored_as_used(store: Store) {
    let hub = hub(store).await;
    let tok = hub.token("t-norm", ALL);
    let body = |name: &str, endpoint: &str| {
        json!({"name": name, "sink_kind": "webhook", "endpoint": endpoint}).to_string()
    };
    let refused = create(&hub, &tok, "n0", &body("bad", " http://127.0.0.1:9/hook")).await;
    assert_eq!(
        (refused.status, refused.json["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_endpoint"))
    );
    let listed = call(&hub, "GET", "/v1/subscriptions", Some(&tok), &[], "").await;
    assert_eq!(listed.json["items"], json!([]), "nothing written");

    let created = create(
        &hub,
        &tok,
        "n1",
        &body("ok", "HTTP://127.0.0.1:9/a/../hook"),
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.json);
    assert_eq!(created.json["endpoint"], "http://127.0.0.1:9/hook");
    let id = created.json["id"].as_str().expect("id");
    let patched = call(
        &hub,
        "PATCH",
        &format!("/v1/subscriptions/{id}"),
        Some(&tok),
        &[
            ("x-idempotency", "n2"),
            ("content-type", "application/json"),
        ],
        &json!({"schema_major": 1, "endpoint": "http://127.0.0.1:9/./moved"}).to_string(),
    )
    .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.json);
    let read = call(
        &hub,
        "GET",
        &format!("/v1/subscriptions/{id}"),
        Some(&tok),
        &[],
        "",
    )
    .await;
    assert_eq!(read.json["endpoint"], "http://127.0.0.1:9/moved");
}

#[path = "v1/isolation.rs"]
mod isolation;
use isolation::r_sec_3_every_route_of_every_transport_reads_another_tenants_id_as_absent;
#[path = "v1/bad_input.rs"]
mod bad_input;
use bad_input::r_cp_18_every_body_route_refuses_malformed_input_with_a_code_and_writes_nothing;

on_both_stores!(
    r_sec_2_endpoints_are_stored_as_used,
    r_cp_18_every_body_route_refuses_malformed_input_with_a_code_and_writes_nothing,
    r_sec_1_no_secret_in_reads_errors_or_logs,
    r_cp_1_no_token_is_401_and_a_missing_permission_403,
    r_cp_3_create_returns_the_secret_once_and_reads_never_show_it,
    r_cp_13_idempotency_replay_conflict_and_missing_key,
    r_cp_13_two_simultaneous_creates_with_one_key_make_one_subscription,
    r_cp_2_names_are_unique_per_tenant_until_deleted,
    r_sec_3_every_route_of_every_transport_reads_another_tenants_id_as_absent,
    r_cp_10_patch_with_etags,
    r_cp_11_pause_and_resume_are_repeatable,
    r_sec_2_destinations_are_checked_before_any_write,
    bad_input_gets_a_4xx_with_the_error_body_and_writes_nothing,
    r_cp_18_framework_refusals_are_the_error_shape,
    r_cp_19_graphql_and_rest_agree_operation_by_operation,
    r_tr_1_malformed_graphql_is_refused_and_writes_nothing,
    r_tr_2_grpc_and_rest_agree_operation_by_operation,
    r_tr_2_malformed_protobuf_is_refused_and_writes_nothing,
    r_cp_16_delete_soft_deletes_and_frees_the_name,
    r_cp_19_the_document_refuses_what_the_server_refuses,
    r_tr_1_a_control_process_alone_says_where_live_outcomes_are,
    r_cp_19_the_openapi_document_is_served_and_names_every_route,
);
