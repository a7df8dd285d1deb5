//! The engine's side of `hub_core::reader::DeliveryReader`: what its store holds about a
//! subscription — pull pages (R-CP-14), dead letters (R-DI-8, listed and replayed) and delivery
//! health (R-CP-12) — as `hub_core::views`. The control plane checks the caller, the tenant and
//! the page sizes first and serves the answers over REST, GraphQL and gRPC; the standalone hub
//! and a `hub-control serve` on the engines' CQL keyspace both hand it one of these.

use std::sync::Arc;

use hub_core::control_store::ControlStore;
use hub_core::error::ApiError;
use hub_core::model::{rfc3339, Subscription, VerificationState};
use hub_core::reader::DeliveryReader;
use hub_core::views::{
    AttemptView, AutoDisableView, DeadLetterPage, DeadLetterView, EventPage, HealthView,
    PulledEvent,
};

use crate::delivery::autodisable::Policy;
use crate::delivery::marks::MARK_EVERY_MS;
use crate::delivery::ownership_report::PUBLISH_EVERY;
use crate::delivery::pull::read_page;
use crate::store::cql::CqlStore;
use crate::store::{AttemptRecord, DeadLetter, DeliveryStats, Store, StoredEvent};
use hub_core::outcomes::Relayed;
use hub_core::reader::no_engine;

/// A reader over one engine store.
#[derive(Debug, Clone)]
pub struct StoreReader {
    pub store: Arc<dyn Store>,
    /// Where a pull read marks `last_success_at`.
    pub control: Arc<dyn ControlStore>,
    /// The policy health reports `would_disable` against.
    pub autodisable: Policy,
    /// The master keys: health says when a subscription's secret is sealed under one not held.
    pub keyring: Arc<hub_core::secrets::Keyring>,
    /// On CQL in a process without lanes (a control process): where engines relay the outcomes
    /// of watched subscriptions.
    pub relay: Option<Arc<CqlStore>>,
}

fn store_down(what: &str, e: &crate::store::StoreError) -> ApiError {
    tracing::error!(error = %e, "{what} read failed");
    ApiError::unavailable(format!("{what} is unavailable; retry"))
}

/// A dead letter's id, as lists show it and replays name it.
fn job_ref(id: u128) -> String {
    format!("{id:032x}")
}

fn pulled(stored: StoredEvent) -> PulledEvent {
    let ev = stored.event;
    PulledEvent {
        seq: stored.seq,
        id: ev.id.to_string(),
        key: ev.key,
        origin: ev.source,
        schema_version: ev.schema_version,
        time: ev.time,
        subject: ev.subject,
        content_type: ev
            .data_content_type
            .unwrap_or_else(|| "application/json".into()),
        payload: ev.payload,
    }
}

fn attempt_view(a: &AttemptRecord) -> AttemptView {
    AttemptView {
        at: rfc3339(a.at_ms),
        outcome: if a.success { "success" } else { "failure" },
        duration_ms: a.duration_ms,
        error_class: a.error_class.clone(),
        status_code: a.status_code,
        detail: (!a.detail.is_empty()).then(|| a.detail.clone()),
    }
}

fn dead_view(d: &DeadLetter) -> DeadLetterView {
    DeadLetterView {
        id: job_ref(d.job.id),
        event_id: d.job.event_id.to_string(),
        seq: d.job.event_seq,
        reason: d.reason.clone(),
        attempts: d.job.attempts,
        received_at: rfc3339(d.job.received_at_ms),
        dead_at: rfc3339(d.dead_at_ms),
        last_attempt: d.job.last.as_ref().map(attempt_view),
    }
}

/// The status word of R-CP-12.
fn status_of(sub: &Subscription, stats: &DeliveryStats) -> &'static str {
    if sub.paused {
        "Paused"
    } else if !sub.enabled {
        "Stopped"
    } else if sub.verification_state == VerificationState::PendingVerification {
        "Pending"
    } else if stats.recent.last().is_some_and(|a| !a.success) {
        "Failing"
    } else {
        "Healthy"
    }
}

impl StoreReader {
    /// Records a pull read as the subscription's last success (R-CP-2), at most once a minute
    /// (as deliveries do: `delivery::marks`); a lost race or a store failure leaves it for the
    /// next read.
    async fn mark_read(&self, sub: &Subscription) {
        let now = crate::clock::now_ms();
        if !sub.enabled
            || sub.paused
            || sub
                .last_success_at_ms
                .is_some_and(|t| now - t < MARK_EVERY_MS)
        {
            return;
        }
        let mark = hub_core::control_store::DeliveryMark::of(sub, true, now);
        if let Err(e) = self.control.mark_deliveries(vec![mark]).await {
            tracing::debug!(error = %e, "last_success_at not recorded");
        }
    }
}

