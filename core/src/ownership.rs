//! Who delivers what across the engines sharing a store (issue 18, R-OP-1): each engine's delivery
//! lanes — the Kafka partitions the consumer group assigned it, strays it adopted — with the
//! shard paging each, the store's hold and pending jobs, and the partition's consumer lag.
//!
//! An engine serves its own at `/admin/ownership` and publishes it to the store every few
//! seconds; the control plane lists every engine's from there (REST `/v1/admin/ownership`, GraphQL
//! `ownership`, gRPC `Admin.Ownership`). One shape for all, stored as JSON.

use serde::{Deserialize, Serialize};

/// One engine's lanes, as it last reported them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineOwnership {
    /// The engine's id where it holds lanes (the `holder` its lanes show).
    pub engine: String,
    /// Its static consumer-group member id (`group.instance.id`), when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// `by_partition` (lanes follow the consumer group) or `by_shard`.
    pub numbering: String,
    /// How many assignment changes this engine has seen since its start.
    pub assignment_generation: u64,
    /// When the engine made this report (ms since the epoch).
    pub reported_at_ms: i64,
    pub lanes: Vec<LaneOwnership>,
}

/// One lane an engine pages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaneOwnership {
    pub lane: u32,
    /// The engine's shard paging it.
    pub shard: u32,
    /// `assigned` (the group assigned the partition), `stray` (adopted: nobody held it) or
    /// `shard` (lanes numbered by shard).
    pub how: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<i32>,
    /// When a stray was adopted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopted_at_ms: Option<i64>,
    /// Records behind the partition's end, as the Kafka client last reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag: Option<i64>,
    /// Who holds the lane in the store (an engine id), when the store has holds.
    #[serde(default)]
    pub holder: Option<String>,
    #[serde(default)]
    pub held_until_ms: Option<i64>,
    /// Whether the reporting engine held it at the report.
    pub held_here: bool,
    /// Jobs waiting in the lane, when the store counts them.
    #[serde(default)]
    pub pending: Option<i64>,
}

/// Every engine's report, as the control plane lists them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnershipView {
    pub engines: Vec<EngineOwnership>,
}
