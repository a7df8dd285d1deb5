//! The Streaming Hub control plane: REST `/v1` for subscriptions (issue 5), in data-flow order:
//! `http` (transport) → `auth` (Access Manager JWT) → `service` (the rules: idempotency, ETags,
//! validation) → `model` / `destination` / `catalog` / `secrets` (pure checks and sealing) →
//! `store` (subscriptions, revision log, idempotency records).

pub mod auth;
pub mod catalog;
pub mod config;
pub mod cql;
pub mod destination;
pub mod error;
pub mod http;
pub mod model;
pub mod onboarding;
pub mod probe;
pub mod secrets;
pub mod service;
pub mod sink;
pub mod store;
