//! The `Events` gRPC service (R-CP-14, R-TR-2): pull by `seq` a page at a time (`Pull`, the REST
//! pull's rules), or as a stream that follows the tenant's log (`Subscribe`): stored events after
//! `after` in `seq` order, then new ones as they are stored, each with its cursor. The stream is
//! fed through a small bounded channel, so a slow reader holds at most `STREAM_BUFFER` events in
//! the hub and reading waits for it (HTTP/2 flow control does the rest).

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use tonic::{Request, Response, Status};

use super::deliveries::size;
use super::pb::events_server::Events;
use super::pb::{Event, PullRequest, PullResponse, SubscribeRequest};
use super::{status, Grpc};
use crate::auth::Principal;
use crate::service::Control;
use hub_core::error::ErrorCode;
use hub_core::views::PulledEvent;

/// Events a stream holds for a reader that has not taken them yet.
const STREAM_BUFFER: usize = 16;
/// Events read from the log at a time for a stream.
const STREAM_PAGE: usize = 100;
/// How long a stream that caught up waits before looking for new events.
const FOLLOW_EVERY: Duration = Duration::from_millis(200);
/// How long a stream waits after a failed read before trying again.
const RETRY_AFTER: Duration = Duration::from_secs(1);

fn message(e: PulledEvent) -> Event {
    Event {
        seq: e.seq,
        id: e.id,
        key: e.key,
        origin: e.origin,
        schema_version: e.schema_version,
        time: e.time,
        subject: e.subject,
        content_type: e.content_type,
        data: e.payload.into(),
        cursor: e.seq,
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<Event, Status>> + Send>>;

#[tonic::async_trait]
impl Events for Grpc {
    async fn pull(&self, r: Request<PullRequest>) -> Result<Response<PullResponse>, Status> {
        let who = self.caller(r.metadata())?;
        let q = r.into_inner();
        let page = self
            .control
            .pull(&who, &q.subscription_id, q.after, size(q.limit))
            .await
            .map_err(status)?;
        Ok(Response::new(PullResponse {
            items: page.items.into_iter().map(message).collect(),
            next_after: page.next_after,
        }))
    }

    type SubscribeStream = EventStream;

    async fn subscribe(
        &self,
        r: Request<SubscribeRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let who = self.caller(r.metadata())?;
        let q = r.into_inner();
        self.control
            .check_pull(&who, &q.subscription_id)
            .await
            .map_err(status)?;
        let (tx, rx) = tokio::sync::mpsc::channel(STREAM_BUFFER);
        let follow = Follow {
            control: self.control.clone(),
            who,
            id: q.subscription_id,
            cursor: q.after,
        };
        tokio::spawn(follow.run(tx));
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        Ok(Response::new(Box::pin(stream)))
    }
}

/// One stream's reader of the log.
struct Follow {
    control: Arc<Control>,
    who: Principal,
    id: String,
    cursor: u64,
}

impl Follow {
    /// Sends pages until the reader goes away or the subscription does (then its status).
    async fn run(mut self, tx: tokio::sync::mpsc::Sender<Result<Event, Status>>) {
        loop {
            // Each page reads the subscription again: a pause, an edit of what matches or a
            // delete applies at once.
            let read = self
                .control
                .pull(&self.who, &self.id, Some(self.cursor), Some(STREAM_PAGE))
                .await;
            let page = match read {
                Ok(p) => p,
                Err(e) if e.code == ErrorCode::StoreUnavailable => {
                    tracing::warn!(error = %e.message, "a pull stream's read failed; retrying");
                    tokio::time::sleep(RETRY_AFTER).await;
                    continue;
                }
                Err(e) => {
                    let _ = tx.send(Err(status(e))).await;
                    return;
                }
            };
            let caught_up = page.items.is_empty();
            self.cursor = page.next_after.max(self.cursor);
            for e in page.items {
                if tx.send(Ok(message(e))).await.is_err() {
                    return; // the reader went away
                }
            }
            if caught_up {
                if tx.is_closed() {
                    return;
                }
                tokio::time::sleep(FOLLOW_EVERY).await;
            }
        }
    }
}
