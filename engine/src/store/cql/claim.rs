//! Dedup claims (R-IN-6) and the write of a batch's events.
//!
//! Every attempt at writing an event records a claim of its own first: a plain write of a row
//! keyed by the id and the attempt, naming the event's origin and the seq it intends to take. It
//! also reads every claim of the id. The claims decide nothing by themselves: an id is taken
//! once a claim of it names a seq where the log holds that id (an earlier attempt of ours: its
//! jobs are written again; anyone else's: a duplicate). What orders writers is the tenant's
//! append, conditional on the head the writer knew *before* it read the claims:
//!
//! - heads only grow, so an append applied at head `h` means no append came between the moment
//!   the writer knew `h` and its own; every earlier append's claim was written before that
//!   append, so the read saw it, and an event already appended was found;
//! - a refused append tells the writer the new head, and it reads the claims of what it still
//!   has to append again before it tries once more.
//!
//! So two writers of one id (a replay racing the partition's old owner, two HTTP requests, the
//! same event on two partitions) append it once, and an event costs one Paxos round — its
//! tenant's append — where a conditional claim (`IF NOT EXISTS`) cost a second one per dedup
//! partition. A claim whose attempt crashed before its append names a seq that does not hold its
//! id: it takes nothing, and the replay appends the event.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use futures::{StreamExt, TryStreamExt};
use uuid::Uuid;

use super::job_rows::Part;
use super::log::{BoxedRow, Pending};
use super::{as_i64, unavailable, CqlStore, DEDUP_CLAIMS, LOG_APPENDS};
use crate::clock::now_ms;
use crate::store::codec::encode;
use crate::store::{BatchOutcome, InboxEvent, StoreError, UnitId};

/// Claim partitions written and read at once for one batch.
const CLAIM_CONCURRENCY: usize = 64;
/// Most ids of one dedup partition claimed (and read) in one request.
const CLAIMS_PER_REQUEST: usize = 64;

/// What the claims of an id say before its append.
#[derive(Debug, Clone, Copy)]
pub(super) enum Claim {
    /// No claim names a seq holding this id: append it.
    Open,
    /// An earlier attempt of ours (same origin) appended it at `seq`: no append, but its jobs
    /// are written again (idempotently, at that attempt's `claimed_at`), since the earlier
    /// attempt may have ended before them.
    Stored { seq: u64, claimed_at: i64 },
    /// Appended by a record of another origin.
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

/// One attempt at a batch's events: who writes them and when, the key of its claims.
#[derive(Debug, Clone, Copy)]
pub(super) struct Attempt<'a> {
    pub unit: &'a UnitId,
    pub fenced: bool,
    /// Random per attempt: the claims' clustering key beside the id, so no attempt overwrites
    /// another's claim (two HTTP requests of one id share their origin).
    pub key: i64,
    pub claimed_at: i64,
}

impl Attempt<'_> {
    /// Who claims: the Kafka position, or for HTTP the source and the id.
    pub fn origin_of(&self, event: &InboxEvent) -> String {
        if self.fenced {
            format!(
                "{}/{}/{}",
                self.unit.topic, self.unit.partition, event.offset
            )
        } else {
            format!("{}/{}", self.unit.topic, event.id)
        }
    }
}

/// Another attempt's claim, as read back.
#[derive(Debug)]
struct ClaimRow {
    origin: String,
    claimed_at: i64,
    intent: i64,
}

/// The dedup partition: the hour of the UUIDv7 time, so every claim of an id lands together.
pub(super) fn id_bucket(id: &Uuid) -> i64 {
    id.get_timestamp()
        .map_or(0, |ts| i64::try_from(ts.to_unix().0 / 3600).unwrap_or(0))
}

/// Groups events (by index into `events`) per dedup partition, at most `CLAIMS_PER_REQUEST` a
/// group, in the order given.
fn per_claim_partition(
    events: &[InboxEvent],
    members: impl Iterator<Item = usize>,
) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut open: HashMap<(&str, i64), usize> = HashMap::new();
    for i in members {
        let key = (events[i].tenant.as_str(), id_bucket(&events[i].id));
        match open.get(&key) {
            Some(&g) if groups[g].len() < CLAIMS_PER_REQUEST => groups[g].push(i),
            _ => {
                open.insert(key, groups.len());
                groups.push(vec![i]);
            }
        }
    }
    groups
}

impl CqlStore {
    pub(super) fn ttl(seconds: u32) -> i32 {
        i32::try_from(seconds).unwrap_or(i32::MAX)
    }

