//! The two decisions a lane makes per job, as pure code: whether a job taken by the scheduler may
//! start now (subscription state, breaker), and what follows an attempt (done, retry, dead
//! letter). Time and randomness come in as arguments.

use hub_core::model::{Subscription, VerificationState};
use hub_core::sink::outcome::Outcome;
use rand::Rng;

use hub_core::partners::PartnerState;

use super::breaker::{Admit, Breaker};
use super::retry::{after_failure, is_last_attempt, AfterFailure, Curve};
use crate::store::{AttemptRecord, JobRecord, Settled};

/// What to do with a job a worker could take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dispatch {
    /// Lease it and make one attempt.
    Start,
    /// Hold it without an attempt until then (open breaker; no attempt counted).
    Defer(i64),
    /// The subscription no longer wants deliveries (paused, deleted, not verified): drop it
    /// (R-CP-11: pause cancels queued deliveries).
    Cancel,
    /// The hub stopped the subscription (auto-disable): keep it as a dead letter for replay.
    Bury(&'static str),
}

/// The retry curve of a subscription (its override, or the default when absent or malformed).
pub fn curve_of(sub: &Subscription) -> Curve {
    Curve::from_override(sub.retry_schedule.as_deref())
}

/// How long a partner's job waits before its partner is looked at again: when Access Manager
/// shows it inactive, and when its status is not known yet (R-CP-17).
pub const PARTNER_INACTIVE_RECHECK_MS: i64 = 5_000;
pub const PARTNER_UNKNOWN_RECHECK_MS: i64 = 1_000;

/// Whether `job` may start at `now_ms`; `partner` is what the hub knows of the subscription's
/// partner, if it has one. The breaker is asked last, so a job that is not started for another
/// reason never takes the breaker's single half-open probe.
pub fn dispatch(
    sub: Option<&Subscription>,
    partner: Option<PartnerState>,
    breaker: &mut Breaker,
    job: &JobRecord,
    now_ms: i64,
) -> Dispatch {
    let Some(sub) = sub.filter(|s| !s.deleted) else {
        return Dispatch::Cancel;
    };
    if sub.paused || sub.verification_state != VerificationState::Active {
        return Dispatch::Cancel;
    }
    // Resume delivers only events that reach the hub after it (R-CP-11): what was queued before
    // the pause is cancelled whenever it comes due.
    if sub
        .marks
        .resumed_at_ms
        .is_some_and(|r| job.received_at_ms < r)
    {
        return Dispatch::Cancel;
    }
    if !sub.enabled {
        return Dispatch::Bury("subscription stopped by the hub");
    }
    // A partner's subscription delivers only while its partner is known active; held, not
    // attempted: no attempt is counted.
    match partner {
        Some(PartnerState::Inactive) => {
            return Dispatch::Defer(now_ms + PARTNER_INACTIVE_RECHECK_MS)
        }
        Some(PartnerState::Unknown) => return Dispatch::Defer(now_ms + PARTNER_UNKNOWN_RECHECK_MS),
        Some(PartnerState::Active) | None => {}
    }
    let last = is_last_attempt(&curve_of(sub), job.attempts + 1, job.received_at_ms, now_ms);
    match breaker.admit(now_ms, last) {
        Admit::Attempt | Admit::Probe => Dispatch::Start,
        Admit::WaitUntil(t) => Dispatch::Defer(t),
    }
}

