//! Jobs in the embedded store: created in the ingest transaction with their event (R-DI-1),
//! paged per lane and tenant by due time, leased, settled, dead-lettered and replayed.
//!
//! A job lives in `JOBS` and has exactly one key in `JOB_DUE`; every change of its due time
//! removes the old key and inserts the new one in the same transaction.

use std::collections::{HashMap, HashSet};

use redb::{Database, ReadableTable, ReadableTableMetadata, Table, WriteTransaction};
use uuid::Uuid;

use super::tables::*;
use super::unavailable;
use crate::store::codec::{decode, encode};
use crate::store::{
    lease_job, settle_job, DeadLetter, DeliveryStats, DeliveryStep, DuePage, DueQuery, JobChange,
    JobRecord, Started, StepOutcome, StoreError, StoredEvent, EVENT_GONE,
};

/// The delivery tables, opened once per write transaction.
pub(super) struct JobTables<'txn> {
    jobs: Table<'txn, u128, &'static [u8]>,
    due: Table<'txn, (u32, &'static str, u128, u64, u128), ()>,
    tenants: Table<'txn, (u32, &'static str, u128), u64>,
    leased: Table<'txn, u128, ()>,
    dead: Table<'txn, (&'static str, u128, u128), &'static [u8]>,
    stats: Table<'txn, (&'static str, u128), &'static [u8]>,
}

fn due_key(job: &JobRecord) -> (u32, &str, u128, u64, u128) {
    (
        job.lane,
        &*job.tenant,
        job.subscription.as_u128(),
        job.due_at_ms.max(0) as u64,
        job.id,
    )
}

fn queue_key(job: &JobRecord) -> (u32, &str, u128) {
    (job.lane, &*job.tenant, job.subscription.as_u128())
}

impl<'txn> JobTables<'txn> {
    pub(super) fn open(txn: &'txn WriteTransaction) -> Result<Self, redb::TableError> {
        Ok(Self {
            jobs: txn.open_table(JOBS)?,
            due: txn.open_table(JOB_DUE)?,
            tenants: txn.open_table(LANE_TENANTS)?,
            leased: txn.open_table(LEASED)?,
            dead: txn.open_table(DEAD)?,
            stats: txn.open_table(STATS)?,
        })
    }

    /// Jobs in a lane's queue (tenant, subscription).
    fn queued(&self, key: (u32, &str, u128)) -> Result<u64, StoreError> {
        Ok(self
            .tenants
            .get(key)
            .map_err(unavailable)?
            .map_or(0, |g| g.value()))
    }

    fn load(&self, id: u128) -> Result<Option<JobRecord>, StoreError> {
        match self.jobs.get(id).map_err(unavailable)? {
            Some(v) => Ok(Some(decode(v.value())?)),
            None => Ok(None),
        }
    }

    /// Adds a job (a replayed creation of an existing job changes nothing).
    pub(super) fn create(&mut self, job: &JobRecord) -> Result<(), StoreError> {
        if self.jobs.get(job.id).map_err(unavailable)?.is_some() {
            return Ok(());
        }
        self.jobs
            .insert(job.id, encode(job).as_slice())
            .map_err(unavailable)?;
        self.due.insert(due_key(job), ()).map_err(unavailable)?;
        let key = queue_key(job);
        let n = self.queued(key)?;
        self.tenants.insert(key, n + 1).map_err(unavailable)?;
        Ok(())
    }

    fn remove(&mut self, job: &JobRecord) -> Result<(), StoreError> {
        self.jobs.remove(job.id).map_err(unavailable)?;
        self.due.remove(due_key(job)).map_err(unavailable)?;
        self.leased.remove(job.id).map_err(unavailable)?;
        let key = queue_key(job);
        let n = self.queued(key)?;
        if n <= 1 {
            self.tenants.remove(key).map_err(unavailable)?;
        } else {
            self.tenants.insert(key, n - 1).map_err(unavailable)?;
        }
        Ok(())
    }

    /// Rewrites a job (its due key moves with it).
    fn update(&mut self, before: &JobRecord, after: &JobRecord) -> Result<(), StoreError> {
        self.due.remove(due_key(before)).map_err(unavailable)?;
        self.due.insert(due_key(after), ()).map_err(unavailable)?;
        self.jobs
            .insert(after.id, encode(after).as_slice())
            .map_err(unavailable)?;
        Ok(())
    }

    fn bury(&mut self, job: JobRecord, reason: String, now_ms: i64) -> Result<(), StoreError> {
        self.remove(&job)?;
        let key = (&*job.tenant, job.subscription.as_u128(), job.id);
        let letter = DeadLetter {
            job: job.clone(),
            reason,
            dead_at_ms: now_ms,
        };
        self.dead
            .insert(key, encode(&letter).as_slice())
            .map_err(unavailable)?;
        Ok(())
    }
}

