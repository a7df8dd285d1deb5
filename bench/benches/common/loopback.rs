//! What the webhook attempt bench and the allocation count share: a receiver on loopback
//! answering 204 to every POST (an axum server on tokio), the clients that reach it, and one
//! unpinned shard to send from.

use std::sync::Arc;

use hub_core::destination::DestinationPolicy;
use hub_core::sink::webhook::WebhookClient;
use hub_engine::runtime::{build_tokio_runtime, ShardConfig, TokioBridge};

pub struct Loopback {
    /// Runs the receiver and the bridge's side; kept for as long as they are used.
    pub _tokio: tokio::runtime::Runtime,
    pub bridge: TokioBridge,
    pub endpoint: String,
    /// The process's reqwest client, allowed to reach 127.0.0.1.
    pub client: WebhookClient,
    pub one_shard: ShardConfig,
}

pub fn start() -> Loopback {
    let tokio = build_tokio_runtime(2).expect("tokio runtime");
    let bridge = TokioBridge::new(tokio.handle().clone());
    let endpoint = receiver(&tokio);
    let policy = DestinationPolicy {
        allow: ["127.0.0.1".to_owned()].into_iter().collect(),
    };
    let client = WebhookClient::new(Arc::new(policy)).expect("client");
    let one_shard = ShardConfig {
        shards: 1,
        pin: false,
        ..ShardConfig::default()
    };
    Loopback {
        _tokio: tokio,
        bridge,
        endpoint,
        client,
        one_shard,
    }
}

/// A receiver answering 204 to every POST, on `tokio`; its endpoint.
fn receiver(tokio: &tokio::runtime::Runtime) -> String {
    let listener = tokio
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(|| async { axum::http::StatusCode::NO_CONTENT }),
    );
    tokio.spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}/hook")
}
