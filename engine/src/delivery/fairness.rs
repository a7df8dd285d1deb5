//! Which due job a free worker takes next (R-DI-2, R-DI-3): deficit round robin over tenants, each
//! visit crediting a tenant its weight (from `plan_tier`), so one tenant's backlog never starves
//! another; and at most half the workers on one destination, so a slow destination leaves the
//! rest to other subscriptions. Pure: the wheel pushes due jobs in, workers pull them out and say
//! when they are done.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::fast_hash::FastMap;

/// A due job as the scheduler sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    pub job: u128,
    pub destination: String,
}

/// How many jobs a tenant may take per visit.
pub fn weight_of(plan_tier: Option<&str>) -> u32 {
    hub_core::model::tier_weight(plan_tier)
}

/// Most attempts one destination runs at once on a shard of `workers` (R-DI-3: half, at least
/// one), so a slow destination leaves the rest to other subscriptions.
#[must_use]
pub fn running_cap(workers: u32) -> u32 {
    (workers / 2).max(1)
}

/// Most paged jobs one destination holds in a lane's memory of `held_max` (an eighth): a slow
/// destination's backlog must not fill the memory that pages in everyone else's work; past its
/// share its jobs wait in the store for a later page.
#[must_use]
pub fn holding_cap(held_max: usize) -> usize {
    held_max / 8
}

/// How far into a tenant's queue a worker looks past jobs whose destination is at its cap.
const LOOKAHEAD: usize = 64;

#[derive(Debug, Default)]
struct TenantQueue {
    /// The tenant, shared with the rotation.
    name: Arc<str>,
    jobs: VecDeque<Due>,
    weight: u32,
    deficit: u32,
}

/// The scheduler's tenants are shared names and its maps hash with foldhash: a job is pushed,
/// taken and done without allocating (issue 17).
#[derive(Debug)]
pub struct Scheduler {
    rotation: VecDeque<Arc<str>>,
    queues: FastMap<Arc<str>, TenantQueue>,
    in_flight: FastMap<String, u32>,
    per_destination_cap: u32,
}

impl Scheduler {
    /// For a shard with `workers` workers (at most half of them per destination, at least one).
    pub fn new(workers: u32) -> Self {
        Self {
            rotation: VecDeque::new(),
            queues: FastMap::default(),
            in_flight: FastMap::default(),
            per_destination_cap: running_cap(workers),
        }
    }

    pub fn push(&mut self, tenant: &str, weight: u32, due: Due) {
        let q = match self.queues.get_mut(tenant) {
            Some(q) => q,
            None => {
                let name: Arc<str> = Arc::from(tenant);
                self.queues.entry(name.clone()).or_insert(TenantQueue {
                    name,
                    ..TenantQueue::default()
                })
            }
        };
        q.weight = weight.max(1);
        if q.jobs.is_empty() {
            self.rotation.push_back(q.name.clone());
        }
        q.jobs.push_back(due);
    }

    /// The next job for a free worker, or `None` when nothing can run now.
    pub fn take_next(&mut self) -> Option<(Arc<str>, Due)> {
        for _ in 0..self.rotation.len() {
            let tenant = self.rotation.front()?.clone();
            let cap = self.per_destination_cap;
            let in_flight = &self.in_flight;
            let q = self.queues.get_mut(&tenant)?;
            if q.deficit == 0 {
                q.deficit = q.weight;
            }
            let runnable = q
                .jobs
                .iter()
                .take(LOOKAHEAD)
                .position(|d| in_flight.get(&d.destination).copied().unwrap_or(0) < cap);
            let Some(i) = runnable else {
                // Everything it could run waits on a busy destination: its turn passes.
                q.deficit = 0;
                self.rotation.rotate_left(1);
                continue;
            };
            let due = q.jobs.remove(i)?;
            q.deficit -= 1;
            if q.jobs.is_empty() {
                q.deficit = 0;
                self.rotation.pop_front();
            } else if q.deficit == 0 {
                self.rotation.rotate_left(1);
            }
            self.running(&due.destination);
            return Some((tenant, due));
        }
        None
    }