/// Statistics touched by one transaction, written once at its end.
#[derive(Default)]
struct StatsCache(HashMap<(String, Uuid), DeliveryStats>);

impl StatsCache {
    fn get<'a>(
        &'a mut self,
        t: &JobTables<'_>,
        tenant: &str,
        sub: Uuid,
    ) -> Result<&'a mut DeliveryStats, StoreError> {
        let key = (tenant.to_owned(), sub);
        if !self.0.contains_key(&key) {
            let stored = match t.stats.get((tenant, sub.as_u128())).map_err(unavailable)? {
                Some(v) => decode(v.value())?,
                None => DeliveryStats::default(),
            };
            self.0.insert(key.clone(), stored);
        }
        Ok(self.0.entry(key).or_default())
    }

    fn write(self, t: &mut JobTables<'_>) -> Result<(), StoreError> {
        for ((tenant, sub), stats) in self.0 {
            t.stats
                .insert((tenant.as_str(), sub.as_u128()), encode(&stats).as_slice())
                .map_err(unavailable)?;
        }
        Ok(())
    }
}

/// One delivery step inside a group transaction.
pub(super) fn apply_step(
    t: &mut JobTables<'_>,
    events: &Table<'_, (&'static str, u64), &'static [u8]>,
    step: &DeliveryStep,
) -> Result<StepOutcome, StoreError> {
    let mut out = StepOutcome::default();
    let mut stats = StatsCache::default();
    let mut failing: HashSet<(String, Uuid)> = HashSet::new();
    for s in &step.settle {
        let Some(job) = t.load(s.job)? else {
            continue; // replayed, cancelled or settled by an earlier step
        };
        let (change, attempt) = settle_job(&job, &s.settled);
        if let Some(a) = attempt {
            stats.get(t, &job.tenant, job.subscription)?.record(a);
            if !a.success {
                failing.insert((job.tenant.to_string(), job.subscription));
            }
        }
        match change {
            JobChange::Remove => t.remove(&job)?,
            JobChange::Rewrite(next) => {
                t.update(&job, &next)?;
                if next.attempts > job.attempts {
                    t.leased.remove(job.id).map_err(unavailable)?;
                }
            }
            JobChange::Bury(last, reason) => {
                stats.get(t, &job.tenant, job.subscription)?.dead_letters += 1;
                t.bury(last, reason, step.now_ms)?;
            }
        }
    }
    for id in &step.start {
        let Some(job) = t.load(*id)? else { continue };
        let next = match lease_job(&job, step.lease_until_ms, step.recovery_limit) {
            Ok(next) => next,
            Err(reason) => {
                stats.get(t, &job.tenant, job.subscription)?.dead_letters += 1;
                t.bury(job, reason, step.now_ms)?;
                out.poisoned.push(*id);
                continue;
            }
        };
        let event = match events
            .get((&*job.tenant, job.event_seq))
            .map_err(unavailable)?
        {
            Some(v) => decode::<StoredEvent>(v.value())?,
            None => {
                stats.get(t, &job.tenant, job.subscription)?.dead_letters += 1;
                t.bury(job, EVENT_GONE.into(), step.now_ms)?;
                out.poisoned.push(*id);
                continue;
            }
        };
        t.update(&job, &next)?;
        t.leased.insert(job.id, ()).map_err(unavailable)?;
        out.started.push(Started { job: next, event });
    }
    for (tenant, sub) in failing {
        if let Some(s) = stats.0.get(&(tenant.clone(), sub)) {
            out.streaks.push((tenant, sub, s.streak));
        }
    }
    stats.write(t)?;
    Ok(out)
}

/// Releases every lease: the process that took them has ended (single node). Each released job
/// is due now and keeps its `starts`, so the lapse counts as a recovery (R-DI-8).
pub(super) fn release_leases(db: &Database, now_ms: i64) -> Result<usize, StoreError> {
    let txn = db.begin_write().map_err(unavailable)?;
    let released = {
        let mut t = JobTables::open(&txn).map_err(unavailable)?;
        let ids: Vec<u128> = t
            .leased
            .iter()
            .map_err(unavailable)?
            .map(|r| r.map(|(k, _)| k.value()))
            .collect::<Result<_, _>>()
            .map_err(unavailable)?;
        for id in &ids {
            if let Some(job) = t.load(*id)? {
                let mut next = job.clone();
                next.due_at_ms = now_ms;
                t.update(&job, &next)?;
            }
            t.leased.remove(*id).map_err(unavailable)?;
        }
        ids.len()
    };
    txn.commit().map_err(unavailable)?;
    Ok(released)
}

