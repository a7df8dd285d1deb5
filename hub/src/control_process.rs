//! `hub-control serve`: the control plane as its own process, beside engines on one CQL keyspace
//! (R-OP-1's split deployment). It serves all of `/v1` over REST, GraphQL and gRPC; on CQL it
//! opens the engines' store for what they hold (pull, dead letters, health: `StoreReader`) and
//! emits hub events (`destination.verified`, …) to `lerian.streaming.hub` for the engines to
//! deliver. `/health`, `/ready` and `/metrics` say how its stores answer; SIGTERM or SIGINT stop
//! it, open streams cut after a grace.
//!
//! It lives beside the standalone binary, above engine and control plane, because reading the
//! engines' store takes the engine's store code; it runs no shards, lanes or consumers.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use hub_control::config::ControlConfig;
use hub_control::service::Control;

use hub_engine::config::{HubConfig, StoreKind};
use hub_engine::delivery::hub_events::{configured_producer, PipelineEvents};
use hub_engine::reader::StoreReader;
use hub_engine::store::cql::CqlStore;
use hub_engine::store::Store;

/// How long open connections (streams) may take to end after a stop signal.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Serves the control plane on `addr` until SIGTERM or SIGINT.
pub fn run(data_dir: &Path, addr: SocketAddr) -> anyhow::Result<()> {
    let tokio = hub_engine::runtime::build_tokio_runtime(2)?;
    let stopped = hub_engine::hub::stop_signal(&tokio);
    tokio.block_on(async move {
        let config = ControlConfig::from_env(|k| std::env::var(k).ok())?;
        let hub = HubConfig::load(None)?;
        let (control, verifier) = config.build(data_dir).await?;
        let known = hub_engine::matching::follow::Subscriptions::default();
        known
            .catch_up(&*control.store)
            .await
            .map_err(|e| anyhow::anyhow!("reading subscriptions: {e}"))?;
        known.report_missing_keys(&control.keyring);
        match hub.store {
            StoreKind::Cql => attach_engine_store(&control, &hub).await?,
            StoreKind::Embedded => tracing::info!(
                "embedded store: pull, dead letters and health are the standalone hub's \
                 (served_by_the_engine here)"
            ),
        }
        let app = hub_control::http::router(control.clone(), verifier);
        let app = hub_control::ops::with_ops(app, control)
            .layer(axum::middleware::map_response(hub_core::error::json_errors));
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding {addr}"))?;
        tracing::info!(addr = %listener.local_addr()?, "control plane listening (REST /v1, /graphql, gRPC)");
        let (stop, stopping) = tokio::sync::oneshot::channel::<()>();
        let limits = hub.listener_limits();
        let tls = hub.listener_tls()?;
        let server = tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopping.await;
            };
            hub_core::listener::serve(listener, app, limits, tls, shutdown).await;
        });
        stopped.await;
        tracing::info!("stopping");
        let _ = stop.send(());
        match tokio::time::timeout(STOP_GRACE, server).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(anyhow::anyhow!("the server task failed: {e}")),
            Err(_) => tracing::warn!(grace = ?STOP_GRACE, "open connections cut at the grace"),
        }
        Ok(())
    })
}

/// Opens the engines' CQL store for the control plane: its reader, and hub events.
async fn attach_engine_store(control: &Control, hub: &HubConfig) -> anyhow::Result<()> {
    let cql = Arc::new(
        CqlStore::connect(hub_engine::hub::cql_settings(hub))
            .await
            .with_context(|| format!("connecting to the engines' store at {}", hub.cql_nodes))?,
    );
    let store: Arc<dyn Store> = cql.clone();
    let _ = control.reader.set(Arc::new(StoreReader {
        store: store.clone(),
        control: control.store.clone(),
        autodisable: hub_engine::delivery::start::autodisable_policy(hub),
        keyring: control.keyring.clone(),
        relay: Some(cql),
    }));
    let kafka = configured_producer(hub)?;
    let _ = control.events.set(Arc::new(PipelineEvents {
        store,
        routing: None,
        tokio: tokio::runtime::Handle::current(),
        kafka,
    }));
    tracing::info!(keyspace = %hub.cql_keyspace, "reading the engines' store");
    Ok(())
}