/// What follows attempt number `job.attempts + 1`, started at `started_ms`, ended at `now_ms`.
pub fn after_attempt(
    job: &JobRecord,
    curve: &Curve,
    outcome: &Outcome,
    started_ms: i64,
    now_ms: i64,
    rng: &mut impl Rng,
) -> Settled {
    let record = AttemptRecord {
        at_ms: started_ms,
        success: outcome.success,
        error_class: outcome.class_name(),
        status_code: outcome.status_code,
        detail: outcome.detail.clone(),
        duration_ms: outcome.duration_ms,
    };
    if outcome.success {
        return Settled::Delivered(record);
    }
    let n = job.attempts + 1;
    if let (true, Some(class)) = (outcome.is_permanent(), outcome.error_class) {
        // No retry can mend it: dead-lettered at once, the class as the reason (R-DI-8).
        return Settled::DeadLetter {
            reason: format!("permanent failure ({class}) at attempt {n}"),
            attempt: Some(record),
        };
    }
    match after_failure(curve, n, job.received_at_ms, started_ms, now_ms, rng) {
        AfterFailure::RetryAt(t) => Settled::RetryAt(t, record),
        AfterFailure::DeadLetter => Settled::DeadLetter {
            reason: format!("attempts exhausted after {n}"),
            attempt: Some(record),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delivery::breaker::BreakerConfig;
    use hub_core::control_store::conformance::subscription;
    use rand::SeedableRng;
    use uuid::Uuid;

    fn job(attempts: u32, received: i64) -> JobRecord {
        JobRecord {
            id: 1,
            lane: 0,
            tenant: "t".into(),
            subscription: Uuid::nil(),
            event_id: Uuid::nil(),
            event_seq: 1,
            received_at_ms: received,
            due_at_ms: received,
            attempts,
            starts: attempts,
            last: None,
        }
    }

    fn active() -> Subscription {
        let mut s = subscription("t", "s");
        s.verification_state = VerificationState::Active;
        s
    }

    fn failed() -> Outcome {
        Outcome {
            success: false,
            error_class: Some(hub_core::sink::outcome::ErrorClass::HttpStatus),
            status_code: Some(500),
            detail: String::new(),
            duration_ms: 3,
        }
    }

    #[test]
    fn r_cp_11_paused_deleted_and_stopped_subscriptions_get_no_attempt() {
        let mut b = Breaker::new(BreakerConfig::default());
        let j = job(0, 0);
        assert_eq!(dispatch(None, None, &mut b, &j, 0), Dispatch::Cancel);
        let mut paused = active();
        paused.paused = true;
        paused.enabled = false;
        assert_eq!(
            dispatch(Some(&paused), None, &mut b, &j, 0),
            Dispatch::Cancel
        );
        let mut stopped = active();
        stopped.enabled = false;
        assert!(matches!(
            dispatch(Some(&stopped), None, &mut b, &j, 0),
            Dispatch::Bury(_)
        ));
        assert_eq!(
            dispatch(Some(&active()), None, &mut b, &j, 0),
            Dispatch::Start
        );
        let mut resumed = active();
        resumed.marks.resumed_at_ms = Some(10);
        assert_eq!(
            dispatch(Some(&resumed), None, &mut b, &job(0, 9), 20),
            Dispatch::Cancel
        );
        assert_eq!(
            dispatch(Some(&resumed), None, &mut b, &job(0, 10), 20),
            Dispatch::Start
        );
    }

    #[test]
    fn r_cp_17_a_partners_jobs_wait_until_the_partner_is_known_active() {
        let mut b = Breaker::new(BreakerConfig::default());
        let sub = active();
        let j = job(0, 0);
        assert_eq!(
            dispatch(Some(&sub), Some(PartnerState::Inactive), &mut b, &j, 5),
            Dispatch::Defer(5 + PARTNER_INACTIVE_RECHECK_MS)
        );
        assert_eq!(
            dispatch(Some(&sub), Some(PartnerState::Unknown), &mut b, &j, 5),
            Dispatch::Defer(5 + PARTNER_UNKNOWN_RECHECK_MS)
        );
        assert_eq!(
            dispatch(Some(&sub), Some(PartnerState::Active), &mut b, &j, 5),
            Dispatch::Start
        );
    }

    #[test]
    fn r_di_9_open_breaker_defers_except_the_last_attempt() {
        let mut b = Breaker::new(BreakerConfig::default());
        for _ in 0..b.config.failures_to_open {
            b.record(0, false);
        }
        let sub = active();
        assert!(matches!(
            dispatch(Some(&sub), None, &mut b, &job(1, 0), 1),
            Dispatch::Defer(_)
        ));
        // The eighth attempt is the last: it runs even while the breaker is open.
        assert_eq!(
            dispatch(Some(&sub), None, &mut b, &job(7, 0), 1),
            Dispatch::Start
        );
    }

    #[test]
    fn r_di_6_failures_retry_then_dead_letter() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let curve = Curve::default();
        match after_attempt(&job(0, 0), &curve, &failed(), 0, 10, &mut rng) {
            Settled::RetryAt(t, r) => {
                assert!(
                    (10..=10 + 5_000).contains(&t),
                    "second step is 5 s, jittered"
                );
                assert_eq!(r.status_code, Some(500));
            }
            other => panic!("expected a retry, got {other:?}"),
        }
        assert!(matches!(
            after_attempt(&job(7, 0), &curve, &failed(), 0, 10, &mut rng),
            Settled::DeadLetter { .. }
        ));
        let ok = Outcome {
            success: true,
            error_class: None,
            ..failed()
        };
        assert!(matches!(
            after_attempt(&job(3, 0), &curve, &ok, 0, 10, &mut rng),
            Settled::Delivered(_)
        ));
    }

    #[test]
    fn r_di_8_a_permanent_failure_is_dead_lettered_at_once_with_its_class() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let curve = curve_of(&active());
        let missing = Outcome::refused(
            hub_core::sink::outcome::ErrorClass::DestinationMissing,
            "no such queue",
        );
        match after_attempt(&job(0, 0), &curve, &missing, 0, 10, &mut rng) {
            Settled::DeadLetter { reason, attempt } => {
                assert!(reason.contains("destination_missing"), "{reason}");
                assert_eq!(
                    attempt.and_then(|a| a.error_class).as_deref(),
                    Some("destination_missing")
                );
            }
            other => panic!("expected a dead letter, got {other:?}"),
        }
    }
}
