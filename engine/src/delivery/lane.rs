//! A shard's delivery lane: pages due jobs of its lanes from the store (per tenant, so a cold
//! tenant is never behind a hot tenant's backlog), feeds them to the tenant-fair scheduler,
//! leases the ones a worker may start, makes one attempt each and settles the outcomes — outcomes
//! and new leases of a round in one store step.
//!
//! The lane runs on its shard; store steps and attempts run on the tokio side through the bridge
//! (the sinks are the control plane's, so probes take the same path). Decisions are the
//! pure functions of `decide`, `fairness`, `retry`, `breaker` and `autodisable`.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::{select, Either};
use futures::stream::{FuturesUnordered, StreamExt};
use hub_control::service::Control;
use hub_core::model::Subscription;
use hub_core::secrets::Keyring;
use hub_core::sink::outcome::{ErrorClass, Outcome};
use hub_core::sink::{EventOut, Sinks};
use rand::SeedableRng;

use super::autodisable::{Policy, Streak};
use super::breaker::{Breaker, BreakerConfig};
use super::decide::{after_attempt, curve_of, dispatch, Dispatch};
use super::fairness::{weight_of, Due, Scheduler};
use super::follow::Subscriptions;
use super::pacing::Pacing;
use super::recent::RecentlyLeased;
use crate::runtime::{shard_sleep, TokioBridge};
use crate::store::{
    DeliveryStep, JobRecord, Lane, Settled, Settlement, Started, StepOutcome, Store, StoreError,
};
use crate::telemetry::{store_failed, FailedStage};
use hub_core::partners::PartnerState;

/// How many leased job ids a lane remembers (`RecentlyLeased`): far more than a hand-off can lag.
const RECENT_LEASES: usize = 4096;

/// How long outcomes wait for a lease step to carry them before a step of their own goes.
pub const SETTLE_LINGER_MS: u64 = 20;

/// How many rounds of work a lane leases ahead of its workers by default (see `choose`).
pub const LEASE_AHEAD: u32 = 8;

/// How a lane works; defaults match R-DI-2 and R-DI-8.
#[derive(Debug, Clone)]
pub struct LaneConfig {
    /// Concurrent attempts of this shard (R-DI-2: 8).
    pub workers: u32,
    /// How long a started attempt holds its job before another start may recover it.
    pub lease_ms: i64,
    /// Rounds of work (× workers) leased ahead: enough to cover one store step's round trip.
    pub lease_ahead: u32,
    /// Started attempts without an outcome before a job is dead-lettered as poison (R-DI-8: 5).
    pub recovery_limit: u32,
    /// Most jobs held in memory by the scheduler (bounded memory: the rest wait in the store).
    pub held_max: usize,
    /// Most jobs of one tenant per page.
    pub per_tenant: usize,
    /// How often the store is paged for due jobs (retries coming due, jobs other writers left).
    pub poll: Duration,
    /// How long outcomes may wait for a lease step to carry them (`pacing`).
    pub settle_linger: Duration,
    pub breaker: BreakerConfig,
    pub autodisable: Policy,
}

impl Default for LaneConfig {
    fn default() -> Self {
        Self {
            workers: 8,
            lease_ms: 120_000,
            lease_ahead: LEASE_AHEAD,
            recovery_limit: 5,
            held_max: 1024,
            per_tenant: 128,
            poll: Duration::from_millis(200),
            settle_linger: Duration::from_millis(SETTLE_LINGER_MS),
            breaker: BreakerConfig::default(),
            autodisable: Policy::default(),
        }
    }
}

/// Delivery counters of one engine (all lanes), for `/metrics` and the load test.
#[derive(Debug, Default)]
pub struct DeliveryCounters {
    pub delivered: AtomicU64,
    pub failed_attempts: AtomicU64,
    pub dead_lettered: AtomicU64,
    pub deferred: AtomicU64,
    pub cancelled: AtomicU64,
    pub auto_disabled: AtomicU64,
}

