//! Jobs in the log store: leased, settled, dead-lettered and replayed inside a group (writes),
//! paged per lane and queue by due time from the in-memory index (reads).

use std::os::unix::fs::FileExt;
use std::sync::Arc;

use uuid::Uuid;

use super::record::Record;
use super::record::{Change, Loc};
use super::state::{job_of, State};
use super::writes::Tx;
use crate::fast_hash::{FastMap, FastSet};
use crate::store::{
    lease_job, settle_job, DeadLetter, DeliveryStats, DeliveryStep, DuePage, DueQuery, JobChange,
    JobRecord, Settled, Started, StepOutcome, StoreError, StoredEvent, EVENT_GONE,
};

/// Statistics a step touched, recorded once at its end. Keyed by subscription alone (its id
/// names one tenant's subscription), so that a step's jobs after the first of a subscription
/// find its entry without copying the tenant's name.
#[derive(Default)]
struct StatsCache(FastMap<Uuid, (String, DeliveryStats)>);

impl StatsCache {
    /// The step's statistics of `job`'s subscription: its totals so far, and the outcomes this
    /// step adds (the recent ones kept are not copied: the step's change carries only what it
    /// adds).
    fn get<'a>(&'a mut self, state: &State, job: &JobRecord) -> &'a mut DeliveryStats {
        let (_, stats) = self.0.entry(job.subscription).or_insert_with(|| {
            let key = (job.tenant.to_string(), job.subscription);
            let totals = state.stats.get(&key).map(DeliveryStats::totals);
            (key.0, totals.unwrap_or_default())
        });
        stats
    }

    fn record(self, tx: &mut Tx<'_>) {
        for (subscription, (tenant, stats)) in self.0 {
            tx.change(Change::StatsStep {
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

/// Most bytes one read covers to bring several records (a step's events mostly lie together:
/// those of one ingest group are in one frame).
const READ_SPAN_MAX: u64 = 256 << 10;
/// Most bytes between two records read together (read and dropped).
const READ_GAP_MAX: u64 = 16 << 10;

/// The started jobs of a durable step, in the order leased, with their events read from the
/// segments: the records in order of place, each run of records lying near one another in one
/// read (issue 17: a read per event was ~6 % of a shard's cycles under a backlog).
pub(super) fn read_started(
    mut out: StepOutcome,
    unread: Vec<Unread>,
) -> Result<StepOutcome, StoreError> {
    let mut by_place: Vec<usize> = (0..unread.len()).collect();
    by_place.sort_unstable_by_key(|&i| {
        let loc = unread[i].1 .0;
        (loc.seg, loc.offset)
    });
    let mut events: Vec<Option<StoredEvent>> = (0..unread.len()).map(|_| None).collect();
    let mut buffer = Vec::new();
    let mut rest = &by_place[..];
    while let Some(&first) = rest.first() {
        let (from, file) = (unread[first].1 .0, &unread[first].1 .1);
        let (run, end) = run_from(&unread, rest);
        buffer.resize((end - from.offset) as usize, 0);
        file.read_exact_at(&mut buffer, from.offset)
            .map_err(crate::store::unavailable)?;
        for &i in &rest[..run] {
            let loc = unread[i].1 .0;
            let at = (loc.offset - from.offset) as usize;
            let record = Record::decode(&buffer[at..at + loc.len as usize])?;
            events[i] = Some(record.into_event()?);
        }
        rest = &rest[run..];
    }
    out.started.reserve(unread.len());
    for ((job, _), event) in unread.into_iter().zip(events) {
        let event = event.ok_or_else(|| StoreError::Corrupt("a started job's event".into()))?;
        out.started.push(Started { job, event });
    }
    Ok(out)
}

/// How many of `places` (indexes into `unread`, in order of place) one read brings from the
/// first, and where that read ends.
fn run_from(unread: &[Unread], places: &[usize]) -> (usize, u64) {
    let from = unread[places[0]].1 .0;
    let (mut run, mut end) = (1, from.end());
    for &i in &places[1..] {
        let loc = unread[i].1 .0;
        let joins = loc.seg == from.seg
            && loc.offset <= end + READ_GAP_MAX
            && loc.end() - from.offset <= READ_SPAN_MAX;
        if !joins {
            break;
        }
        end = end.max(loc.end());
        run += 1;
    }
    (run, end)
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
/// `per_tenant` of each, what its shared room leaves (`rooms`), `limit` in all, passing over
/// `skip` and the queues of `pass_over`; `more` when a limit left one unread, `cut` naming the
/// queues a shared room cut short.
pub(super) fn due_jobs(state: &State, query: &DueQuery) -> DuePage {
    let empty: Arc<str> = Arc::from("");
    let mut queues = Vec::new();
    for &lane in &query.lanes {
        let from = (lane, empty.clone(), 0);
        let to = (lane.saturating_add(1), empty.clone(), 0);
        let lane_queues = (state.queues.range(from..to))
            .filter(|(k, _)| k.0 == lane && !query.pass_over.contains(&k.2));
        queues.extend(lane_queues.map(|(key, queue)| (key.2, &queue.due)));
    }
    let mut page = DuePage::default();
    if queues.is_empty() {
        return page;
    }
    let start = (query.rotation % queues.len() as u64) as usize;
    queues.rotate_left(start);
    let mut rooms = query.rooms.clone();
    for (subscription, due) in queues {
        let want = query.per_tenant.min(query.limit - page.jobs.len());
        let fit = rooms.fit(subscription, want);
        let mut entries = (due.up_to((query.now_ms, u64::MAX, u64::MAX)))
            .map(job_of)
            .filter(|id| !query.skip.contains(id))
            .filter_map(|id| state.jobs.get(id).map(|entry| (id, entry)));
        let before = page.jobs.len();
        let jobs = entries.by_ref().take(fit);
        page.jobs
            .extend(jobs.map(|(id, entry)| state.record(id, entry)));
        rooms.spend(subscription, page.jobs.len() - before);
        if entries.next().is_some() {
            page.left_unread(&rooms, subscription);
            if page.more && page.jobs.len() == query.limit {
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
