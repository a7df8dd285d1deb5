//! Delivery decisions as pure code (DESIGN invariant 3): every function takes `now` and, where
//! chance is involved, a random source, and returns a decision; the sinks and wheels (issue 6)
//! carry them out.
//!
//! - `fairness`: deficit round robin over tenants by weight, half the workers per destination
//!   (R-DI-2, R-DI-3).
//! - `retry`: the backoff curve with full jitter, per-subscription overrides, the eight-attempt
//!   and 24-hour last-attempt rules (R-DI-6, R-DI-7).
//! - `breaker`: the circuit breaker per (tenant, destination) with its last-attempt exception
//!   (R-DI-9).
//! - `marks`: when an attempt's outcome is written to the subscription's `last_success_at` /
//!   `last_failure_at` (R-CP-2).
//! - `autodisable`: the failure streak and its two-gate verdict (R-DI-10).
//! - `backpressure`: the gate that holds ingest back while delivery is behind its bound.
//! - `pacing`: when a lane writes its next store step (outcomes linger for a lease) and pages.
//! - `recent`: the jobs a lane leased lately, so a late hand-off from ingest is not taken twice.
//! - `pull`: a pull subscription's page of the tenant log, from `after` or from its shared
//!   read position (R-CP-14, R-DI-11).
//! - `signature`: webhook signatures, ours and Standard Webhooks, dual during rotation (R-DI-12).

pub mod autodisable;
pub mod backpressure;
pub mod breaker;
pub mod control_link;
pub mod decide;
pub mod fairness;
pub mod hub_events;
pub mod lane;
pub mod marks;
pub mod ownership;
pub mod ownership_report;
pub mod pacing;
pub mod pull;
pub mod recent;
pub mod retry;
pub mod shard_webhook;
pub mod start;
mod strays;
pub use hub_core::sink::webhook::signature;