/// What a lane needs.
#[derive(Clone, Debug)]
pub struct DeliveryLane {
    pub config: LaneConfig,
    pub store: Arc<dyn Store>,
    pub bridge: TokioBridge,
    pub subs: Arc<Subscriptions>,
    /// Every push kind's client, shared with the control plane's probes.
    pub sinks: Sinks,
    pub keyring: Arc<Keyring>,
    /// The control plane: its store (auto-disable writes there) and the hub's event emitter.
    pub control: Arc<Control>,
    pub counters: Arc<DeliveryCounters>,
    /// Nudged by ingest after a durable batch created jobs the lane must page.
    pub wake: async_channel::Receiver<()>,
    /// Jobs ingest just wrote durably, handed over in memory (embedded store): held at once,
    /// without a page.
    pub handoff: async_channel::Receiver<Vec<JobRecord>>,
    pub stop: Arc<AtomicBool>,
    /// Where this lane reports its delivery lag (ingest back-pressure), as shard `shard`.
    pub backpressure: Arc<super::backpressure::Backpressure>,
    pub shard: usize,
    /// Which store lanes this shard pages (they change with the consumer group's assignment).
    pub ownership: Arc<super::ownership::Ownership>,
}

/// A job being leased, leased and waiting for a worker, or attempted.
struct InFlight {
    job: JobRecord,
    sub: Arc<Subscription>,
    destination: String,
}

type AttemptDone = (u128, Outcome, i64);

/// What the tokio side answers for a store step.
type StepReply = Result<Result<StepOutcome, StoreError>, crate::runtime::BridgeClosed>;

/// A store step being written.
struct StepInFlight {
    reply: std::pin::Pin<Box<dyn std::future::Future<Output = StepReply>>>,
    /// Its outcomes, put back when it fails.
    kept: Vec<Settlement>,
    start: Vec<u128>,
    now: i64,
}

/// What woke the lane.
enum Woke {
    Step(StepReply),
    Attempt(Option<AttemptDone>),
    Handed(Vec<JobRecord>),
    Nudge,
    Timer,
}

