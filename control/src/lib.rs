//! The Streaming Hub control plane: REST `/v1` for subscriptions (issue 5), in data-flow order:
//! `http` (transport) → `auth` (Access Manager JWT) → `service` (the rules: idempotency, ETags,
//! validation) → `model` / `destination` / `catalog` / `secrets` (pure checks and sealing) →
//! `store` (subscriptions, revision log, idempotency records). REST, GraphQL (`graphql/`) and gRPC
//! (`grpc/`) are the transports of one service; `reader` is the engine's window for what it holds.
//! `auth`, `catalog`, `store` and `reader` live in `hub-core`, beneath the engine too.

// The merged GraphQL roots nest their resolvers' futures deeper than the default limit allows.
#![recursion_limit = "256"]

pub mod answer;
pub mod config;
pub mod deliveries;
mod edits;
pub mod grant;
pub mod graphql;
pub mod grpc;
pub mod http;
pub mod onboarding;
pub mod ops;
pub mod partners;
pub mod probe;
pub mod push;
mod rewrite;
pub mod rotation;
pub mod service;

// What the engine needs as well lives in `hub-core` (the engine never depends on the control
// plane); these names keep the control plane's own paths.
pub use hub_core::{auth, catalog, control_store as store, reader};
