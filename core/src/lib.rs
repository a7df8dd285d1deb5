//! Streaming Hub core: what the engine and the control plane both need, beneath both — the
//! subscription model (`model`), the error vocabulary (`error`), sealed secrets (`secrets`), the
//! destination rules (`destination`, R-SEC-2 / R-SK-2), every sink (`sink`: webhook, RabbitMQ,
//! SQS, EventBridge; shared by deliveries and probes), the CQL plumbing (`cql`), the embedded
//! stores' redb handle (`redb_handle`), Access Manager's tokens (`auth`), the catalog, the control
//! store engines follow (`control_store`), and what a control plane reads of an engine
//! (`reader`, `in_process`).

pub mod auth;
pub mod catalog;
pub mod clock;
pub mod control_store;
pub mod cql;
pub mod destination;
pub mod error;
pub mod in_process;
pub mod json;
pub mod listener;
pub mod loopback;
pub mod model;
pub mod outcomes;
pub mod ownership;
pub mod partners;
pub mod reader;
pub mod record;
pub mod redb_handle;
pub mod secrets;
pub mod sink;
pub mod views;
