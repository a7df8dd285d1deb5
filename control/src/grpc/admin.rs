//! `Admin` over gRPC: operator reads (issue 18's ownership), rendered as messages.

use tonic::{Request, Response, Status};

use super::pb::admin_server::Admin;
use super::pb::{EngineOwnership, LaneOwnership, OwnershipRequest, OwnershipResponse};
use super::{status, Grpc};

fn lane(l: hub_core::ownership::LaneOwnership) -> LaneOwnership {
    LaneOwnership {
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

fn engine(e: hub_core::ownership::EngineOwnership) -> EngineOwnership {
    EngineOwnership {
        engine: e.engine,
        instance: e.instance,
        numbering: e.numbering,
        assignment_generation: e.assignment_generation,
        reported_at_ms: e.reported_at_ms,
        lanes: e.lanes.into_iter().map(lane).collect(),
    }
}

#[tonic::async_trait]
impl Admin for Grpc {
    async fn ownership(
        &self,
        r: Request<OwnershipRequest>,
    ) -> Result<Response<OwnershipResponse>, Status> {
        let who = self.caller(r.metadata())?;
        let view = self.control.ownership(&who).await.map_err(status)?;
        Ok(Response::new(OwnershipResponse {
            engines: view.engines.into_iter().map(engine).collect(),
        }))
    }
}
