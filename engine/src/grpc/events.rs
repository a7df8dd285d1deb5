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

use super::token;
use hub_control::auth::Permission;
use hub_control::grpc::pb::events_server::{Events, EventsServer};
use hub_control::grpc::pb::{Event, PullRequest, PullResponse, SubscribeRequest};
use hub_control::grpc::status;
use hub_core::error::{ApiError, ErrorCode};
use hub_core::model::{SinkKind, Subscription};

use crate::delivery::pull::read_page;
use crate::delivery_api::DeliveryApi;
use crate::pull_api::{mark_success, DEFAULT_LIMIT, MAX_LIMIT};
use crate::store::StoredEvent;

/// Events a stream holds for a reader that has not taken them yet.
const STREAM_BUFFER: usize = 16;
/// Events read from the log at a time for a stream.
const STREAM_PAGE: usize = 100;
/// How long a stream that caught up waits before looking for new events.
const FOLLOW_EVERY: Duration = Duration::from_millis(200);
/// How long a stream waits after a failed read before trying again.
const RETRY_AFTER: Duration = Duration::from_secs(1);

pub(super) fn server(api: Arc<DeliveryApi>) -> EventsServer<EventsService> {
    EventsServer::new(EventsService { api })
}

#[derive(Debug)]
pub(super) struct EventsService {
    api: Arc<DeliveryApi>,
}

impl EventsService {
    /// The caller's pull subscription `id`.
    async fn pull_subscription(
        &self,
        token: Option<&str>,
        id: &str,
    ) -> Result<Subscription, Status> {
        let sub = self
            .api
            .subscription_for(token, id, Permission::Get)
            .await
            .map_err(status)?;
        if sub.sink_kind != SinkKind::Pull {
            return Err(status(ApiError::new(
                ErrorCode::NotAPullSubscription,
                format!(
                    "a {} subscription is delivered by push, not read",
                    sub.sink_kind
                ),
            )));
        }
        Ok(sub)
    }
}

fn message(stored: &StoredEvent) -> Event {
    let ev = &stored.event;
    Event {
        seq: stored.seq,
        id: ev.id.to_string(),
        key: ev.key.clone(),
        origin: ev.source.clone(),
        schema_version: ev.schema_version.clone(),
        time: ev.time.clone(),
        subject: ev.subject.clone(),
        content_type: ev
            .data_content_type
            .clone()
            .unwrap_or_else(|| "application/json".into()),
        data: ev.payload.clone(),
        cursor: stored.seq,
    }
}

fn log_down(e: impl std::fmt::Display) -> Status {
    tracing::error!(error = %e, "pull read failed");
    status(ApiError::unavailable("the event log is unavailable; retry"))
}

type EventStream = Pin<Box<dyn Stream<Item = Result<Event, Status>> + Send>>;

#[tonic::async_trait]
impl Events for EventsService {
    async fn pull(&self, r: Request<PullRequest>) -> Result<Response<PullResponse>, Status> {
        let token = token(&r)?;
        let q = r.into_inner();
        let limit = match q.limit {
            None => DEFAULT_LIMIT,
            Some(l) => usize::try_from(l)
                .ok()
                .filter(|l| (1..=MAX_LIMIT).contains(l))
                .ok_or_else(|| {
                    status(ApiError::bad_request(format!(
                        "limit is from 1 to {MAX_LIMIT}"
                    )))
                })?,
        };
        let sub = self
            .pull_subscription(token.as_deref(), &q.subscription_id)
            .await?;
        let page = read_page(&*self.api.store, &sub, q.after, limit)
            .await
            .map_err(log_down)?;
        if sub.enabled && !sub.paused {
            mark_success(&self.api, sub).await;
        }
        Ok(Response::new(PullResponse {
            items: page.items.iter().map(message).collect(),
            next_after: page.next_after,
        }))
    }

    type SubscribeStream = EventStream;

    async fn subscribe(
        &self,
        r: Request<SubscribeRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let token = token(&r)?;
        let q = r.into_inner();
        self.pull_subscription(token.as_deref(), &q.subscription_id)
            .await?;
        let (tx, rx) = tokio::sync::mpsc::channel(STREAM_BUFFER);
        let follow = Follow {
            service: EventsService {
                api: self.api.clone(),
            },
            token,
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
    service: EventsService,
    token: Option<String>,
    id: String,
    cursor: u64,
}

impl Follow {
    /// Sends pages until the reader goes away or the subscription does (then its status).
    async fn run(mut self, tx: tokio::sync::mpsc::Sender<Result<Event, Status>>) {
        loop {
            // Read again each round: a pause, an edit of what matches or a delete applies at once.
            let sub = match self
                .service
                .pull_subscription(self.token.as_deref(), &self.id)
                .await
            {
                Ok(s) => s,
                Err(e) if e.code() == tonic::Code::Unavailable => {
                    tokio::time::sleep(RETRY_AFTER).await;
                    continue;
                }
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            };
            let page = match read_page(
                &*self.service.api.store,
                &sub,
                Some(self.cursor),
                STREAM_PAGE,
            )
            .await
            {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(error = %e, "a pull stream's read failed; retrying");
                    tokio::time::sleep(RETRY_AFTER).await;
                    continue;
                }
            };
            for stored in &page.items {
                if tx.send(Ok(message(stored))).await.is_err() {
                    return; // the reader went away
                }
            }
            self.cursor = page.next_after.max(self.cursor);
            if page.items.is_empty() {
                if tx.is_closed() {
                    return;
                }
                tokio::time::sleep(FOLLOW_EVERY).await;
            }
        }
    }
}
