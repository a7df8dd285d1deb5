//! Jobs in the log store: leased, settled, dead-lettered and replayed inside a group (writes),
//! paged per lane and queue by due time from the in-memory index (reads).

use std::collections::HashSet;
use std::sync::Arc;

use uuid::Uuid;

use super::record::{Change, Loc};
use super::segments::read_record;
use super::state::{job_of, State};
use super::writes::Tx;
use crate::fast_hash::{FastMap, FastSet};
use crate::store::{
    lease_job, settle_job, DeadLetter, DeliveryStats, DeliveryStep, DuePage, JobChange, JobRecord,
    Lane, Settled, Started, StepOutcome, StoreError, EVENT_GONE,
};

/// Statistics a step touched, recorded once at its end. Keyed by subscription alone (its id
/// names one tenant's subscription), so that a step's jobs after the first of a subscription
/// find its entry without copying the tenant's name.
#[derive(Default)]
struct StatsCache(FastMap<Uuid, (String, DeliveryStats)>);

impl StatsCache {
    fn get<'a>(&'a mut self, state: &State, job: &JobRecord) -> &'a mut DeliveryStats {
        let (_, stats) = self.0.entry(job.subscription).or_insert_with(|| {
            let key = (job.tenant.clone(), job.subscription);
            let stats = state.stats.get(&key).cloned().unwrap_or_default();
            (key.0, stats)
        });
        stats
    }

    fn record(self, tx: &mut Tx<'_>) {
        for (subscription, (tenant, stats)) in self.0 {
            tx.change(Change::Stats {
                tenant,
                subscription,
                stats,
            });
        }
    }
}

fn bury(tx: &mut Tx<'_>, job: JobRecord, reason: String, now_ms: i64) {
    tx.change(Change::JobGone { id: job.id });
    tx.change(Change::Dead(DeadLetter {
        job,
        reason,
        dead_at_ms: now_ms,
    }));
}

/// A leased job whose event the caller reads, once the step is durable: where the event is, and
/// the segment's file (open, so a segment removed meanwhile still reads).
pub(super) type Unread = (JobRecord, (Loc, Arc<std::fs::File>));

/// One delivery step: outcomes first, then leases. The leased jobs' events are read by the
/// caller ([`read_started`]), not here: reading them back from the segments (a backlog pages
/// jobs whose events the page cache holds, not memory) would hold the commit thread, and the
/// log's lock with it, for every reader and writer.
pub(super) fn step(
    tx: &mut Tx<'_>,
    step: &DeliveryStep,
) -> Result<(StepOutcome, Vec<Unread>), StoreError> {
    let mut out = StepOutcome::default();
    let mut to_read = Vec::with_capacity(step.start.len());
    let mut stats = StatsCache::default();
    // Subscriptions with a failure in this step; their tenants are in `stats`.
    let mut failing: FastSet<Uuid> = FastSet::default();
    for s in &step.settle {
        let Some((job, leased)) = tx.state.job(s.job) else {
            continue; // replayed, cancelled or settled by an earlier step
        };
        let (change, attempt) = settle_job(&job, &s.settled);
        if let Some(a) = attempt {
            stats.get(tx.state, &job).record(a);
            if !a.success {
                failing.insert(job.subscription);
            }
        }
        match change {
            JobChange::Remove => tx.change(Change::JobGone { id: job.id }),
            JobChange::Rewrite(next) => {
                // An outcome or a returned lease ends the lease; a deferral leaves it as it was.
                let leased = leased && matches!(s.settled, Settled::Deferred(_));
                tx.change(Change::Job { job: next, leased });
            }
            JobChange::Bury(last, reason) => {
                stats.get(tx.state, &job).dead_letters += 1;
                bury(tx, last, reason, step.now_ms);
            }
        }
    }
    for id in &step.start {
        let Some((job, _)) = tx.state.job(*id) else {
            continue;
        };
        let next = match lease_job(&job, step.lease_until_ms, step.recovery_limit) {
            Ok(next) => next,
            Err(reason) => {
                stats.get(tx.state, &job).dead_letters += 1;
                bury(tx, job, reason, step.now_ms);
                out.poisoned.push(*id);
                continue;
            }
        };
        let Some(at) = tx.event_at(&job.tenant, job.event_seq)? else {
            stats.get(tx.state, &job).dead_letters += 1;
            bury(tx, job, EVENT_GONE.into(), step.now_ms);
            out.poisoned.push(*id);
            continue;
        };
        tx.change(Change::Job {
            job: next.clone(),
            leased: true,
        });
        to_read.push((next, at));
    }
    for subscription in failing {
        if let Some((tenant, s)) = stats.0.get(&subscription) {
            out.streaks.push((tenant.clone(), subscription, s.streak));
        }
    }
    stats.record(tx);
    Ok((out, to_read))
}

