//! A shard's delivery lane: pages due jobs of its lanes from the store (per tenant, so a cold
//! tenant is never behind a hot tenant's backlog), feeds them to the tenant-fair scheduler,
//! leases the ones a worker may start, makes one attempt each and settles the outcomes — outcomes
//! and new leases of a round in one store step.
//!
//! The lane runs on its shard, and so do webhook attempts (`shard_webhook`, on the sink's own
//! request and judgement, which probes share); store steps and the other kinds' attempts run on
//! the tokio side through the bridge. Decisions are the
//! pure functions of `decide`, `fairness`, `retry`, `breaker` and `autodisable`.
//!
//! Here: the loop (`DeliveryLane::run`) and the lane's memory; `paging.rs` what the lane holds
//! (ownership, holds, pages, hand-offs), `steps.rs` the store steps, `outcomes.rs` an attempt and
//! what follows it.

mod outcomes;
mod paging;
mod spilled;
mod steps;
mod tally;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::control_link::ControlLink;
use futures::future::{select, Either};
use futures::stream::{FuturesUnordered, StreamExt};
use hub_core::model::SinkKind;
use hub_core::model::Subscription;
use hub_core::secrets::Keyring;
use hub_core::sink::outcome::{ErrorClass, Outcome};
use hub_core::sink::{EventOut, Sinks};
use rand::SeedableRng;

use super::autodisable::{Policy, Streak};
use super::breaker::{Breaker, BreakerConfig};
use super::decide::{after_attempt, curve_of, dispatch, Dispatch};
use super::fairness::{weight_of, Due, Scheduler};
use super::pacing::{may_start, LastPage, Pacing, Paging};
use super::recent::RecentlyLeased;
use super::shard_webhook::ShardWebhooks;
use crate::fast_hash::{FastMap, FastSet};
use crate::ingest::jobs::{FreshLeases, Handoff};
use crate::matching::follow::LocalSubscriptions;
use crate::runtime::{shard_sleep, Alarm, TokioBridge};
use crate::store::{
    DeliveryStep, DueQuery, JobRecord, Lane, Settled, Settlement, SharedRooms, Started,
    StepOutcome, Store, StoreError,
};
use crate::telemetry::{store_failed, FailedStage};
use hub_core::partners::PartnerState;
use spilled::Spilled;

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
    /// Webhook attempts run on the shard's own client (issue 17), not on tokio.
    pub webhooks_on_shard: bool,
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
            webhooks_on_shard: true,
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
    /// This shard's own copy of the subscriptions, current as of the last snapshot published.
    pub subs: LocalSubscriptions,
    /// The control plane: its store (auto-disable writes there), the keys that open sealed
    /// secrets, every push kind's client (shared with its probes), the hub's event emitter.
    pub control: Arc<ControlLink>,
    /// Where attempts' outcomes go to the subscriptions' timestamps (R-CP-2).
    pub marks: super::marks::MarkWriter,
    pub counters: Arc<DeliveryCounters>,
    /// Nudged by ingest after a durable batch created jobs the lane must page.
    pub wake: async_channel::Receiver<()>,
    /// Jobs ingest just wrote durably, handed over in memory (embedded store): held at once,
    /// without a page, or started at once when their batch leased them.
    pub handoff: async_channel::Receiver<Handoff>,
    /// Where this lane says whether ingest may lease its jobs for it (while it is idle).
    pub fresh: Arc<FreshLeases>,
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

/// An attempt running on the shard (or awaiting the bridge), to its outcome.
type AttemptFuture = std::pin::Pin<Box<dyn std::future::Future<Output = AttemptDone>>>;

/// What the tokio side answers for a store step.
type StepReply = Result<Result<StepOutcome, StoreError>, crate::runtime::BridgeClosed>;

/// A store step being written.
struct StepInFlight {
    reply: std::pin::Pin<Box<dyn std::future::Future<Output = StepReply>>>,
    /// Its outcomes, put back when it fails.
    kept: Vec<Settlement>,
    /// What live readers are told once it is durable.
    published: Vec<hub_core::outcomes::DeliveryOutcome>,
    start: Vec<u128>,
    now: i64,
}