    /// A job for `destination` runs that did not come through `take_next` (leased by its
    /// ingest batch); `done` ends it like any other.
    pub fn running(&mut self, destination: &str) {
        crate::fast_hash::count_up(&mut self.in_flight, destination);
    }

    /// A worker finished (any outcome) a job for `destination`.
    pub fn done(&mut self, destination: &str) {
        if let Some(n) = self.in_flight.get_mut(destination) {
            *n = n.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_di_3_a_destination_runs_half_the_workers_and_holds_an_eighth_of_the_memory() {
        assert_eq!(
            [1, 2, 8, 9].map(running_cap),
            [1, 1, 4, 4],
            "half, at least one"
        );
        assert_eq!([0, 1024, 100].map(holding_cap), [0, 128, 12]);
    }

    fn due(job: u128, dest: &str) -> Due {
        Due {
            job,
            destination: dest.into(),
        }
    }

    /// Issue 6: with a 100,000-job backlog on one tenant, a cold tenant's job waits no more than
    /// one rotation.
    #[test]
    fn r_di_2_a_cold_tenant_waits_at_most_one_rotation_behind_a_huge_backlog() {
        let mut s = Scheduler::new(8);
        for j in 0..100_000 {
            s.push(
                "hot",
                weight_of(Some("premium")),
                due(j, &format!("d{}", j % 50)),
            );
        }
        for _ in 0..1000 {
            let (_, d) = s.take_next().expect("job");
            s.done(&d.destination);
        }
        s.push("cold", weight_of(None), due(1_000_000, "cold-dest"));
        let mut picks = 0;
        loop {
            let (tenant, d) = s.take_next().expect("job");
            s.done(&d.destination);
            picks += 1;
            if &*tenant == "cold" {
                break;
            }
        }
        assert!(
            picks <= weight_of(Some("premium")) + 1,
            "cold tenant served after {picks} picks"
        );
    }

    #[test]
    fn r_di_2_weights_set_the_share_of_each_rotation() {
        let mut s = Scheduler::new(64);
        for j in 0..1000 {
            s.push("premium", 4, due(j, &format!("p{j}")));
            s.push("free", 1, due(j, &format!("f{j}")));
        }
        let mut counts = std::collections::HashMap::new();
        for _ in 0..500 {
            let (t, d) = s.take_next().expect("job");
            s.done(&d.destination);
            *counts.entry(t).or_insert(0) += 1;
        }
        assert_eq!(counts["premium"], 400);
        assert_eq!(counts["free"], 100);
    }

    #[test]
    fn r_di_3_one_destination_never_takes_more_than_half_the_workers() {
        let mut s = Scheduler::new(8);
        for j in 0..100 {
            s.push("a", 1, due(j, "slow"));
        }
        for j in 0..100 {
            s.push("b", 1, due(100 + j, "fast"));
        }
        let mut running = Vec::new();
        while running.len() < 8 {
            running.push(s.take_next().expect("a worker is free").1);
        }
        let slow = running.iter().filter(|d| d.destination == "slow").count();
        assert_eq!(slow, 4, "half of 8 workers");
        // With the slow destination at its cap, its tenant's jobs wait; others still run.
        s.push("c", 1, due(999, "other"));
        assert_eq!(s.take_next().map(|(t, _)| t), Some("c".into()));
        for _ in 0..4 {
            if let Some((_, d)) = s.take_next() {
                assert_ne!(d.destination, "slow");
            }
        }
        s.done("slow");
        let freed = std::iter::from_fn(|| s.take_next()).find(|(_, d)| d.destination == "slow");
        assert!(freed.is_some(), "a finished slow job frees one slot");
    }
}