/// The due jobs of `lanes` (read-only): each queue (tenant, subscription) in turn from
/// `rotation`, at most `per_tenant` of each and what its shared room leaves; `more` when a
/// limit left one unread, `cut` naming the queues a shared room cut short.
pub(super) fn due_jobs(db: &Database, query: &DueQuery) -> Result<DuePage, StoreError> {
    let txn = db.begin_read().map_err(unavailable)?;
    let jobs = txn.open_table(JOBS).map_err(unavailable)?;
    let due = txn.open_table(JOB_DUE).map_err(unavailable)?;
    let queues_t = txn.open_table(LANE_TENANTS).map_err(unavailable)?;
    let mut queues: Vec<(u32, String, u128)> = Vec::new();
    for lane in &query.lanes {
        for row in queues_t
            .range((*lane, "", 0)..(*lane + 1, "", 0))
            .map_err(unavailable)?
        {
            let (k, _) = row.map_err(unavailable)?;
            let (l, tenant, sub) = k.value();
            if !query.pass_over.contains(&sub) {
                queues.push((l, tenant.to_owned(), sub));
            }
        }
    }
    if queues.is_empty() {
        return Ok(DuePage::default());
    }
    let start = (query.rotation % queues.len() as u64) as usize;
    queues.rotate_left(start);
    let now = query.now_ms.max(0) as u64;
    let mut page = DuePage::default();
    let mut rooms = query.rooms.clone();
    for (lane, tenant, sub) in &queues {
        let want = query.per_tenant.min(query.limit - page.jobs.len());
        let fit = rooms.fit(*sub, want);
        let (mut taken, mut left) = (0, false);
        let range = due
            .range(
                (*lane, tenant.as_str(), *sub, 0, 0)
                    ..=(*lane, tenant.as_str(), *sub, now, u128::MAX),
            )
            .map_err(unavailable)?;
        for row in range {
            let (k, _) = row.map_err(unavailable)?;
            let id = k.value().4;
            if query.skip.contains(&id) {
                continue;
            }
            let Some(v) = jobs.get(id).map_err(unavailable)? else {
                continue;
            };
            if taken == fit {
                left = true;
                break;
            }
            page.jobs.push(decode::<JobRecord>(v.value())?);
            taken += 1;
        }
        rooms.spend(*sub, taken);
        if left {
            page.left_unread(&rooms, *sub);
        }
        if page.more && page.jobs.len() == query.limit {
            break;
        }
    }
    Ok(page)
}

pub(super) fn dead_letters(
    db: &Database,
    tenant: &str,
    sub: Uuid,
    cursor: Option<u128>,
    limit: usize,
) -> Result<(Vec<DeadLetter>, Option<u128>), StoreError> {
    let txn = db.begin_read().map_err(unavailable)?;
    let dead = txn.open_table(DEAD).map_err(unavailable)?;
    let s = sub.as_u128();
    let from = cursor.map_or(0, |c| c.saturating_add(1));
    let mut out = Vec::new();
    for row in dead
        .range((tenant, s, from)..=(tenant, s, u128::MAX))
        .map_err(unavailable)?
    {
        let (k, v) = row.map_err(unavailable)?;
        if out.len() == limit {
            let last = out.last().map(|d: &DeadLetter| d.job.id);
            let _ = k;
            return Ok((out, last));
        }
        out.push(decode(v.value())?);
    }
    Ok((out, None))
}

pub(super) fn replay(
    txn: &WriteTransaction,
    tenant: &str,
    sub: Uuid,
    only: Option<&[u128]>,
    now_ms: i64,
) -> Result<u64, StoreError> {
    let mut t = JobTables::open(txn).map_err(unavailable)?;
    let s = sub.as_u128();
    let mut letters: Vec<DeadLetter> = Vec::new();
    for row in t
        .dead
        .range((tenant, s, 0)..=(tenant, s, u128::MAX))
        .map_err(unavailable)?
    {
        let (k, v) = row.map_err(unavailable)?;
        if only.is_none_or(|ids| ids.contains(&k.value().2)) {
            letters.push(decode(v.value())?);
        }
    }
    for letter in &letters {
        t.dead
            .remove((tenant, s, letter.job.id))
            .map_err(unavailable)?;
        t.create(&letter.job.revived(now_ms))?;
    }
    Ok(letters.len() as u64)
}

pub(super) fn stats(db: &Database, tenant: &str, sub: Uuid) -> Result<DeliveryStats, StoreError> {
    let txn = db.begin_read().map_err(unavailable)?;
    let stats = txn.open_table(STATS).map_err(unavailable)?;
    match stats.get((tenant, sub.as_u128())).map_err(unavailable)? {
        Some(v) => decode(v.value()),
        None => Ok(DeliveryStats::default()),
    }
}

pub(super) fn pending(db: &Database) -> Result<u64, StoreError> {
    let txn = db.begin_read().map_err(unavailable)?;
    let jobs = txn.open_table(JOBS).map_err(unavailable)?;
    jobs.len().map_err(unavailable)
}