/// What woke the lane.
enum Woke {
    Step(StepReply),
    Attempt(Option<AttemptDone>),
    Handed(Handoff),
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
            held: FastMap::default(),
            in_flight: FastMap::default(),
            breakers: FastMap::default(),
            settle: Vec::new(),
            ready: std::collections::VecDeque::new(),
            running: FastMap::default(),
            held_per_destination: FastMap::default(),
            spilled: Spilled::default(),
            rotation: 0,
            rng: rand::rngs::StdRng::from_entropy(),
            marks: super::marks::Marks::default(),
            lag: super::backpressure::LagWindow::default(),
            recent: RecentlyLeased::new(RECENT_LEASES),
            lanes: self.ownership.lanes_of(self.shard),
            unpublished: Vec::new(),
            tally: tally::LaneTally::since(crate::clock::now_ms()),
            shard_webhooks: self.config.webhooks_on_shard.then(|| {
                std::rc::Rc::new(ShardWebhooks::new(
                    self.control.sinks.webhook.clone(),
                    self.bridge.clone(),
                ))
            }),
            signing_keys: Default::default(),
        };
        let mut attempts: FuturesUnordered<AttemptFuture> = FuturesUnordered::new();
        // At most one store step in flight; attempts keep running (and finished ones keep
        // handing their workers to leased jobs) while it is written.
        let mut step: Option<StepInFlight> = None;
        let mut fetch = true;
        let mut last_page = LastPage::default();
        let mut pacing = Pacing::new(
            self.config.poll.as_millis() as i64,
            self.config.settle_linger.as_millis() as i64,
            crate::clock::now_ms(),
        );
        let mut backoff = Duration::from_millis(50);
        // The lane's one wake-up timer, moved only when its deadline moves.
        let mut alarm = Alarm::default();
        let leases_at_ingest = self.store.leases_at_ingest();
        // When the stop began, and whether a slow drain was reported: a stop that outlasts its
        // grace should say what the lane still waited for.
        let mut stop_seen: Option<(i64, bool)> = None;
        tracing::debug!(lanes = ?lane.lanes, workers = self.config.workers, "delivery lane running");
        loop {
            // A turn: the shard's watcher leaves a working shard asleep (`runtime::nudge`).
            crate::runtime::note_work();
            let stopping = self.stop.load(Ordering::Acquire);
            if stopping {
                self.report_slow_drain(&lane, &mut stop_seen, step.is_some(), attempts.len());
            }
            if stopping
                && step.is_none()
                && attempts.is_empty()
                && lane.ready.is_empty()
                && lane.settle.is_empty()
            {
                break;
            }
            if step.is_none() && !stopping {
                let inline_from = crate::clock::now_ms();
                let asked = std::mem::take(&mut fetch);
                match last_page.paging(asked, lane.held.len(), self.config.held_max) {
                    Paging::Page => match self.fetch(&mut lane).await {
                        Ok(cut_short) => {
                            last_page = LastPage {
                                cut_short,
                                held_after: lane.held.len(),
                            };
                        }
                        Err(e) => {
                            last_page = LastPage::default();
                            store_failed(FailedStage::DeliveryPage);
                            tracing::warn!(error = %e, "paging due jobs failed");
                        }
                    },
                    Paging::KeepHolds => self.keep_lanes(&lane).await,
                    Paging::Nothing => {}
                }
                lane.tally.inline(crate::clock::now_ms() - inline_from);
            }
            if step.is_none() {
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
            self.refill(&mut lane, &mut attempts, step.as_ref());
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
            alarm.set(Instant::now() + Duration::from_millis(sleep as u64));
            let timer = alarm.rings();
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
                Woke::Handed(jobs) => self.take_or_wake(&mut lane, jobs),
                Woke::Nudge => {
                    self.store.wake_pages(&lane.lanes);
                    fetch = true;
                }
                // The linger's end needs nothing here: the next round writes the outcomes.
                Woke::Timer => {}
            }
            if pacing.page_due(crate::clock::now_ms()) {
                fetch = true;
                let inline_from = crate::clock::now_ms();
                self.follow_ownership(&mut lane).await;
                lane.tally.inline(crate::clock::now_ms() - inline_from);
            }
            while let Ok(jobs) = self.handoff.try_recv() {
                self.take_or_wake(&mut lane, jobs);
            }
            fetch |= lane
                .spilled
                .page_wanted(lane.held.len(), self.config.held_max);
            // Collect every other attempt already finished, to settle them in one step; leased
            // jobs waiting in `ready` take the freed workers at once, without a store round trip.
            while let Some(Some(d)) = futures::FutureExt::now_or_never(attempts.next()) {
                self.finished(&mut lane, d);
            }
            self.refill(&mut lane, &mut attempts, step.as_ref());
            self.report_lag(&mut lane, attempts.len());
            self.count_round(&mut lane, attempts.len());
            let idle = lane.held.is_empty() && lane.ready.is_empty();
            self.fresh
                .set_open(self.shard, leases_at_ingest && idle && !stopping);
        }
        self.fresh.set_open(self.shard, false);
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

    /// Starts attempts for leased jobs while workers are free (R-DI-3 cap per destination) and
    /// fewer than `pacing::unrecorded_max` outcomes, with those of the step `writing`, wait to
    /// be written. A job of a lane this process no longer holds is not started (the fence: its
    /// next holder found it due and delivers it).
    fn refill(
        &self,
        lane: &mut LaneState,
        attempts: &mut FuturesUnordered<AttemptFuture>,
        writing: Option<&StepInFlight>,
    ) {
        let unwritten = lane.settle.len() + writing.map_or(0, |s| s.kept.len());
        let (workers, ahead) = (self.config.workers, self.config.lease_ahead);
        while may_start(attempts.len(), unwritten, workers, ahead) {
            let Some(s) = lane.next_ready(self.config.workers) else {
                break;
            };
            if !self.store.holds_lane(s.job.lane, crate::clock::now_ms()) {
                lane.drop_unstarted(s.job.id);
                continue;
            }
            attempts.push(self.attempt(lane, s));
        }
    }

    /// Counts a round of the loop into the lane's tally, and logs the tally once a window.
    fn count_round(&self, lane: &mut LaneState, running: usize) {
        let workers = self.config.workers as usize;
        let t = &mut lane.tally;
        t.rounds += 1;
        t.rounds_all_busy += u64::from(running >= workers);
        t.rounds_capped += u64::from(running < workers && !lane.ready.is_empty());
        let (held, ready) = (lane.held.len(), lane.ready.len());
        lane.tally
            .close(self.shard, held, ready, crate::clock::now_ms());
    }

    /// Says, once, what a stopping lane still waits for when its drain takes over 10 s.
    fn report_slow_drain(
        &self,
        lane: &LaneState,
        seen: &mut Option<(i64, bool)>,
        step_in_flight: bool,
        attempts: usize,
    ) {
        let now = crate::clock::now_ms();
        let (since, reported) = seen.get_or_insert((now, false));
        if !*reported && now - *since > 10_000 {
            *reported = true;
            tracing::warn!(
                shard = self.shard,
                attempts,
                ready = lane.ready.len(),
                outcomes = lane.settle.len(),
                step_in_flight,
                "a stopping delivery lane is still draining"
            );
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
}

/// The lane's memory: jobs held for the scheduler, attempts in flight, breakers, outcomes to
/// record.
struct LaneState {
    scheduler: Scheduler,
    held: FastMap<u128, JobRecord>,
    in_flight: FastMap<u128, InFlight>,
    /// Each destination's breaker, by tenant: looked up by `&str` at every attempt, no key built.
    breakers: FastMap<String, FastMap<String, Breaker>>,
    settle: Vec<Settlement>,
    /// Leased jobs waiting for a free worker, in the scheduler's order.
    ready: std::collections::VecDeque<Started>,
    /// Attempts running per destination.
    running: FastMap<String, u32>,
    /// Jobs held (paged, not yet leased) per destination.
    held_per_destination: FastMap<String, usize>,
    /// Who has due jobs left in the store for want of room here.
    spilled: Spilled,
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
    /// Outcomes of attempts settled in `settle`, told to live readers once written.
    unpublished: Vec<hub_core::outcomes::DeliveryOutcome>,
    /// What the lane did lately, logged at `debug`.
    tally: tally::LaneTally,
    /// The shard's own webhook client (`LaneConfig::webhooks_on_shard`).
    shard_webhooks: Option<std::rc::Rc<ShardWebhooks>>,
    /// The signing keys of the webhooks this shard sends itself, opened once each.
    signing_keys: hub_core::sink::webhook::key_cache::KeyCache,
}

impl LaneState {
    /// One job of `destination` left the held jobs (leased, or settled without an attempt).
    fn unhold(&mut self, destination: &str, cap: usize) {
        if let Some(n) = self.held_per_destination.get_mut(destination) {
            *n = n.saturating_sub(1);
            self.spilled.held_fewer(destination, *n, cap);
        }
    }

    /// The shard's webhook client, when it carries `sub`'s attempts.
    fn shard_webhooks_for(&self, sub: &Subscription) -> Option<std::rc::Rc<ShardWebhooks>> {
        let endpoint = sub.endpoint.as_deref()?;
        let webhooks = self.shard_webhooks.as_ref()?;
        let on_shard = sub.sink_kind == SinkKind::Webhook && webhooks.carries(endpoint);
        on_shard.then(|| webhooks.clone())
    }

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
            crate::fast_hash::count_up(&mut self.running, &f.destination);
        }
        Some(s)
    }

    /// Forgets a job `next_ready` gave a worker that will not start after all (its lane is no
    /// longer held here): the lane's next holder delivers it.
    fn drop_unstarted(&mut self, id: u128) {
        if let Some(f) = self.in_flight.remove(&id) {
            self.scheduler.done(&f.destination);
            if let Some(n) = self.running.get_mut(&f.destination) {
                *n = n.saturating_sub(1);
            }
        }
    }

    /// Forgets a job that will not start now (its lease was refused or not recorded): the store
    /// still has it and a later page brings it back.
    fn release(&mut self, id: u128) {
        if let Some(f) = self.in_flight.remove(&id) {
            self.scheduler.done(&f.destination);
        }
    }
}
