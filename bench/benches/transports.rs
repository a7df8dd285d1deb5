//! The control plane's hot read — one subscription, and a page of the tenant's subscriptions —
//! through each transport's full stack in process (router, token check, service, embedded control
//! store, rendering): REST, GraphQL and gRPC (a framed protobuf request through the same router;
//! no socket). The difference between them is each transport's own cost.

use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use axum::Router;
use criterion::{criterion_group, criterion_main, Criterion};
use http_body_util::BodyExt;
use hub_control::auth::{mint_hs256, Mint};
use hub_control::config::{now_ms, ControlConfig};
use hub_control::grpc::pb;
use tower::ServiceExt;

const SECRET: &str = "bench-secret-bench-secret-bench-s";
const TENANT: &str = "t-bench";

fn token() -> String {
    let now = u64::try_from(now_ms() / 1000).unwrap_or_default();
    let m = Mint {
        issuer: "access-manager",
        audience: "streaming-hub",
        subject: "bench",
        tenant: TENANT,
        permissions: &["subscriptions:get", "subscriptions:post"],
        ttl_s: 3600,
        now_s: now,
    };
    mint_hs256(SECRET.as_bytes(), &m).unwrap_or_default()
}

async fn send(router: &Router, request: Request<Body>) -> usize {
    let response = router.clone().oneshot(request).await.unwrap_or_default();
    let body = response.into_body().collect().await.map(|b| b.to_bytes());
    body.map(|b| b.len()).unwrap_or_default()
}

/// A gRPC request: the message framed (no compression, 4-byte length), as a client sends it.
fn grpc(path: &str, message: &impl prost::Message, bearer: &str) -> Request<Body> {
    let encoded = message.encode_to_vec();
    let mut framed = vec![0u8];
    framed.extend_from_slice(
        &u32::try_from(encoded.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    framed.extend_from_slice(&encoded);
    Request::post(path)
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("authorization", bearer)
        .body(Body::from(framed))
        .unwrap_or_default()
}

fn transports(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = ControlConfig::from_env(|k| match k {
        "STREAMING_HUB_JWT_HS256_SECRET" => Some(SECRET.into()),
        _ => None,
    })
    .expect("config");
    let router = rt.block_on(async {
        let (control, verifier) = config.build(dir.path()).await.expect("build");
        hub_control::http::router(control, Arc::clone(&verifier))
    });
    let bearer = format!("Bearer {}", token());
    let mut id = String::new();
    rt.block_on(async {
        for n in 0..20 {
            let create = Request::post("/v1/subscriptions")
                .header("authorization", &bearer)
                .header("x-idempotency", format!("bench-{n}"))
                .body(Body::from(format!(
                    r#"{{"name":"feed-{n}","sink_kind":"pull"}}"#
                )))
                .expect("request");
            let response = router.clone().oneshot(create).await.expect("create");
            let body = response
                .into_body()
                .collect()
                .await
                .expect("body")
                .to_bytes();
            let v: serde_json::Value = serde_json::from_slice(&body).expect("json");
            id = v["id"].as_str().expect("id").to_owned();
        }
    });

    // Each transport answers the read, not an error (a gRPC error would be cheap and fast).
    rt.block_on(async {
        let message = pb::GetSubscriptionRequest { id: id.clone() };
        let r = router
            .clone()
            .oneshot(grpc(
                "/lerian.streaming.v1.Subscriptions/Get",
                &message,
                &bearer,
            ))
            .await
            .expect("grpc");
        let collected = r.into_body().collect().await.expect("body");
        let status = collected
            .trailers()
            .and_then(|t| t.get("grpc-status"))
            .map(|v| v.as_bytes().to_vec());
        assert_eq!(status.as_deref(), Some(&b"0"[..]), "gRPC Get answers OK");
        assert!(
            collected.to_bytes().len() > 100,
            "gRPC Get answers the subscription"
        );
    });
    let mut group = c.benchmark_group("transports");
    group.bench_function("rest_get", |b| {
        b.iter(|| {
            let r = Request::get(format!("/v1/subscriptions/{id}"))
                .header("authorization", &bearer)
                .body(Body::empty())
                .unwrap_or_default();
            rt.block_on(send(&router, r))
        })
    });
    group.bench_function("graphql_get", |b| {
        let query = format!(
            r#"{{"query":"{{ subscription(id: \"{id}\") {{ id name sinkKind verificationState revision etag }} }}"}}"#
        );
        b.iter(|| {
            let r = Request::post("/graphql")
                .header("authorization", &bearer)
                .header("content-type", "application/json")
                .body(Body::from(query.clone()))
                .unwrap_or_default();
            rt.block_on(send(&router, r))
        })
    });
    group.bench_function("grpc_get", |b| {
        let message = pb::GetSubscriptionRequest { id: id.clone() };
        b.iter(|| {
            rt.block_on(send(
                &router,
                grpc("/lerian.streaming.v1.Subscriptions/Get", &message, &bearer),
            ))
        })
    });
    group.bench_function("rest_list_20", |b| {
        b.iter(|| {
            let r = Request::get("/v1/subscriptions")
                .header("authorization", &bearer)
                .body(Body::empty())
                .unwrap_or_default();
            rt.block_on(send(&router, r))
        })
    });
    group.bench_function("graphql_list_20", |b| {
        let query = r#"{"query":"{ subscriptions { items { id name sinkKind verificationState revision } } }"}"#;
        b.iter(|| {
            let r = Request::post("/graphql")
                .header("authorization", &bearer)
                .header("content-type", "application/json")
                .body(Body::from(query))
                .unwrap_or_default();
            rt.block_on(send(&router, r))
        })
    });
    group.bench_function("grpc_list_20", |b| {
        let message = pb::ListSubscriptionsRequest::default();
        b.iter(|| {
            rt.block_on(send(
                &router,
                grpc("/lerian.streaming.v1.Subscriptions/List", &message, &bearer),
            ))
        })
    });
    group.finish();
}

criterion_group!(benches, transports);
criterion_main!(benches);