impl DeliveryLane {
    /// Runs until `stop`, then lets attempts in flight finish and settles them.
    pub async fn run(self) {
        let mut lane = LaneState {
            // The scheduler caps what a destination holds leased; `LaneState::next_ready` caps
            // what it runs (half the workers, R-DI-3).
            scheduler: Scheduler::new(self.config.workers * self.config.lease_ahead),
            held: HashMap::new(),
            in_flight: HashMap::new(),
            breakers: HashMap::new(),
            settle: Vec::new(),
            ready: std::collections::VecDeque::new(),
            running: HashMap::new(),
            held_per_destination: HashMap::new(),
            rotation: 0,
            rng: rand::rngs::StdRng::from_entropy(),
            marks: super::marks::Marks::default(),
            lag: super::backpressure::LagWindow::default(),
            recent: RecentlyLeased::new(RECENT_LEASES),
            lanes: self.ownership.lanes_of(self.shard),
        };
        let mut attempts: FuturesUnordered<
            std::pin::Pin<Box<dyn std::future::Future<Output = AttemptDone>>>,
        > = FuturesUnordered::new();
        // At most one store step in flight; attempts keep running (and finished ones keep
        // handing their workers to leased jobs) while it is written.
        let mut step: Option<StepInFlight> = None;
        let mut fetch = true;
        let mut pacing = Pacing::new(
            self.config.poll.as_millis() as i64,
            self.config.settle_linger.as_millis() as i64,
            crate::clock::now_ms(),
        );
        let mut backoff = Duration::from_millis(50);
        tracing::debug!(lanes = ?lane.lanes, workers = self.config.workers, "delivery lane running");
        loop {
            let stopping = self.stop.load(Ordering::Acquire);
            if stopping
                && step.is_none()
                && attempts.is_empty()
                && lane.ready.is_empty()
                && lane.settle.is_empty()
            {
                break;
            }
            if step.is_none() {
                if fetch && !stopping && lane.held.len() < self.config.held_max / 2 {
                    fetch = false;
                    match self.fetch(&mut lane).await {
                        // A full page means more is due: ask again next round.
                        Ok(full) => fetch = full,
                        Err(e) => {
                            store_failed(FailedStage::DeliveryPage);
                            tracing::warn!(error = %e, "paging due jobs failed");
                        }
                    }
                }
                let start = if stopping {
                    Vec::new()
                } else {
                    self.choose(&mut lane)
                };
                let now = crate::clock::now_ms();
                pacing.settles_waiting(!lane.settle.is_empty(), now);
                let most = (self.config.lease_ahead * self.config.workers) as usize;
                if pacing.write_now(start.len(), lane.settle.len(), most, stopping, now) {
                    step = Some(self.begin_step(&mut lane, start));
                    pacing.settles_waiting(false, now);
                }
            }
            self.refill(&mut lane, &mut attempts);
            // Wait for the step, an attempt, jobs from ingest, a nudge, the page or the linger.
            let sleep = pacing.sleep_ms(step.is_some(), crate::clock::now_ms());
            let next_done = async {
                if attempts.is_empty() {
                    futures::future::pending::<Option<AttemptDone>>().await
                } else {
                    attempts.next().await
                }
            };
            let step_done = async {
                match step.as_mut() {
                    Some(s) => (&mut s.reply).await,
                    None => futures::future::pending().await,
                }
            };
            let nudge = async {
                let _ = self.wake.recv().await;
            };
            let handed = async {
                match self.handoff.recv().await {
                    Ok(jobs) => jobs,
                    Err(_) => futures::future::pending().await,
                }
            };
            let timer = shard_sleep(Duration::from_millis(sleep as u64));
            futures::pin_mut!(next_done, step_done, nudge, handed, timer);
            let event = match select(
                step_done,
                select(next_done, select(handed, select(nudge, timer))),
            )
            .await
            {
                Either::Left((written, _)) => Woke::Step(written),
                Either::Right((Either::Left((done, _)), _)) => Woke::Attempt(done),
                Either::Right((Either::Right((Either::Left((jobs, _)), _)), _)) => {
                    Woke::Handed(jobs)
                }
                Either::Right((Either::Right((Either::Right((Either::Left(_), _)), _)), _)) => {
                    Woke::Nudge
                }
                Either::Right((Either::Right((Either::Right((Either::Right(_), _)), _)), _)) => {
                    Woke::Timer
                }
            };
            match event {
                Woke::Step(written) => {
                    if let Some(s) = step.take() {
                        match self.end_step(&mut lane, s, written) {
                            Ok(()) => backoff = Duration::from_millis(50),
                            Err(e) => {
                                store_failed(FailedStage::DeliveryStep);
                                tracing::warn!(error = %e, "delivery step not durable; retrying");
                                shard_sleep(backoff).await;
                                backoff = (backoff * 2).min(Duration::from_secs(5));
                            }
                        }
                    }
                }
                Woke::Attempt(Some(d)) => self.finished(&mut lane, d),
                Woke::Attempt(None) => {}
                Woke::Handed(jobs) => fetch |= !self.take_handed(&mut lane, jobs),
                Woke::Nudge => fetch = true,
                // The linger's end needs nothing here: the next round writes the outcomes.
                Woke::Timer => {}
            }
            if pacing.page_due(crate::clock::now_ms()) {
                fetch = true;
                self.follow_ownership(&mut lane).await;
            }
            while let Ok(jobs) = self.handoff.try_recv() {
                fetch |= !self.take_handed(&mut lane, jobs);
            }
            // Collect every other attempt already finished, to settle them in one step; leased
            // jobs waiting in `ready` take the freed workers at once, without a store round trip.
            while let Some(Some(d)) = futures::FutureExt::now_or_never(attempts.next()) {
                self.finished(&mut lane, d);
            }
            self.refill(&mut lane, &mut attempts);
            self.report_lag(&mut lane, attempts.len());
        }
        // A clean stop leaves no lease behind: let the lanes go, so the next holder need not
        // wait for the hold to lapse.
        let (store, lanes) = (self.store.clone(), lane.lanes.clone());
        if let Ok(Err(e)) = self
            .bridge
            .call(async move { store.release_lanes(lanes).await })
            .await
        {
            tracing::warn!(error = %e, "could not let go of the delivery lanes");
        }
    }

    /// Starts attempts for leased jobs while workers are free (R-DI-3 cap per destination).
    fn refill(
        &self,
        lane: &mut LaneState,
        attempts: &mut FuturesUnordered<
            std::pin::Pin<Box<dyn std::future::Future<Output = AttemptDone>>>,
        >,
    ) {
        while attempts.len() < self.config.workers as usize {
            let Some(s) = lane.next_ready(self.config.workers) else {
                break;
            };
            attempts.push(Box::pin(self.attempt(lane, s)));
        }
    }

