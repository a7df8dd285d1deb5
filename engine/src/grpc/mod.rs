//! The gRPC services of what the engine holds (R-TR-2): `Events` (pull by `seq`, paged or
//! streamed), `DeadLetters` and `Deliveries` (health). Same tokens, rules and error codes as their
//! REST routes (`pull_api.rs`, `delivery_api.rs`), whose transport-free functions they call.

mod deliveries;
mod events;

use std::sync::Arc;

use tonic::{Request, Status};

use hub_control::auth::Permission;
use hub_control::grpc::{route, status};
use hub_core::error::ApiError;
use hub_core::model::Subscription;

use crate::delivery_api::DeliveryApi;

/// The services, as routes for the engine's listener.
pub fn router(api: Arc<DeliveryApi>) -> axum::Router {
    let mut routes = axum::Router::new();
    routes = route(routes, events::server(api.clone()));
    routes = route(routes, deliveries::dead_letters(api.clone()));
    route(routes, deliveries::health(api))
}

/// The bearer token of a call, from its `authorization` metadata.
fn token<T>(r: &Request<T>) -> Result<Option<String>, Status> {
    r.metadata()
        .get("authorization")
        .map(|v| {
            v.to_str().map(str::to_owned).map_err(|_| {
                status(ApiError::bad_request(
                    "the authorization metadata is not valid text",
                ))
            })
        })
        .transpose()
}

/// The caller's subscription `id`, after the token and permission checks.
async fn subscription<T>(
    api: &DeliveryApi,
    r: &Request<T>,
    id: &str,
    need: Permission,
) -> Result<Subscription, Status> {
    let token = token(r)?;
    api.subscription_for(token.as_deref(), id, need)
        .await
        .map_err(status)
}
