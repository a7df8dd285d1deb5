//! Streaming Hub's processes: the one place engine and control plane meet. `standalone` builds
//! the control plane a standalone hub (`streaming-hub`) serves beside its engine;
//! `control_process` is `hub-control serve`, the control plane alone beside engines on one CQL
//! keyspace. The engine and the control plane never depend on each other; both stand on
//! `hub-core`.

pub mod control_process;
pub mod standalone;