    /// Once a window, tells the back-pressure gate how late this lane starts its attempts.
    fn report_lag(&self, lane: &mut LaneState, running: usize) {
        let all_busy = running >= self.config.workers as usize;
        let held = &lane.held;
        let lag = lane.lag.close(crate::clock::now_ms(), || {
            all_busy
                .then(|| held.values().map(|j| j.due_at_ms).min())
                .flatten()
        });
        if let Some(lag) = lag {
            self.backpressure.report_lag(self.shard, lag);
        }
    }

    /// Takes up the lanes this shard now owns and gives up those it no longer does: leased jobs
    /// of a lane given up that no worker has started are left to its next holder (they count a
    /// recovery there), then the hold goes, so the new owner need not wait for it to lapse.
    /// Attempts already running finish and settle here.
    async fn follow_ownership(&self, lane: &mut LaneState) {
        let now = self.ownership.lanes_of(self.shard);
        if now == lane.lanes {
            return;
        }
        let gone: Vec<Lane> = lane
            .lanes
            .iter()
            .copied()
            .filter(|l| !now.contains(l))
            .collect();
        tracing::info!(shard = self.shard, lanes = ?now, gone = ?gone, "delivery lanes changed");
        lane.lanes = now;
        if gone.is_empty() {
            return;
        }
        let (left, kept): (Vec<Started>, Vec<Started>) = lane
            .ready
            .drain(..)
            .partition(|s| gone.contains(&s.job.lane));
        lane.ready.extend(kept);
        for s in left {
            lane.release(s.job.id);
        }
        let store = self.store.clone();
        if let Ok(Err(e)) = self
            .bridge
            .call(async move { store.release_lanes(gone).await })
            .await
        {
            tracing::warn!(error = %e, "could not let go of delivery lanes");
        }
    }

