//! gRPC over the same service as REST and GraphQL (R-TR-2, R-CP-19): package
//! `lerian.streaming.v1` (`schema/proto/`), a service per resource, `grpc.health.v1` and server
//! reflection, on the control plane's listener (HTTP/2 beside HTTP/1). Metadata `authorization`,
//! `x-idempotency` and `if-match` carry what the HTTP headers of the same names carry; an error is
//! the status of its code with a `google.rpc.ErrorInfo` whose `reason` is the code (R-CP-18).

mod admin;
mod convert;
mod deliveries;
mod events;
mod subscriptions;

use std::collections::HashMap;
use std::sync::Arc;

use tonic::metadata::MetadataMap;
use tonic::Status;
use tonic_types::{ErrorDetails, StatusExt};

use crate::answer::Served;
use crate::auth::{Principal, TokenVerifier};
use crate::service::Control;
use hub_core::error::ApiError;

/// The generated messages, clients and servers.
#[allow(
    missing_docs,
    missing_debug_implementations,
    clippy::all,
    clippy::pedantic
)]
pub mod pb {
    tonic::include_proto!("lerian.streaming.v1");

    /// Every file of the package, for reflection.
    pub const DESCRIPTOR: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptor.bin"));
}

/// The domain of every `ErrorInfo` the hub sends.
pub const ERROR_DOMAIN: &str = "streaming-hub.lerian.io";

/// What every gRPC service holds.
#[derive(Clone, Debug)]
pub struct Grpc {
    control: Arc<Control>,
    verifier: Arc<TokenVerifier>,
}

/// The gRPC services as routes to merge into the HTTP router (one listener for all transports).
pub fn router(control: Arc<Control>, verifier: Arc<TokenVerifier>) -> axum::Router {
    let grpc = Grpc { control, verifier };
    let (health, health_service) = tonic_health::server::health_reporter();
    // The reporter's state is a watch channel: setting it needs no runtime.
    futures::executor::block_on(async {
        health
            .set_serving::<pb::subscriptions_server::SubscriptionsServer<Grpc>>()
            .await;
        health
            .set_serving::<pb::catalog_server::CatalogServer<Grpc>>()
            .await;
        health
            .set_serving::<pb::events_server::EventsServer<Grpc>>()
            .await;
        health
            .set_serving::<pb::dead_letters_server::DeadLettersServer<Grpc>>()
            .await;
        health
            .set_serving::<pb::deliveries_server::DeliveriesServer<Grpc>>()
            .await;
        health
            .set_serving::<pb::admin_server::AdminServer<Grpc>>()
            .await;
    });
    let mut routes = axum::Router::new();
    routes = route(routes, health_service);
    routes = route(
        routes,
        pb::subscriptions_server::SubscriptionsServer::new(grpc.clone()),
    );
    routes = route(routes, pb::catalog_server::CatalogServer::new(grpc.clone()));
    routes = route(routes, pb::events_server::EventsServer::new(grpc.clone()));
    routes = route(
        routes,
        pb::dead_letters_server::DeadLettersServer::new(grpc.clone()),
    );
    routes = route(
        routes,
        pb::deliveries_server::DeliveriesServer::new(grpc.clone()),
    );
    routes = route(routes, pb::admin_server::AdminServer::new(grpc));
    match tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::DESCRIPTOR)
        .build_v1()
    {
        Ok(reflection) => routes = route(routes, reflection),
        Err(e) => {
            tracing::error!(error = %e, "gRPC reflection is off: the descriptor set did not load")
        }
    }
    routes
}

/// Adds a gRPC service under its `/<package>.<Service>/` prefix. Unlike tonic's own `Routes`, no
/// fallback: the merged router's unknown paths stay HTTP 404s in the error shape (a gRPC client
/// reads a 404 as `UNIMPLEMENTED`).
pub fn route<S>(router: axum::Router, service: S) -> axum::Router
where
    S: tonic::server::NamedService
        + tower::Service<
            axum::http::Request<axum::body::Body>,
            Response = axum::http::Response<tonic::body::Body>,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    router.route_service(&format!("/{}/{{*rest}}", S::NAME), service)
}

/// An API error as a gRPC status: the mapped code, the message, and an `ErrorInfo` whose reason is
/// the error code (extra fields, such as a failed probe's `error_class`, in its metadata).
pub fn status(e: ApiError) -> Status {
    let mut metadata = HashMap::new();
    if let Some(serde_json::Value::Object(extra)) = &e.extra {
        for (k, v) in extra {
            let text = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
            metadata.insert(k.clone(), text);
        }
    }
    Status::with_error_details(
        tonic::Code::from_i32(e.code.grpc() as i32),
        e.message.clone(),
        ErrorDetails::with_error_info(e.code.as_str(), ERROR_DOMAIN, metadata),
    )
}

impl Grpc {
    /// The caller, from the `authorization` metadata.
    fn caller(&self, metadata: &MetadataMap) -> Result<Principal, Status> {
        let token = match metadata.get("authorization").map(|v| v.to_str()) {
            Some(Err(_)) => {
                return Err(status(ApiError::bad_request(
                    "the authorization metadata is not valid text",
                )))
            }
            Some(Ok(t)) => Some(t),
            None => None,
        };
        self.verifier.verify(token).map_err(status)
    }
}

/// A text metadata entry (`x-idempotency`, `if-match`).
fn text(metadata: &MetadataMap, name: &str) -> Result<Option<String>, Status> {
    metadata
        .get(name)
        .map(|v| {
            v.to_str().map(str::to_owned).map_err(|_| {
                status(ApiError::bad_request(format!(
                    "the {name} metadata is not valid text"
                )))
            })
        })
        .transpose()
}

/// The answer's view and ETag, or the error as a status.
fn view(served: Served) -> Result<(serde_json::Value, Option<String>), Status> {
    let answer = served.map_err(status)?;
    Ok((answer.body.unwrap_or_default(), answer.etag))
}