#[async_trait::async_trait]
impl DeliveryReader for StoreReader {
    async fn events(
        &self,
        sub: &Subscription,
        after: Option<u64>,
        limit: usize,
    ) -> Result<EventPage, ApiError> {
        let page = read_page(&*self.store, sub, after, limit)
            .await
            .map_err(|e| store_down("the event log", &e))?;
        self.mark_read(sub).await;
        Ok(EventPage {
            items: page.items.into_iter().map(pulled).collect(),
            next_after: page.next_after,
        })
    }

    async fn dead_letters(
        &self,
        sub: &Subscription,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<DeadLetterPage, ApiError> {
        let cursor = cursor
            .map(|c| u128::from_str_radix(c, 16))
            .transpose()
            .map_err(|_| ApiError::bad_request("cursor is not one this API returned"))?;
        let (items, next) = self
            .store
            .dead_letters(&sub.tenant, sub.id, cursor, limit)
            .await
            .map_err(|e| store_down("delivery state", &e))?;
        Ok(DeadLetterPage {
            items: items.iter().map(dead_view).collect(),
            next_cursor: next.map(job_ref),
        })
    }

    async fn replay(&self, sub: &Subscription, ids: Option<&[String]>) -> Result<u64, ApiError> {
        let ids = ids
            .map(|ids| {
                ids.iter()
                    .map(|i| u128::from_str_radix(i, 16))
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()
            .map_err(|_| ApiError::invalid("ids must be dead-letter ids"))?;
        let n = self
            .store
            .replay_dead_letters(&sub.tenant, sub.id, ids, crate::clock::now_ms())
            .await
            .map_err(|e| store_down("delivery state", &e))?;
        Ok(n as u64)
    }

    async fn ready(&self) -> Result<(), String> {
        self.store
            .delivery_stats(hub_core::control_store::PROBE_TENANT, uuid::Uuid::nil())
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }

    /// Reports older than three publishing periods are left out: their engine stopped (a
    /// clean stop leaves its last report for the store's 30 s).
    async fn ownership(&self) -> Result<hub_core::ownership::OwnershipView, ApiError> {
        let fresh_after = crate::clock::now_ms()
            - 3 * i64::try_from(PUBLISH_EVERY.as_millis()).unwrap_or(i64::MAX);
        let mut engines = self
            .store
            .ownership_reports()
            .await
            .map_err(|e| store_down("ownership", &e))?;
        engines.retain(|e| e.reported_at_ms >= fresh_after);
        Ok(hub_core::ownership::OwnershipView { engines })
    }

    async fn watch_outcomes(&self, sub: &Subscription) -> Result<(), ApiError> {
        let relay = self.relay.as_ref().ok_or_else(no_engine)?;
        relay
            .watch_outcomes(&sub.tenant, sub.id)
            .await
            .map_err(|e| store_down("the outcome relay", &e))
    }

    async fn relayed_outcomes(
        &self,
        sub: &Subscription,
        since_ms: i64,
    ) -> Result<Vec<Relayed>, ApiError> {
        let relay = self.relay.as_ref().ok_or_else(no_engine)?;
        relay
            .relayed_outcomes(&sub.tenant, sub.id, since_ms)
            .await
            .map_err(|e| store_down("the outcome relay", &e))
    }

    async fn health(&self, sub: &Subscription) -> Result<HealthView, ApiError> {
        let stats = self
            .store
            .delivery_stats(&sub.tenant, sub.id)
            .await
            .map_err(|e| store_down("delivery state", &e))?;
        let now = crate::clock::now_ms();
        let window_start = stats.recent.first().map_or(now, |a| a.at_ms);
        let verdict = stats.streak.verdict(now, &self.autodisable);
        Ok(HealthView {
            status: status_of(sub, &stats),
            window_start: rfc3339(window_start),
            snapshot_at: rfc3339(now),
            recent_outcomes: stats.recent.iter().map(attempt_view).collect(),
            delivered: stats.delivered,
            failed_attempts: stats.failed_attempts,
            dead_letters: stats.dead_letters,
            auto_disable: AutoDisableView {
                enabled: self.autodisable.enabled,
                window_hours: u64::try_from(self.autodisable.window_ms / 3_600_000).unwrap_or(0),
                would_disable: verdict.is_some(),
                streak_first_failure_at: stats.streak.first_failure_ms.map(rfc3339),
                streak_last_failure_at: stats.streak.last_failure_ms.map(rfc3339),
                disabled_reason: sub.marks.disabled_reason.clone(),
            },
            secret_key_missing: hub_core::sink::missing_key(&self.keyring, sub).map(str::to_owned),
        })
    }
}
