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
use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::{Consistency, SerialConsistency};
use uuid::Uuid;

use super::log::BoxedRow;
use super::log::Pending;
use super::lwt::{existing_ids, lwt};
use super::{as_i64, unavailable, CqlStore, DEDUP_CLAIMS, LOG_APPENDS};
use crate::clock::now_ms;
use crate::store::{BatchOutcome, InboxEvent, StoreError, UnitId};

/// Claim batches (or single claims) in flight at once for one batch.
const CLAIM_CONCURRENCY: usize = 64;
/// Most ids claimed in one conditional batch.
const BATCH_CLAIM_MAX: usize = 64;
/// Refused claim batches retried (without the ids that clashed) before going one by one.
const BATCH_CLAIM_ROUNDS: usize = 3;

/// How long an unfinished HTTP claim is presumed to belong to a request still running. HTTP
/// claims have no owner to fence, so a second request waits this long before finishing one.
const HTTP_CLAIM_GRACE_MS: i64 = 10_000;

/// What a claim found. `claimed_at` is the claim's recorded time: the write timestamp of the
/// event's jobs, the same in every replay of the claim.
#[derive(Debug, Clone, Copy)]
enum Claim {
    /// First write of this id: append it at (or near) `intent`.
    New { intent: u64, claimed_at: i64 },
    /// Our own earlier claim, not yet in the log: append it.
    Resume { intent: u64, claimed_at: i64 },
    /// Our own earlier claim, already in the log at `seq` (a replay after the append): no
    /// append, but its jobs are written again (idempotently), since the earlier attempt may have
    /// ended before them.
    Stored { seq: u64, claimed_at: i64 },
    /// Already stored, or claimed by another record.
    Duplicate,
}

