//! GraphQL's live subscriptions, over WebSocket at `/graphql/ws` (`graphql-transport-ws`, and
//! the legacy `graphql-ws`). The token comes in the connection's `connection_init` payload
//! (`{"authorization": "Bearer …"}`) or the upgrade request's `Authorization` header.

use async_graphql::{Context, SimpleObject, Subscription};
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use tokio::sync::broadcast::error::RecvError;
use uuid::Uuid;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::reader::DeliveryReader;
use crate::service::Control;
use hub_core::model::Subscription;

use super::deliveries::{event, EventNode};
use super::{error, parts};
use hub_core::outcomes::DeliveryOutcome;

/// One attempt's outcome, as it happens.
#[derive(SimpleObject, Debug)]
pub struct DeliveryOutcomeNode {
    pub subscription_id: String,
    pub event_id: String,
    pub seq: u64,
    /// 1 for the first attempt.
    pub attempt: u32,
    /// delivered, retrying or dead_lettered.
    pub outcome: String,
    pub at: String,
    pub duration_ms: u64,
    pub error_class: Option<String>,
    pub status_code: Option<u16>,
}

impl From<DeliveryOutcome> for DeliveryOutcomeNode {
    fn from(o: DeliveryOutcome) -> Self {
        Self {
            subscription_id: o.subscription.to_string(),
            event_id: o.event_id.to_string(),
            seq: o.seq,
            attempt: o.attempt,
            outcome: o.settlement.as_str().to_owned(),
            at: hub_core::model::rfc3339(o.at_ms),
            duration_ms: o.duration_ms,
            error_class: o.error_class,
            status_code: o.status_code,
        }
    }
}

/// How long a caught-up `events` stream waits before reading again.
const FOLLOW_EVERY: std::time::Duration = std::time::Duration::from_millis(200);
/// Events read at a time for an `events` stream.
const STREAM_PAGE: usize = 100;

#[derive(Debug)]
pub struct SubscriptionRoot;

#[Subscription]
impl SubscriptionRoot {
    /// A pull subscription's events after `after` (0: from the start of retention) in `seq`
    /// order, then new ones as they are stored (R-CP-14); each carries its `seq` to resume after.
    /// Moves no read position. Served where an engine runs.
    async fn events(
        &self,
        ctx: &Context<'_>,
        subscription_id: String,
        after: u64,
    ) -> async_graphql::Result<impl Stream<Item = async_graphql::Result<EventNode>>> {
        // The checks of a read (permission, tenant, kind, an engine here), once at the start.
        let (control, who) = parts(ctx)?;
        control
            .check_pull(who, &subscription_id)
            .await
            .map_err(error)?;
        let (control, who) = (control.clone(), who.clone());
        let state = (VecDeque::new(), after, false);
        Ok(futures::stream::unfold(
            state,
            move |(mut ready, mut cursor, done)| {
                let (control, who, id) = (control.clone(), who.clone(), subscription_id.clone());
                async move {
                    if done {
                        return None;
                    }
                    loop {
                        if let Some(e) = ready.pop_front() {
                            return Some((Ok(e), (ready, cursor, false)));
                        }
                        // Each page reads the subscription again: a pause or a delete applies at once.
                        match control
                            .pull(&who, &id, Some(cursor), Some(STREAM_PAGE))
                            .await
                        {
                            Ok(page) => {
                                cursor = page.next_after.max(cursor);
                                if page.items.is_empty() {
                                    tokio::time::sleep(FOLLOW_EVERY).await;
                                }
                                ready.extend(page.items.into_iter().map(event));
                            }
                            Err(e) => return Some((Err(error(e)), (ready, cursor, true))),
                        }
                    }
                }
            },
        ))
    }