    /// Writes the attempt's claims of `members` (one dedup partition), each at its intended seq.
    async fn write_claims(
        &self,
        attempt: &Attempt<'_>,
        events: &[InboxEvent],
        intents: &[u64],
        members: &[usize],
    ) -> Result<(), StoreError> {
        let ttl = Self::ttl(self.settings.dedup_ttl_s);
        let mut rows = Vec::with_capacity(members.len());
        for &i in members {
            let (e, bucket) = (&events[i], id_bucket(&events[i].id));
            let row: BoxedRow<'_> = Box::new((
                &e.tenant,
                bucket,
                e.id,
                attempt.key,
                attempt.origin_of(e),
                attempt.claimed_at,
                as_i64(intents[i])?,
                ttl,
            ));
            rows.push((Part::Dedup(&e.tenant, bucket), &self.st.claim_dedup, row));
        }
        self.in_batches(rows).await
    }

    /// Every claim of `ids` (one dedup partition) but the attempt's own, by id.
    async fn read_claims(
        &self,
        attempt: &Attempt<'_>,
        tenant: &str,
        bucket: i64,
        ids: Vec<Uuid>,
    ) -> Result<HashMap<Uuid, Vec<ClaimRow>>, StoreError> {
        let rows = self
            .session
            .execute_unpaged(&self.st.read_claims, (tenant, bucket, ids))
            .await
            .map_err(unavailable)?
            .into_rows_result()
            .map_err(unavailable)?;
        let mut out: HashMap<Uuid, Vec<ClaimRow>> = HashMap::new();
        for row in rows
            .rows::<(Uuid, i64, Option<String>, Option<i64>, Option<i64>)>()
            .map_err(unavailable)?
        {
            let (id, key, origin, claimed_at, intent) = row.map_err(unavailable)?;
            if key == attempt.key {
                continue;
            }
            out.entry(id).or_default().push(ClaimRow {
                origin: origin.unwrap_or_default(),
                claimed_at: claimed_at.unwrap_or(0),
                intent: intent.unwrap_or(0),
            });
        }
        Ok(out)
    }

    /// What `rows`, the other claims of `event`, say: a claim naming a seq where the log holds
    /// the id took it. The log is read serially, so an append still in flight there is finished
    /// or discarded first.
    async fn judge_claims(
        &self,
        attempt: &Attempt<'_>,
        event: &InboxEvent,
        rows: &[ClaimRow],
    ) -> Result<Claim, StoreError> {
        let mut looked = HashSet::new();
        for row in rows {
            let Ok(seq) = u64::try_from(row.intent) else {
                continue;
            };
            if seq == 0 || !looked.insert(seq) {
                continue;
            }
            if self.log_id_at(&event.tenant, seq).await? != Some(event.id) {
                continue;
            }
            return Ok(if row.origin == attempt.origin_of(event) {
                Claim::Stored {
                    seq,
                    claimed_at: row.claimed_at,
                }
            } else {
                Claim::Duplicate
            });
        }
        Ok(Claim::Open)
    }

    /// Reads the claims of `members` (one dedup partition) and judges each.
    async fn judge_partition(
        &self,
        attempt: &Attempt<'_>,
        events: &[InboxEvent],
        members: &[usize],
    ) -> Result<Vec<(usize, Claim)>, StoreError> {
        let Some(&first) = members.first() else {
            return Ok(Vec::new());
        };
        let (tenant, bucket) = (&events[first].tenant, id_bucket(&events[first].id));
        let ids = members.iter().map(|&i| events[i].id).collect();
        let claims = self.read_claims(attempt, tenant, bucket, ids).await?;
        let judged =
            members.iter().map(|&i| {
                let rows = claims.get(&events[i].id).map_or(&[][..], Vec::as_slice);
                async move {
                    Ok::<_, StoreError>((i, self.judge_claims(attempt, &events[i], rows).await?))
                }
            });
        futures::future::try_join_all(judged).await
    }

    /// Judges `members` again once an append learned of another writer: reads their claims,
    /// partition by partition.
    pub(super) async fn judge_again(
        &self,
        attempt: &Attempt<'_>,
        events: &[InboxEvent],
        members: impl Iterator<Item = usize>,
    ) -> Result<HashMap<usize, Claim>, StoreError> {
        let groups = per_claim_partition(events, members);
        let judged: Vec<Vec<(usize, Claim)>> = futures::stream::iter(groups)
            .map(|members| async move { self.judge_partition(attempt, events, &members).await })
            .buffer_unordered(CLAIM_CONCURRENCY)
            .try_collect()
            .await?;
        Ok(judged.into_iter().flatten().collect())
    }

    /// Records a batch's events: claims, then one append per tenant (tenants in parallel, each
    /// tenant's events in batch order, so a partition's order is each tenant's seq order).
    /// Returns the outcome and the events whose jobs are to be written (new ones, and those an
    /// earlier attempt of ours appended, perhaps without their jobs).
    pub(super) async fn store_events(
        &self,
        unit: &UnitId,
        fenced: bool,
        events: &[InboxEvent],
    ) -> Result<(BatchOutcome, Vec<Appended>), StoreError> {
        let attempt = Attempt {
            unit,
            fenced,
            key: rand::random(),
            claimed_at: now_ms(),
        };
        let mut seen = HashSet::new();
        let first: Vec<bool> = events
            .iter()
            .map(|e| seen.insert((e.tenant.as_str(), e.id)))
            .collect();

        // Each tenant's head as known now, before any claim is read: its append is conditional
        // on it. Each new event's intended seq follows it; a wrong guess is corrected before
        // the append.
        let mut heads: HashMap<&str, u64> = HashMap::new();
        let mut next: HashMap<&str, u64> = HashMap::new();
        let mut intents = vec![0; events.len()];
        for (i, e) in events.iter().enumerate().filter(|(i, _)| first[*i]) {
            let head = match next.get(e.tenant.as_str()) {
                Some(h) => *h,
                None => {
                    let head = self.guess_head(&e.tenant).await?;
                    heads.insert(&e.tenant, head);
                    head
                }
            };
            intents[i] = head + 1;
            next.insert(&e.tenant, head + 1);
        }

        let started = Instant::now();
        let groups = per_claim_partition(events, (0..events.len()).filter(|i| first[*i]));
        let (attempt_ref, intents_ref) = (&attempt, &intents);
        let claims: Vec<Vec<(usize, Claim)>> = futures::stream::iter(groups)
            .map(|members| async move {
                let (_, judged) = futures::future::try_join(
                    self.write_claims(attempt_ref, events, intents_ref, &members),
                    self.judge_partition(attempt_ref, events, &members),
                )
                .await?;
                Ok::<_, StoreError>(judged)
            })
            .buffer_unordered(CLAIM_CONCURRENCY)
            .try_collect()
            .await?;
        self.timings.record(DEDUP_CLAIMS, started);
        let mut claims: Vec<(usize, Claim)> = claims.into_iter().flatten().collect();
        // Back to batch order: each tenant's events are appended in the partition's order
        // (R-IN-8), whatever order the claims came back in.
        claims.sort_unstable_by_key(|(i, _)| *i);

        let mut by_tenant: HashMap<&str, Vec<Pending<'_>>> = HashMap::new();
        let mut found = Vec::new();
        for &(i, claim) in &claims {
            match claim {
                Claim::Open => {
                    let event = &events[i];
                    by_tenant.entry(&event.tenant).or_default().push(Pending {
                        index: i,
                        event,
                        intent: intents[i],
                        blob: encode(event),
                    });
                }
                other => found.push((i, other)),
            }
        }
        let started = Instant::now();
        let written =
            futures::future::try_join_all(by_tenant.into_iter().map(|(tenant, pending)| {
                let head = heads.get(tenant).copied().unwrap_or_default();
                self.append(&attempt, events, head, pending)
            }))
            .await?;
        self.timings.record(LOG_APPENDS, started);

        let mut appended = Vec::new();
        let mut seqs: HashMap<usize, u64> = HashMap::new();
        for placed in written.into_iter().flatten() {
            match placed {
                (i, Ok(seq)) => {
                    seqs.insert(i, seq);
                    appended.push(Appended {
                        index: i,
                        seq,
                        claimed_at: attempt.claimed_at,
                        first: true,
                    });
                }
                (i, Err(claim)) => found.push((i, claim)),
            }
        }
        for (index, claim) in found {
            if let Claim::Stored { seq, claimed_at } = claim {
                appended.push(Appended {
                    index,
                    seq,
                    claimed_at,
                    first: false,
                });
            }
        }
        let mut outcome = BatchOutcome::default();
        for (i, e) in events.iter().enumerate() {
            match seqs.get(&i) {
                Some(&seq) => outcome.stored.push((e.tenant.clone(), e.id, seq)),
                None => outcome.duplicates.push((e.tenant.clone(), e.id)),
            }
        }
        Ok((outcome, appended))
    }
}