    /// Pages due jobs into the scheduler; true when the page was full.
    async fn fetch(&self, lane: &mut LaneState) -> Result<bool, StoreError> {
        let room = self.config.held_max.saturating_sub(lane.held.len());
        let skip: HashSet<u128> = lane
            .held
            .keys()
            .chain(lane.in_flight.keys())
            .copied()
            .collect();
        let (store, lanes, per_tenant) = (
            self.store.clone(),
            lane.lanes.clone(),
            self.config.per_tenant,
        );
        lane.rotation = lane.rotation.wrapping_add(1);
        let rotation = lane.rotation;
        let now = crate::clock::now_ms();
        let skip = Arc::new(skip);
        let jobs = self
            .bridge
            .call(async move {
                store
                    .due_jobs(lanes, now, per_tenant, room, rotation, skip)
                    .await
            })
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))??;
        let full = jobs.len() == room && room > 0;
        if !jobs.is_empty() {
            tracing::debug!(jobs = jobs.len(), "paged due jobs");
        }
        for job in jobs {
            self.hold(lane, job);
        }
        Ok(full)
    }

    /// Holds jobs ingest handed over; false when some were left to the store (no room, or their
    /// destination's share of held memory is full), so a page must fetch them later.
    fn take_handed(&self, lane: &mut LaneState, jobs: Vec<JobRecord>) -> bool {
        let mut all = true;
        for job in jobs {
            if lane.held.len() >= self.config.held_max {
                return false;
            }
            // Already paged from the store (and perhaps leased) before the hand-off came.
            if lane.recent.contains(job.id) {
                continue;
            }
            all &= self.hold(lane, job);
        }
        all
    }

    /// Gives a due job to the scheduler, unless it is held or running already; false when its
    /// destination already holds its share of memory (the job stays in the store).
    fn hold(&self, lane: &mut LaneState, job: JobRecord) -> bool {
        if lane.held.contains_key(&job.id) || lane.in_flight.contains_key(&job.id) {
            return true;
        }
        let sub = self.subs.get(&job.tenant, job.subscription);
        let destination = sub
            .as_ref()
            .and_then(|s| s.endpoint.clone())
            .unwrap_or_default();
        let holding = lane
            .held_per_destination
            .entry(destination.clone())
            .or_default();
        if *holding >= super::fairness::holding_cap(self.config.held_max) {
            return false;
        }
        *holding += 1;
        let weight = weight_of(sub.as_ref().and_then(|s| s.plan_tier.as_deref()));
        lane.scheduler.push(
            &job.tenant,
            weight,
            Due {
                job: job.id,
                destination,
            },
        );
        lane.held.insert(job.id, job);
        true
    }

    /// Takes jobs for free workers and one round ahead; returns the ones to lease (the rest are
    /// settled now).
    ///
    /// Leasing ahead (up to `lease_ahead` × workers leased at once) keeps workers busy while the
    /// next store step is written: a finished attempt hands its worker to an already leased job,
    /// and one fsynced step leases many jobs. The cost: a crash also counts a recovery for the
    /// jobs leased but not yet started (never a duplicate: they were not attempted).
    fn choose(&self, lane: &mut LaneState) -> Vec<u128> {
        let mut start = Vec::new();
        let now = crate::clock::now_ms();
        let busy = lane.in_flight.len();
        while busy + start.len() < (self.config.lease_ahead * self.config.workers) as usize {
            let Some((_, due)) = lane.scheduler.take_next() else {
                break;
            };
            let Some(job) = lane.held.remove(&due.job) else {
                lane.scheduler.done(&due.destination);
                continue;
            };
            if let Some(n) = lane.held_per_destination.get_mut(&due.destination) {
                *n = n.saturating_sub(1);
            }
            let sub = self.subs.get(&job.tenant, job.subscription);
            let breaker = lane
                .breakers
                .entry((job.tenant.clone(), due.destination.clone()))
                .or_insert_with(|| Breaker::new(self.config.breaker));
            let partner = sub.as_deref().and_then(|s| s.partner.as_deref()).map(|p| {
                match &self.control.partners {
                    Some(directory) => directory.state(p, now),
                    // No directory: nobody can say the partner is active.
                    None => PartnerState::Unknown,
                }
            });
            let settled = match dispatch(sub.as_deref(), partner, breaker, &job, now) {
                Dispatch::Start => match sub {
                    Some(sub) => {
                        start.push(job.id);
                        let destination = due.destination;
                        lane.in_flight.insert(
                            job.id,
                            InFlight {
                                sub,
                                destination,
                                job,
                            },
                        );
                        continue;
                    }
                    None => Settled::Cancelled,
                },
                Dispatch::Defer(t) => {
                    self.counters.deferred.fetch_add(1, Ordering::Relaxed);
                    Settled::Deferred(t)
                }
                Dispatch::Cancel => {
                    self.counters.cancelled.fetch_add(1, Ordering::Relaxed);
                    Settled::Cancelled
                }
                Dispatch::Bury(reason) => {
                    self.counters.dead_lettered.fetch_add(1, Ordering::Relaxed);
                    Settled::DeadLetter {
                        reason: reason.into(),
                        attempt: None,
                    }
                }
            };
            lane.scheduler.done(&due.destination);
            lane.settle.push(Settlement {
                job: job.id,
                settled,
            });
        }
        start
    }

    /// Sends the round's outcomes and the leases of `start` to the store as one step.
    fn begin_step(&self, lane: &mut LaneState, start: Vec<u128>) -> StepInFlight {
        let now = crate::clock::now_ms();
        let step = DeliveryStep {
            settle: std::mem::take(&mut lane.settle),
            start: start.clone(),
            lease_until_ms: now + self.config.lease_ms,
            now_ms: now,
            recovery_limit: self.config.recovery_limit,
        };
        let kept = step.settle.clone();
        let store = self.store.clone();
        let reply = Box::pin(
            self.bridge
                .call(async move { store.delivery_step(step).await }),
        );
        StepInFlight {
            reply,
            kept,
            start,
            now,
        }
    }

    /// Takes a written step in: leased jobs join `ready`; on failure the outcomes wait for the
    /// next step and the leases are given up (the jobs come back with a later page).
    fn end_step(
        &self,
        lane: &mut LaneState,
        step: StepInFlight,
        written: StepReply,
    ) -> Result<(), StoreError> {
        let outcome = match written {
            Ok(Ok(o)) => o,
            Ok(Err(e)) => {
                self.undo_step(lane, step);
                return Err(e);
            }
            Err(e) => {
                self.undo_step(lane, step);
                return Err(StoreError::Unavailable(e.to_string()));
            }
        };
        for id in &outcome.poisoned {
            self.counters.dead_lettered.fetch_add(1, Ordering::Relaxed);
            lane.release(*id);
        }
        for id in &outcome.not_held {
            lane.release(*id);
        }
        for (tenant, id, streak) in outcome.streaks {
            self.check_autodisable(tenant, id, streak, step.now);
        }
        // A job asked for and neither started nor poisoned (the store no longer had it) must not
        // stay in flight: it would be skipped by every page and hold its destination's share.
        // Every job is answered in the usual step: the set is built only when one is missing.
        let answered = outcome.started.len() + outcome.poisoned.len() + outcome.not_held.len();
        if answered < step.start.len() {
            let answered: HashSet<u128> = outcome
                .started
                .iter()
                .map(|s| s.job.id)
                .chain(outcome.poisoned.iter().copied())
                .chain(outcome.not_held.iter().copied())
                .collect();
            for id in step.start.iter().filter(|id| !answered.contains(id)) {
                tracing::warn!(
                    job = format!("{id:032x}"),
                    "a job leased in this step was not found in the store"
                );
                lane.release(*id);
            }
        }
        for started in &outcome.started {
            lane.recent.leased(started.job.id);
        }
        lane.ready.extend(outcome.started);
        Ok(())
    }

    fn undo_step(&self, lane: &mut LaneState, step: StepInFlight) {
        let mut kept = step.kept;
        kept.append(&mut lane.settle);
        lane.settle = kept;
        for id in step.start {
            lane.release(id);
        }
    }

    /// One attempt on the tokio side: opens the secret in memory, signs and sends.
    fn attempt(
        &self,
        lane: &mut LaneState,
        started: Started,
    ) -> impl std::future::Future<Output = AttemptDone> + 'static {
        let id = started.job.id;
        let now = crate::clock::now_ms();
        let lag = &mut lane.lag;
        let sub = lane.in_flight.get_mut(&id).map(|f| {
            // Until now the job is as it was paged: due when it became due, not at its lease.
            lag.started(now - f.job.due_at_ms);
            f.job = started.job;
            f.sub.clone()
        });
        let (sinks, keyring) = (self.sinks.clone(), self.keyring.clone());
        let reply = sub.map(|sub| {
            self.bridge.call(async move {
                let begun = crate::clock::now_ms();
                let outcome = attempt(&sinks, &keyring, &sub, &started.event, begun).await;
                (outcome, begun)
            })
        });
        async move {
            match reply {
                Some(reply) => match reply.await {
                    Ok((outcome, begun)) => (id, outcome, begun),
                    Err(_) => (id, no_answer(), crate::clock::now_ms()),
                },
                None => (id, no_answer(), crate::clock::now_ms()),
            }
        }
    }

    /// Turns a finished attempt into a settlement for the next step.
    fn finished(&self, lane: &mut LaneState, (id, outcome, started_ms): AttemptDone) {
        let Some(f) = lane.in_flight.remove(&id) else {
            return;
        };
        lane.scheduler.done(&f.destination);
        if let Some(n) = lane.running.get_mut(&f.destination) {
            *n = n.saturating_sub(1);
        }
        let now = crate::clock::now_ms();
        if let Some(b) = lane
            .breakers
            .get_mut(&(f.job.tenant.clone(), f.destination.clone()))
        {
            let was_closed = matches!(b.state, super::breaker::State::Closed { .. });
            b.record(now, outcome.success);
            let is_closed = matches!(b.state, super::breaker::State::Closed { .. });
            let open = &crate::telemetry::METRICS.breakers_open;
            match (was_closed, is_closed) {
                (true, false) => {
                    open.inc();
                }
                (false, true) => {
                    open.dec();
                }
                _ => {}
            }
        }
        crate::telemetry::AttemptSettled {
            tenant: &f.job.tenant,
            subscription: f.job.subscription,
            event_id: f.job.event_id,
            sink: f.sub.sink_kind,
            attempt: f.job.attempts + 1,
            outcome: &outcome,
            received_at_ms: f.job.received_at_ms,
        }
        .emit(now);
        if lane.marks.due(&f.sub, outcome.success, now) {
            self.mark(f.job.tenant.clone(), f.sub.id, outcome.success, now);
        }
        let settled = after_attempt(
            &f.job,
            &curve_of(&f.sub),
            &outcome,
            started_ms,
            now,
            &mut lane.rng,
        );
        self.publish(&f.job, &settled);
        let c = &self.counters;
        match &settled {
            Settled::Delivered(_) => c.delivered.fetch_add(1, Ordering::Relaxed),
            Settled::DeadLetter { .. } => {
                tracing::info!(
                    tenant = f.job.tenant,
                    subscription = %f.job.subscription,
                    event = %f.job.event_id,
                    attempts = f.job.attempts + 1,
                    "dead-lettered"
                );
                c.failed_attempts.fetch_add(1, Ordering::Relaxed);
                c.dead_lettered.fetch_add(1, Ordering::Relaxed)
            }
            _ => c.failed_attempts.fetch_add(1, Ordering::Relaxed),
        };
        lane.settle.push(Settlement { job: id, settled });
    }

    /// Tells live readers (GraphQL's `deliveryOutcomes`) what became of the attempt.
    fn publish(&self, job: &JobRecord, settled: &Settled) {
        use hub_core::outcomes::{DeliveryOutcome, Settlement};
        let (settlement, record) = match settled {
            Settled::Delivered(r) => (Settlement::Delivered, Some(r)),
            Settled::RetryAt(_, r) => (Settlement::Retrying, Some(r)),
            Settled::DeadLetter { attempt, .. } => (Settlement::DeadLettered, attempt.as_ref()),
            _ => return,
        };
        let Some(record) = record else { return };
        self.control.outcomes.publish(DeliveryOutcome {
            tenant: job.tenant.clone(),
            subscription: job.subscription,
            event_id: job.event_id,
            seq: job.event_seq,
            attempt: job.attempts + 1,
            settlement,
            at_ms: record.at_ms,
            duration_ms: record.duration_ms,
            error_class: record.error_class.clone(),
            status_code: record.status_code,
        });
    }

    /// Writes an attempt's outcome to the subscription's timestamps (R-CP-2); fire and forget
    /// (a lost race is marked by a later attempt).
    fn mark(&self, tenant: String, id: uuid::Uuid, success: bool, now: i64) {
        let control = self.control.clone();
        self.bridge.spawn(async move {
            for _ in 0..3 {
                let Ok(Some(current)) = control.store.get(&tenant, id).await else {
                    return;
                };
                if current.deleted {
                    return;
                }
                let next = super::marks::marked(&current, success, now);
                match control.store.replace(&next, current.revision).await {
                    Ok(()) => return,
                    Err(hub_control::store::ControlStoreError::Conflict) => continue,
                    Err(e) => {
                        tracing::debug!(error = %e, tenant, subscription = %id, "delivery timestamps not recorded");
                        return;
                    }
                }
            }
        });
    }

    /// Auto-disable (R-DI-10): a streak that passes both gates stops the subscription, unless
    /// switched off. Failures before the last resume never count.
    fn check_autodisable(&self, tenant: String, id: uuid::Uuid, streak: Streak, now: i64) {
        let Some(sub) = self.subs.get(&tenant, id) else {
            return;
        };
        let mut streak = streak;
        if let (Some(resumed), Some(first)) = (sub.marks.resumed_at_ms, streak.first_failure_ms) {
            if streak.last_failure_ms.is_some_and(|l| l < resumed) {
                return;
            }
            streak.first_failure_ms = Some(first.max(resumed));
        }
        let Some(verdict) = streak.verdict(now, &self.config.autodisable) else {
            return;
        };
        if !sub.enabled || sub.paused {
            return;
        }
        self.counters.auto_disabled.fetch_add(1, Ordering::Relaxed);
        let control = self.control.clone();
        // Fire and forget: the follower brings the change back; a lost race is retried by the
        // next failing step, since the streak stays.
        self.bridge.spawn(async move {
            for _ in 0..3 {
                let Ok(Some(current)) = control.store.get(&tenant, id).await else {
                    return;
                };
                if !current.enabled || current.paused {
                    return;
                }
                let mut next = current.clone();
                next.enabled = false;
                next.marks.disabled_at_ms = Some(verdict.at_ms);
                next.marks.disabled_reason = Some(verdict.reason.clone());
                next.revision += 1;
                next.updated_at_ms = crate::clock::now_ms();
                match control.store.replace(&next, current.revision).await {
                    Ok(()) => {
                        tracing::warn!(tenant, subscription = %id, reason = verdict.reason, "subscription auto-disabled");
                        if let Some(events) = control.events.get() {
                            let detail = serde_json::json!({
                                "subscription_id": id,
                                "name": next.name,
                                "endpoint": next.endpoint,
                                "reason": verdict.reason,
                                "disabled_at": hub_core::model::rfc3339(verdict.at_ms),
                            });
                            events.emit(&tenant, "destination.disabled", id, detail);
                        }
                        return;
                    }
                    Err(hub_control::store::ControlStoreError::Conflict) => continue,
                    Err(e) => {
                        tracing::warn!(error = %e, tenant, subscription = %id, "recording auto-disable failed");
                        return;
                    }
                }
            }
        });
    }
}

