//! Bad input on every `/v1` operation that takes a body, generated from the OpenAPI document
//! (issue 19's sweep, R-CP-18's error shape): bytes that are not UTF-8, JSON nested past any
//! sane depth, numbers past every integer type, a body that is not JSON at all, a wrong content
//! type, a body over the limit. Each is a 4xx with a code — never a 5xx, never a panic — and
//! nothing is written.

use serde_json::{json, Value};

use super::{call, call_bytes, create, Hub, Store, ALL};

/// The malformed bodies, by what is wrong with them.
fn malformed() -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let json = "application/json";
    vec![
        ("not UTF-8", vec![b'{', 0xff, 0xfe, b'}'], json),
        ("nested 100k deep", "[".repeat(100_000).into_bytes(), json),
        (
            "numbers out of range",
            br#"{"schema_major": 1e400, "timeout_ms": 99999999999999999999999, "name": "x"}"#
                .to_vec(),
            json,
        ),
        ("not JSON", b"name=x&sink_kind=pull".to_vec(), json),
        ("a JSON string", br#""subscription""#.to_vec(), json),
        (
            "NUL in a string",
            b"{\"name\": \"a\\u0000b\", \"schema_major\": 1}".to_vec(),
            json,
        ),
        (
            "wrong content type",
            br#"{"name": "x", "schema_major": 1}"#.to_vec(),
            "text/plain",
        ),
        ("over the size limit", vec![b' '; 3 * 1024 * 1024], json),
    ]
}

/// The tenant's subscriptions as listed (ids and etags).
async fn listing(hub: &Hub, tok: &str) -> Value {
    call(hub, "GET", "/v1/subscriptions", Some(tok), &[], "")
        .await
        .json["items"]
        .clone()
}

pub(super) async fn r_cp_18_every_body_route_refuses_malformed_input_with_a_code_and_writes_nothing(
    store: Store,
) {
    let hub = super::hub(store).await;
    let tok = hub.token("t-bad", ALL);
    let body = json!({"name": "kept", "sink_kind": "webhook", "endpoint": "http://127.0.0.1:9/h"});
    let made = create(&hub, &tok, "b-0", &body.to_string()).await;
    let id = made.json["id"].as_str().expect("id").to_owned();
    let before = listing(&hub, &tok).await;

    let doc = call(&hub, "GET", "/v1/openapi.json", None, &[], "")
        .await
        .json;
    let mut sent = 0;
    for (path, ops) in doc["paths"].as_object().expect("paths") {
        for (method, op) in ops.as_object().expect("operations") {
            if op.get("requestBody").is_none() {
                continue;
            }
            let method = method.to_ascii_uppercase();
            let url = path.replace("{id}", &id);
            for (what, bytes, content_type) in malformed() {
                let key = format!("bad-{sent}");
                let headers = [
                    ("x-idempotency", key.as_str()),
                    ("content-type", content_type),
                ];
                let r = call_bytes(&hub, &method, &url, Some(&tok), &headers, bytes).await;
                let status = r.status.as_u16();
                assert!(
                    (400..500).contains(&status) && r.json["code"].is_string(),
                    "{method} {path} with {what}: {status} {}",
                    String::from_utf8_lossy(&r.raw)
                );
                sent += 1;
            }
        }
    }
    assert!(
        sent >= 5 * malformed().len(),
        "every body route was sent each ({sent})"
    );
    assert_eq!(listing(&hub, &tok).await, before, "nothing written");
}

/// R-CP-19: the document names the refusals every operation can give — 401 and 403 (every
/// route takes a token), and 413 and 415 wherever a body is read — so a client generated from it
/// (or schemathesis) meets no undocumented status.
#[test]
fn r_cp_19_every_operation_documents_its_token_and_body_refusals() {
    let doc: Value =
        serde_json::from_str(include_str!("../../../schema/openapi/v1.json")).expect("JSON");
    let mut operations = 0;
    for (path, ops) in doc["paths"].as_object().expect("paths") {
        for (method, op) in ops.as_object().expect("operations") {
            let Some(responses) = op["responses"].as_object() else {
                continue; // `parameters`
            };
            let mut expected = vec!["401", "403"];
            if op.get("requestBody").is_some() {
                expected.extend(["413", "415"]);
            }
            for status in expected {
                assert!(
                    responses.contains_key(status),
                    "{method} {path} does not document {status}"
                );
            }
            operations += 1;
        }
    }
    assert!(operations >= 18, "{operations} operations read");
}