/// The started jobs of a durable step, with their events read from the segments.
pub(super) fn read_started(
    mut out: StepOutcome,
    unread: Vec<Unread>,
) -> Result<StepOutcome, StoreError> {
    out.started.reserve(unread.len());
    for (job, (loc, file)) in unread {
        let event = read_record(&file, loc)?.into_event()?;
        out.started.push(Started { job, event });
    }
    Ok(out)
}

/// Turns a subscription's dead letters (all, or `only`) back into jobs due at `now_ms`.
pub(super) fn replay(
    tx: &mut Tx<'_>,
    tenant: &str,
    subscription: Uuid,
    only: Option<&[u128]>,
    now_ms: i64,
) -> u64 {
    let s = subscription.as_u128();
    let letters: Vec<DeadLetter> = tx
        .state
        .dead
        .range((tenant.to_owned(), s, 0)..=(tenant.to_owned(), s, u128::MAX))
        .filter(|(k, _)| only.is_none_or(|ids| ids.contains(&k.2)))
        .map(|(_, (letter, _))| letter.clone())
        .collect();
    for letter in &letters {
        tx.change(Change::DeadGone {
            tenant: tenant.to_owned(),
            subscription,
            job: letter.job.id,
        });
        if tx.state.jobs.contains_key(letter.job.id) {
            continue;
        }
        let job = letter.job.revived(now_ms);
        tx.change(Change::Job { job, leased: false });
    }
    letters.len() as u64
}

/// The due jobs of `lanes`: each queue (tenant, subscription) in turn from `rotation`, at most
/// `per_tenant` of each, `limit` in all, passing over `skip`; `more` when a limit left one unread.
pub(super) fn due_jobs(
    state: &State,
    lanes: &[Lane],
    now_ms: i64,
    per_tenant: usize,
    limit: usize,
    rotation: u64,
    skip: &HashSet<u128>,
) -> DuePage {
    let empty: Arc<str> = Arc::from("");
    let mut queues = Vec::new();
    for &lane in lanes {
        let from = (lane, empty.clone(), 0);
        let to = (lane.saturating_add(1), empty.clone(), 0);
        let lane_queues = state.queues.range(from..to).filter(|(k, _)| k.0 == lane);
        queues.extend(lane_queues.map(|(_, queue)| &queue.due));
    }
    let mut page = DuePage::default();
    if queues.is_empty() {
        return page;
    }
    let start = (rotation % queues.len() as u64) as usize;
    queues.rotate_left(start);
    for due in queues {
        let want = per_tenant.min(limit - page.jobs.len());
        let mut entries = (due.up_to((now_ms, u64::MAX, u64::MAX)))
            .map(job_of)
            .filter(|id| !skip.contains(id))
            .filter_map(|id| state.jobs.get(id).map(|entry| (id, entry)));
        let jobs = entries.by_ref().take(want);
        page.jobs
            .extend(jobs.map(|(id, entry)| state.record(id, entry)));
        if entries.next().is_some() {
            page.more = true;
            if page.jobs.len() == limit {
                break;
            }
        }
    }
    page
}

/// A subscription's dead letters after `cursor`, oldest job id first.
pub(super) fn dead_letters(
    state: &State,
    tenant: &str,
    subscription: Uuid,
    cursor: Option<u128>,
    limit: usize,
) -> (Vec<DeadLetter>, Option<u128>) {
    let s = subscription.as_u128();
    let from = cursor.map_or(0, |c| c.saturating_add(1));
    let mut range = state
        .dead
        .range((tenant.to_owned(), s, from)..=(tenant.to_owned(), s, u128::MAX));
    let page: Vec<DeadLetter> = range
        .by_ref()
        .take(limit)
        .map(|(_, (letter, _))| letter.clone())
        .collect();
    let more = range.next().is_some();
    let next = more.then(|| page.last().map(|d| d.job.id)).flatten();
    (page, next)
}