/// The lane's memory: jobs held for the scheduler, attempts in flight, breakers, outcomes to
/// record.
struct LaneState {
    scheduler: Scheduler,
    held: HashMap<u128, JobRecord>,
    in_flight: HashMap<u128, InFlight>,
    breakers: HashMap<(String, String), Breaker>,
    settle: Vec<Settlement>,
    /// Leased jobs waiting for a free worker, in the scheduler's order.
    ready: std::collections::VecDeque<Started>,
    /// Attempts running per destination.
    running: HashMap<String, u32>,
    /// Jobs held (paged, not yet leased) per destination.
    held_per_destination: HashMap<String, usize>,
    rotation: u64,
    rng: rand::rngs::StdRng,
    /// What this lane last wrote of delivery timestamps (R-CP-2).
    marks: super::marks::Marks,
    /// This window's start lags, for ingest back-pressure.
    lag: super::backpressure::LagWindow,
    /// Jobs leased lately: a hand-off that comes after the job was paged is passed over.
    recent: RecentlyLeased,
    /// The store lanes this shard pages now (`DeliveryLane::follow_ownership`).
    lanes: Vec<Lane>,
}

impl LaneState {
    /// The first leased job whose destination runs fewer than half the workers (R-DI-3).
    fn next_ready(&mut self, workers: u32) -> Option<Started> {
        let cap = super::fairness::running_cap(workers);
        let in_flight = &self.in_flight;
        let running = &self.running;
        let i = self.ready.iter().position(|s| {
            in_flight
                .get(&s.job.id)
                .is_none_or(|f| running.get(&f.destination).copied().unwrap_or(0) < cap)
        })?;
        let s = self.ready.remove(i)?;
        if let Some(f) = self.in_flight.get(&s.job.id) {
            *self.running.entry(f.destination.clone()).or_default() += 1;
        }
        Some(s)
    }

    /// Forgets a job that will not start now (its lease was refused or not recorded): the store
    /// still has it and a later page brings it back.
    fn release(&mut self, id: u128) {
        if let Some(f) = self.in_flight.remove(&id) {
            self.scheduler.done(&f.destination);
        }
    }
}

fn no_answer() -> Outcome {
    Outcome::refused(ErrorClass::RequestFailed, "the attempt did not report back")
}

/// One attempt for a stored event through the subscription's sink (R-DI-4).
pub async fn attempt(
    sinks: &Sinks,
    keyring: &Keyring,
    sub: &Subscription,
    event: &crate::store::StoredEvent,
    now_ms: i64,
) -> Outcome {
    let ev = &event.event;
    let out = EventOut {
        id: ev.id,
        key: &ev.key,
        source: &ev.source,
        tenant: &ev.tenant,
        schema_version: &ev.schema_version,
        time: &ev.time,
        subject: ev.subject.as_deref(),
        content_type: ev.data_content_type.as_deref(),
        traceparent: ev.traceparent.as_deref(),
        tracestate: ev.tracestate.as_deref(),
        body: Bytes::copy_from_slice(&ev.payload),
    };
    sinks.deliver(keyring, sub, &out, now_ms).await
}
