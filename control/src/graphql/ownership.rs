//! Which engine delivers which partitions, over GraphQL (issue 18, operators only): the view of
//! `GET /v1/admin/ownership`, field for field.

use async_graphql::{Context, Object, SimpleObject};

use super::{error, parts, Out};
use hub_core::ownership::{EngineOwnership, LaneOwnership};

/// One lane an engine pages.
#[derive(SimpleObject, Debug)]
pub struct LaneOwnershipNode {
    pub lane: u32,
    /// The engine's shard paging it.
    pub shard: u32,
    /// assigned, stray or shard.
    pub how: String,
    pub topic: Option<String>,
    pub partition: Option<i32>,
    pub adopted_at_ms: Option<i64>,
    /// Records behind the partition's end.
    pub lag: Option<i64>,
    /// Who holds the lane in the store (an engine id).
    pub holder: Option<String>,
    pub held_until_ms: Option<i64>,
    /// Whether the reporting engine held it at the report.
    pub held_here: bool,
    /// Jobs waiting in the lane.
    pub pending: Option<i64>,
}

/// One engine's lanes, as it last reported them.
#[derive(SimpleObject, Debug)]
pub struct EngineOwnershipNode {
    pub engine: String,
    /// Its static consumer-group member id.
    pub instance: Option<String>,
    /// by_partition or by_shard.
    pub numbering: String,
    pub assignment_generation: u64,
    pub reported_at_ms: i64,
    pub lanes: Vec<LaneOwnershipNode>,
}

fn lane(l: LaneOwnership) -> LaneOwnershipNode {
    LaneOwnershipNode {
        lane: l.lane,
        shard: l.shard,
        how: l.how,
        topic: l.topic,
        partition: l.partition,
        adopted_at_ms: l.adopted_at_ms,
        lag: l.lag,
        holder: l.holder,
        held_until_ms: l.held_until_ms,
        held_here: l.held_here,
        pending: l.pending,
    }
}

fn engine(e: EngineOwnership) -> EngineOwnershipNode {
    EngineOwnershipNode {
        engine: e.engine,
        instance: e.instance,
        numbering: e.numbering,
        assignment_generation: e.assignment_generation,
        reported_at_ms: e.reported_at_ms,
        lanes: e.lanes.into_iter().map(lane).collect(),
    }
}

#[derive(Debug, Default)]
pub struct OwnershipQueries;

#[Object]
impl OwnershipQueries {
    /// Every running engine's delivery lanes (operators only): the partitions the consumer group
    /// assigned it, strays it adopted, with holds, pending jobs and lag.
    async fn ownership(&self, ctx: &Context<'_>) -> Out<Vec<EngineOwnershipNode>> {
        let (control, who) = parts(ctx)?;
        let view = control.ownership(who).await.map_err(error)?;
        Ok(view.engines.into_iter().map(engine).collect())
    }
}
