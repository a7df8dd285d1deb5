//! The `Store` contract (DESIGN invariant 4), cut along the lines its conformance suites draw:
//! what ingest writes ([`Ingest`]), the tenant's log as readers see it ([`EventLog`]), the
//! forensic records ([`Forensics`]), delivery jobs ([`Jobs`]), holds on lanes between engines
//! sharing a store ([`LaneHolds`]), and the store's own upkeep and figures ([`StoreOps`]).
//! A caller that needs one part names that part; the engine holds the whole as `dyn Store`.
//!
//! Methods are `Send` futures run on tokio; shards reach them through `runtime::TokioBridge`,
//! or directly where a store says its writes may be awaited anywhere
//! ([`Ingest::writes_anywhere`]).

mod event_log;
mod forensics;
mod ingest;
mod jobs;
mod lane_holds;
mod ops;

pub use event_log::EventLog;
pub use forensics::Forensics;
pub use ingest::Ingest;
pub use jobs::Jobs;
pub use lane_holds::LaneHolds;
pub use ops::StoreOps;

/// The whole contract both stores keep: every part of it.
pub trait Store: Ingest + EventLog + Forensics + Jobs + LaneHolds + StoreOps {}

impl<S> Store for S where S: Ingest + EventLog + Forensics + Jobs + LaneHolds + StoreOps {}
