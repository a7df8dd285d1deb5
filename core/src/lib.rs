//! Streaming Hub core: what the engine and the control plane both need, beneath both — the
//! subscription model (`model`), the error vocabulary (`error`), sealed secrets (`secrets`), the
//! destination rules (`destination`, R-SEC-2 / R-SK-2), every sink (`sink`: webhook, RabbitMQ,
//! SQS, EventBridge; shared by deliveries and probes), the CQL plumbing (`cql`) and the embedded
//! stores' redb handle (`redb_handle`).

pub mod cql;
pub mod destination;
pub mod error;
pub mod json;
pub mod listener;
pub mod model;
pub mod outcomes;
pub mod ownership;
pub mod partners;
pub mod record;
pub mod redb_handle;
pub mod secrets;
pub mod sink;
pub mod views;
