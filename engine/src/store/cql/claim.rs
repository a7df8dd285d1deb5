//! Dedup claims (R-IN-6) and the write of a batch's events.
//!
//! Each new `(tenant, id)` is claimed with `INSERT ... IF NOT EXISTS`, recording its origin and the
//! seq it intends to take. A refused claim is a duplicate unless its origin is ours: then an
//! earlier attempt at this very record (a crash or a failed batch before the offset moved) left
//! it, and a serial read of the log at its intended seq tells whether that attempt finished
//! (drop it as a duplicate) or not (finish it now).

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use futures::{StreamExt, TryStreamExt};
use uuid::Uuid;

use super::log::Pending;
use super::lwt::LwtAnswer;
use super::{as_i64, unavailable, CqlStore, DEDUP_CLAIMS, LOG_APPENDS};
use crate::clock::now_ms;
use crate::store::{BatchOutcome, InboxEvent, StoreError, UnitId};

/// Claims in flight at once for one batch.
const CLAIM_CONCURRENCY: usize = 128;

/// How long an unfinished HTTP claim is presumed to belong to a request still running. HTTP
/// claims have no owner to fence, so a second request waits this long before finishing one.
const HTTP_CLAIM_GRACE_MS: i64 = 10_000;

/// What a claim found.
#[derive(Debug, Clone, Copy)]
enum Claim {
    /// First write of this id: append it at (or near) `intent`.
    New { intent: u64 },
    /// Our own earlier claim, not yet in the log: append it.
    Resume { intent: u64 },
    /// Already stored, or claimed by another record.
    Duplicate,
}

/// Who claims: the Kafka position, or for HTTP the source and the id.
fn origin_of(unit: &UnitId, fenced: bool, event: &InboxEvent) -> String {
    if fenced {
        format!("{}/{}/{}", unit.topic, unit.partition, event.offset)
    } else {
        format!("{}/{}", unit.topic, event.id)
    }
}

/// The dedup partition: the hour of the UUIDv7 time, so a duplicate lands where the first did.
pub(super) fn id_bucket(id: &Uuid) -> i64 {
    id.get_timestamp()
        .map_or(0, |ts| i64::try_from(ts.to_unix().0 / 3600).unwrap_or(0))
}

impl CqlStore {
    pub(super) fn ttl(seconds: u32) -> i32 {
        i32::try_from(seconds).unwrap_or(i32::MAX)
    }

    async fn claim(
        &self,
        unit: &UnitId,
        fenced: bool,
        event: &InboxEvent,
        intent: u64,
    ) -> Result<Claim, StoreError> {
        let origin = origin_of(unit, fenced, event);
        let now = now_ms();
        let answer = LwtAnswer::read(
            self.session
                .execute_unpaged(
                    &self.st.claim_dedup,
                    (
                        &event.tenant,
                        id_bucket(&event.id),
                        event.id,
                        &origin,
                        now,
                        as_i64(intent)?,
                        Self::ttl(self.settings.dedup_ttl_s),
                    ),
                )
                .await
                .map_err(unavailable)?,
        )?;
        if answer.applied {
            return Ok(Claim::New { intent });
        }
        if answer.text("origin") != Some(origin.as_str()) {
            return Ok(Claim::Duplicate);
        }
        let prior = answer
            .bigint("intent")
            .and_then(|i| u64::try_from(i).ok())
            .unwrap_or(intent);
        if self.log_id_at(&event.tenant, prior).await? == Some(event.id) {
            return Ok(Claim::Duplicate);
        }
        if !fenced && now - answer.bigint("claimed_at").unwrap_or(0) < HTTP_CLAIM_GRACE_MS {
            return Err(StoreError::Unavailable(format!(
                "event {} is still being written by another request; retry shortly",
                event.id
            )));
        }
        Ok(Claim::Resume { intent: prior })
    }

    /// Records a batch's events: claims, then one append per tenant (tenants in parallel, each
    /// tenant's events in batch order, so a partition's order is each tenant's seq order).
    pub(super) async fn store_events(
        &self,
        unit: &UnitId,
        fenced: bool,
        events: &[InboxEvent],
    ) -> Result<BatchOutcome, StoreError> {
        let mut seen = HashSet::new();
        let first: Vec<bool> = events
            .iter()
            .map(|e| seen.insert((e.tenant.as_str(), e.id)))
            .collect();

        // Guess each new event's seq from the tenant's last known head; a wrong guess is
        // corrected before its append.
        let mut next: HashMap<&str, u64> = HashMap::new();
        let mut guesses = vec![0; events.len()];
        for (i, e) in events.iter().enumerate().filter(|(i, _)| first[*i]) {
            let head = match next.get(e.tenant.as_str()) {
                Some(h) => *h,
                None => self.guess_head(&e.tenant).await?,
            };
            guesses[i] = head + 1;
            next.insert(&e.tenant, head + 1);
        }

        let guesses = &guesses;
        let started = Instant::now();
        let claims: Vec<(usize, Claim)> =
            futures::stream::iter((0..events.len()).filter(|i| first[*i]))
                .map(|i| async move {
                    let claim = self.claim(unit, fenced, &events[i], guesses[i]).await?;
                    Ok::<_, StoreError>((i, claim))
                })
                .buffered(CLAIM_CONCURRENCY)
                .try_collect()
                .await?;
        self.timings.record(DEDUP_CLAIMS, started);

        let mut by_tenant: HashMap<&str, Vec<Pending<'_>>> = HashMap::new();
        for (i, claim) in &claims {
            if let Claim::New { intent } | Claim::Resume { intent } = *claim {
                let event = &events[*i];
                by_tenant
                    .entry(event.tenant.as_str())
                    .or_default()
                    .push(Pending { event, intent });
            }
        }
        let started = Instant::now();
        let appended = futures::future::try_join_all(
            by_tenant
                .into_iter()
                .map(|(tenant, pending)| self.append(tenant, pending)),
        )
        .await?;
        self.timings.record(LOG_APPENDS, started);
        let seqs: HashMap<(&str, Uuid), u64> = appended
            .into_iter()
            .flatten()
            .map(|(tenant, id, seq)| ((tenant, id), seq))
            .collect();

        let mut outcome = BatchOutcome::default();
        let mut stored_once = HashSet::new();
        for e in events {
            match seqs.get(&(e.tenant.as_str(), e.id)) {
                Some(seq) if stored_once.insert((e.tenant.as_str(), e.id)) => {
                    outcome.stored.push((e.tenant.clone(), e.id, *seq));
                }
                _ => outcome.duplicates.push((e.tenant.clone(), e.id)),
            }
        }
        Ok(outcome)
    }
}
