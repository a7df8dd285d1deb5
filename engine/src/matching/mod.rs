//! Matching (R-MA-1 … 3): which subscriptions want an event. Ingest calls it for every batch (the
//! store writes a job per match with its event); pull pages call it to filter the tenant log.
//! It is not delivery: it decides what exists to deliver, not how.
//!
//! - `index`: the immutable per-revision index by tenant and event key.
//! - `follow`: keeps the shared `Subscriptions` (the current index and what it was built from)
//!   up to date from the control plane's revision log, published as immutable snapshots each
//!   shard keeps its own copy of (`LocalSubscriptions`).
//! - `by_id`: the subscriptions by id in shares copied on write, for those snapshots.

pub mod by_id;
pub mod follow;
pub mod index;

pub use index::{wants, EventFacts, MatchIndex};