/// An event of the batch whose jobs are to be written: its index, its seq, its claim's time.
#[derive(Debug, Clone, Copy)]
pub(super) struct Appended {
    pub index: usize,
    pub seq: u64,
    pub claimed_at: i64,
    /// Appended by this write (its jobs are new), not found appended by an earlier one.
    pub first: bool,
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
        let answer = lwt(self
            .session
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
            .map_err(unavailable)?)?;
        if answer.applied {
            return Ok(Claim::New {
                intent,
                claimed_at: now,
            });
        }
        if answer.text("origin") != Some(origin.as_str()) {
            return Ok(Claim::Duplicate);
        }
        let prior = answer
            .bigint("intent")
            .and_then(|i| u64::try_from(i).ok())
            .unwrap_or(intent);
        let claimed_at = answer.bigint("claimed_at").unwrap_or(0);
        if self.log_id_at(&event.tenant, prior).await? == Some(event.id) {
            return Ok(Claim::Stored {
                seq: prior,
                claimed_at,
            });
        }
        if !fenced && now - claimed_at < HTTP_CLAIM_GRACE_MS {
            return Err(StoreError::Unavailable(format!(
                "event {} is still being written by another request; retry shortly",
                event.id
            )));
        }
        Ok(Claim::Resume {
            intent: prior,
            claimed_at,
        })
    }

    /// Claims several ids of one dedup partition with one conditional batch (one Paxos round
    /// instead of one per id). When the batch is refused, the answer names the ids that exist:
    /// those are claimed one by one (they are duplicates or our own unfinished claims) and the
    /// rest tried again as a batch; after a few refusals everything left goes one by one.
    async fn claim_partition(
        &self,
        unit: &UnitId,
        fenced: bool,
        events: &[InboxEvent],
        guesses: &[u64],
        mut members: Vec<usize>,
    ) -> Result<Vec<(usize, Claim)>, StoreError> {
        let mut out = Vec::with_capacity(members.len());
        let mut one_by_one = Vec::new();
        for _ in 0..BATCH_CLAIM_ROUNDS {
            if members.len() < 2 {
                break;
            }
            let now = now_ms();
            let origins: Vec<String> = members
                .iter()
                .map(|&i| origin_of(unit, fenced, &events[i]))
                .collect();
            let mut batch = Batch::new(BatchType::Unlogged);
            batch.set_consistency(Consistency::LocalQuorum);
            batch.set_serial_consistency(Some(SerialConsistency::LocalSerial));
            let mut values: Vec<BoxedRow<'_>> = Vec::with_capacity(members.len());
            for (k, &i) in members.iter().enumerate() {
                let e = &events[i];
                batch.append_statement(self.st.claim_dedup.clone());
                values.push(Box::new((
                    &e.tenant,
                    id_bucket(&e.id),
                    e.id,
                    origins[k].clone(),
                    now,
                    as_i64(guesses[i])?,
                    Self::ttl(self.settings.dedup_ttl_s),
                )));
            }
            let (applied, taken) = existing_ids(
                self.session
                    .batch(&batch, values)
                    .await
                    .map_err(unavailable)?,
            )?;
            if applied {
                out.extend(members.iter().map(|&i| {
                    let claim = Claim::New {
                        intent: guesses[i],
                        claimed_at: now,
                    };
                    (i, claim)
                }));
                members.clear();
                break; // the clashing ids set aside in earlier rounds still need their claim
            }
            if taken.is_empty() {
                break; // refused without saying why: go one by one
            }
            let (clash, rest): (Vec<usize>, Vec<usize>) = members
                .iter()
                .partition(|&&i| taken.contains(&events[i].id));
            one_by_one.extend(clash);
            members = rest;
        }
        one_by_one.extend(members);
        let singles = one_by_one.into_iter().map(|i| async move {
            Ok::<_, StoreError>((i, self.claim(unit, fenced, &events[i], guesses[i]).await?))
        });
        out.extend(futures::future::try_join_all(singles).await?);
        Ok(out)
    }

    /// Records a batch's events: claims, then one append per tenant (tenants in parallel, each
    /// tenant's events in batch order, so a partition's order is each tenant's seq order).
    /// Returns the outcome and the events whose jobs are to be written (new ones, and our own
    /// claims a crash left before their jobs).
    pub(super) async fn store_events(
        &self,
        unit: &UnitId,
        fenced: bool,
        events: &[InboxEvent],
    ) -> Result<(BatchOutcome, Vec<Appended>), StoreError> {
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
        // Claims grouped by dedup partition (tenant, UUIDv7 hour), in batch order.
        let mut partitions: Vec<((&str, i64), Vec<usize>)> = Vec::new();
        let mut where_is: HashMap<(&str, i64), usize> = HashMap::new();
        for i in (0..events.len()).filter(|i| first[*i]) {
            let key = (events[i].tenant.as_str(), id_bucket(&events[i].id));
            let slot = *where_is.entry(key).or_insert_with(|| {
                partitions.push((key, Vec::new()));
                partitions.len() - 1
            });
            match partitions[slot].1.len() {
                n if n < BATCH_CLAIM_MAX => partitions[slot].1.push(i),
                _ => {
                    partitions.push((key, vec![i]));
                    where_is.insert(key, partitions.len() - 1);
                }
            }
        }
        let groups: Vec<Vec<usize>> = partitions.into_iter().map(|(_, m)| m).collect();
        let mut claims: Vec<(usize, Claim)> = futures::stream::iter(groups)
            .map(|members| self.claim_partition(unit, fenced, events, guesses, members))
            .buffered(CLAIM_CONCURRENCY)
            .try_collect::<Vec<_>>()
            .await?
            .into_iter()
            .flatten()
            .collect();
        self.timings.record(DEDUP_CLAIMS, started);
        // Back to batch order: each tenant's events are appended in the partition's order
        // (R-IN-8), whatever order the claims came back in.
        claims.sort_unstable_by_key(|(i, _)| *i);

        let mut by_tenant: HashMap<&str, Vec<Pending<'_>>> = HashMap::new();
        let mut claimed_at: HashMap<usize, i64> = HashMap::new();
        let mut appended = Vec::new();
        for (i, claim) in &claims {
            match *claim {
                Claim::New { claimed_at: at, .. } | Claim::Resume { claimed_at: at, .. } => {
                    claimed_at.insert(*i, at);
                }
                Claim::Stored { seq, claimed_at } => appended.push(Appended {
                    index: *i,
                    seq,
                    claimed_at,
                    first: false,
                }),
                Claim::Duplicate => {}
            }
            if let Claim::New { intent, .. } | Claim::Resume { intent, .. } = *claim {
                let event = &events[*i];
                by_tenant
                    .entry(event.tenant.as_str())
                    .or_default()
                    .push(Pending { event, intent });
            }
        }
        let started = Instant::now();
        let written = futures::future::try_join_all(
            by_tenant
                .into_iter()
                .map(|(tenant, pending)| self.append(tenant, pending)),
        )
        .await?;
        self.timings.record(LOG_APPENDS, started);
        let seqs: HashMap<(&str, Uuid), u64> = written
            .into_iter()
            .flatten()
            .map(|(tenant, id, seq)| ((tenant, id), seq))
            .collect();
        for (&index, &at) in &claimed_at {
            let e = &events[index];
            if let Some(&seq) = seqs.get(&(e.tenant.as_str(), e.id)) {
                appended.push(Appended {
                    index,
                    seq,
                    claimed_at: at,
                    first: true,
                });
            }
        }

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
        Ok((outcome, appended))
    }
}