    /// Each delivery attempt of one of the tenant's subscriptions, as its outcome is settled (a
    /// success, a failure with a retry due, a dead letter), in the order they happen. Where the
    /// engine runs in this process (the standalone hub) straight from its lanes (a reader more
    /// than 1024 outcomes behind skips ahead); in a control process on CQL through the store,
    /// relayed by the engines from about a second after the subscription starts.
    async fn delivery_outcomes(
        &self,
        ctx: &Context<'_>,
        subscription_id: String,
    ) -> async_graphql::Result<BoxStream<'static, DeliveryOutcomeNode>> {
        let (control, who) = parts(ctx)?;
        control.get(who, &subscription_id).await.map_err(error)?;
        if control.local_index.get().is_some() {
            return Ok(local_outcomes(control, &who.tenant, subscription_id));
        }
        let reader = control
            .reader
            .get()
            .cloned()
            .ok_or_else(|| error(crate::reader::no_engine()))?;
        let sub = control.live(who, &subscription_id).await.map_err(error)?;
        reader.watch_outcomes(&sub).await.map_err(error)?;
        Ok(relayed_outcomes(reader, sub))
    }
}

/// The outcomes of the lanes in this process.
fn local_outcomes(
    control: &Control,
    tenant: &str,
    id: String,
) -> BoxStream<'static, DeliveryOutcomeNode> {
    let tenant = tenant.to_owned();
    let feed = control.outcomes.subscribe();
    let outcomes = futures::stream::unfold(feed, |mut feed| async move {
        loop {
            match feed.recv().await {
                Ok(o) => return Some((o, feed)),
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => return None,
            }
        }
    });
    outcomes
        .filter(move |o| {
            let mine = o.tenant == tenant && o.subscription.to_string() == id;
            async move { mine }
        })
        .map(DeliveryOutcomeNode::from)
        .boxed()
}

/// How often a relayed stream reads the store.
const RELAY_READ_EVERY: std::time::Duration = std::time::Duration::from_millis(250);
/// How often a relayed stream renews its watch (the mark lives 30 s).
const WATCH_RENEW_EVERY: std::time::Duration = std::time::Duration::from_secs(10);
/// How far back each read looks before the newest outcome seen: engines' clocks differ, so an
/// outcome can be written with an earlier time than one already read.
const CLOCK_SLACK_MS: i64 = 2_000;

/// Where a relayed stream stands.
struct Relay {
    reader: Arc<dyn DeliveryReader>,
    sub: Subscription,
    since_ms: i64,
    seen: HashMap<Uuid, i64>,
    ready: VecDeque<DeliveryOutcome>,
    watched_at: tokio::time::Instant,
}

impl Relay {
    /// The next outcome, reading (and renewing the watch) as needed; `None` ends the stream (a
    /// store that stops answering ends it too: the client resubscribes).
    async fn next(&mut self) -> Option<DeliveryOutcome> {
        loop {
            if let Some(o) = self.ready.pop_front() {
                return Some(o);
            }
            tokio::time::sleep(RELAY_READ_EVERY).await;
            if self.watched_at.elapsed() >= WATCH_RENEW_EVERY {
                self.reader.watch_outcomes(&self.sub).await.ok()?;
                self.watched_at = tokio::time::Instant::now();
            }
            let from = self.since_ms - CLOCK_SLACK_MS;
            let read = self.reader.relayed_outcomes(&self.sub, from).await.ok()?;
            for r in read {
                if self.seen.insert(r.id, r.relayed_at_ms).is_none() {
                    self.since_ms = self.since_ms.max(r.relayed_at_ms);
                    self.ready.push_back(r.outcome);
                }
            }
            let floor = self.since_ms - CLOCK_SLACK_MS;
            self.seen.retain(|_, at| *at >= floor);
        }
    }
}

/// The outcomes engines elsewhere relay through the store, from now on.
fn relayed_outcomes(
    reader: Arc<dyn DeliveryReader>,
    sub: Subscription,
) -> BoxStream<'static, DeliveryOutcomeNode> {
    let relay = Relay {
        reader,
        sub,
        since_ms: crate::config::now_ms(),
        seen: HashMap::new(),
        ready: VecDeque::new(),
        watched_at: tokio::time::Instant::now(),
    };
    futures::stream::unfold(relay, |mut relay| async move {
        let o = relay.next().await?;
        Some((DeliveryOutcomeNode::from(o), relay))
    })
    .boxed()
}
