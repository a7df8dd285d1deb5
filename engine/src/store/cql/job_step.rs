//! One delivery step on CQL (R-DI-8): outcomes settle, retry or bury the jobs this process
//! knows, then leases start the due ones, with their events; what it writes is planned first
//! and written after, dead letters before the rows they replace.

use std::collections::HashMap;

use super::concurrently::all;
use super::jobs::StoredJob;
use super::CqlStore;
use crate::store::{
    lease_job, settle_job, AttemptRecord, DeadLetter, DeliveryStep, JobChange, JobRecord, Lane,
    Started, StepOutcome, StoreError, EVENT_GONE,
};

/// What one delivery step writes.
#[derive(Default)]
struct Plan {
    /// (before, after): rewritten in place, or moved (the after's row written and the before's
    /// deleted in one batch).
    writes: Vec<(StoredJob, StoredJob)>,
    removes: Vec<StoredJob>,
    letters: Vec<DeadLetter>,
}

impl CqlStore {
    /// The jobs among `ids` this process knows (`jobs::Known`).
    fn known_jobs(&self, ids: &[u128]) -> HashMap<u128, StoredJob> {
        ids.iter()
            .filter_map(|id| self.known.get(*id))
            .map(|j| (j.record.id, j))
            .collect()
    }

    /// Writes a plan: dead letters first, then the job rows it rewrites and removes.
    async fn apply(&self, plan: &Plan) -> Result<(), StoreError> {
        all(plan.letters.iter().map(|l| self.put_dead_letter(l))).await?;
        futures::future::try_join(
            self.write_jobs(&plan.writes),
            self.remove_jobs(&plan.removes),
        )
        .await?;
        Ok(())
    }

    /// One delivery step: outcomes and leases (R-DI-8).
    pub(super) async fn step(&self, step: DeliveryStep) -> Result<StepOutcome, StoreError> {
        let ids: Vec<u128> = step
            .settle
            .iter()
            .map(|s| s.job)
            .chain(step.start.iter().copied())
            .collect();
        let jobs = self.known_jobs(&ids);
        let mut plan = Plan::default();
        let mut out = StepOutcome::default();
        let mut attempts: Vec<(&JobRecord, &AttemptRecord)> = Vec::new();
        let mut dead: Vec<&JobRecord> = Vec::new();
        let bury = |job: &StoredJob, last: JobRecord, reason: String, plan: &mut Plan| {
            plan.removes.push(job.clone());
            plan.letters.push(DeadLetter {
                job: last,
                reason,
                dead_at_ms: step.now_ms,
            });
        };

        for s in &step.settle {
            let Some(job) = jobs.get(&s.job) else {
                continue; // settled by an earlier step, or not this process's (module doc)
            };
            let (change, attempt) = settle_job(&job.record, &s.settled);
            if let Some(a) = attempt {
                attempts.push((&job.record, a));
            }
            match change {
                JobChange::Remove => plan.removes.push(job.clone()),
                JobChange::Rewrite(next) => plan.writes.push((job.clone(), StoredJob::new(next))),
                JobChange::Bury(last, reason) => {
                    dead.push(&job.record);
                    bury(job, last, reason, &mut plan);
                }
            }
        }

        // Leases go on beside the outcomes: different jobs, so the two need not wait for each
        // other (a step's round trips are most of a CQL lane's time).
        let mut leasing = Plan::default();
        let mut leases = Vec::new();
        // The lane's hold is the fence: a lane given up (revoked, or its hold lapsed while this
        // process was stopped) leases nothing more here; its next holder delivers those jobs.
        let clock = crate::clock::now_ms();
        for id in &step.start {
            let Some(job) = jobs.get(id) else { continue };
            if !self.holds.holds(job.record.lane, clock) {
                out.not_held.push(*id);
                continue;
            }
            match lease_job(&job.record, step.lease_until_ms, step.recovery_limit) {
                Ok(next) => leases.push((job, next)),
                Err(reason) => {
                    dead.push(&job.record);
                    bury(job, job.record.clone(), reason, &mut leasing);
                    out.poisoned.push(*id);
                }
            }
        }
        let outcomes = self.apply(&plan);
        let starts = async {
            let records: Vec<&JobRecord> = leases.iter().map(|(job, _)| &job.record).collect();
            let events = self.job_events(&records).await?;
            let (mut started, mut gone) = (Vec::new(), Vec::new());
            for ((job, next), event) in leases.iter().zip(events) {
                match event {
                    Some(event) => {
                        let leased = StoredJob {
                            record: next.clone(),
                            row_due_ms: job.row_due_ms,
                            leased_by: Some(self.holds.owner),
                        };
                        leasing.writes.push(((*job).clone(), leased));
                        started.push(Started {
                            job: next.clone(),
                            event,
                        });
                    }
                    None => {
                        gone.push(job.record.id);
                        bury(job, job.record.clone(), EVENT_GONE.into(), &mut leasing);
                    }
                }
            }
            self.apply(&leasing).await?;
            Ok::<_, StoreError>((started, gone, leasing.removes))
        };
        let ((), (started, gone, lease_removes)) =
            futures::future::try_join(outcomes, starts).await?;
        out.started = started;
        for id in gone {
            if let Some(job) = jobs.get(&id) {
                dead.push(&job.record);
            }
            out.poisoned.push(id);
        }
        let mut removed: HashMap<Lane, i64> = HashMap::new();
        for j in plan.removes.iter().chain(&lease_removes) {
            *removed.entry(j.record.lane).or_default() -= 1;
        }
        all(removed.into_iter().map(|(lane, n)| self.count(lane, n))).await?;
        out.streaks = self.record_outcomes(&attempts, &dead).await?;
        Ok(out)
    }
}
