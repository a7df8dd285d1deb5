//! Backoff (R-DI-6, R-DI-7). Step `i` of a curve is the delay before attempt `i + 1`; the default
//! curve `0 · 5s · 5m · 30m · 2h · 5h · 10h · 10h` allows eight attempts. The actual delay is drawn
//! uniformly from `[0, step]` (full jitter), so retries of many jobs spread out instead of
//! arriving together.

use rand::Rng;

/// The default curve, in seconds.
pub const DEFAULT_CURVE_S: [u32; 8] = [0, 5, 300, 1_800, 7_200, 18_000, 36_000, 36_000];
/// Longest step an override may have (10 hours).
pub const MAX_STEP_S: u32 = 36_000;
/// Most steps an override may have.
pub const MAX_STEPS: usize = 12;
/// An attempt that starts this long after the hub received the event is the job's last.
pub const LAST_ATTEMPT_AFTER_MS: i64 = 24 * 3_600_000;

/// A validated curve: its steps are `steps_s[..len]`. Held inline, since every settled attempt
/// takes its subscription's curve (issue 17: a `Vec` was two allocations per attempt).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Curve {
    steps_s: [u32; MAX_STEPS],
    len: u8,
}

impl Default for Curve {
    fn default() -> Self {
        Self::of(&DEFAULT_CURVE_S)
    }
}

impl Curve {
    /// A subscription's override, or the default curve when there is none or it is malformed
    /// (empty, more than 12 steps, a step above 10 h): a bad override never fails delivery.
    pub fn from_override(steps_s: Option<&[u32]>) -> Self {
        match steps_s {
            Some(s) if (1..=MAX_STEPS).contains(&s.len()) && s.iter().all(|v| *v <= MAX_STEP_S) => {
                Self::of(s)
            }
            _ => Self::default(),
        }
    }

    /// `steps_s`, at most [`MAX_STEPS`] of them.
    fn of(steps_s: &[u32]) -> Self {
        let mut curve = Self {
            steps_s: [0; MAX_STEPS],
            len: steps_s.len().min(MAX_STEPS) as u8,
        };
        curve.steps_s[..usize::from(curve.len)].copy_from_slice(&steps_s[..usize::from(curve.len)]);
        curve
    }

    fn steps_s(&self) -> &[u32] {
        &self.steps_s[..usize::from(self.len)]
    }

    /// How many attempts a job gets.
    pub fn attempts(&self) -> u32 {
        u32::from(self.len)
    }

    /// The step before attempt `n` (1-based), in ms.
    fn step_ms(&self, n: u32) -> Option<i64> {
        let i = usize::try_from(n.checked_sub(1)?).ok()?;
        self.steps_s().get(i).map(|s| i64::from(*s) * 1000)
    }
}

/// Whether attempt `n` (1-based), starting at `start_ms` for an event received at
/// `received_ms`, is the job's last: the curve's last, or one starting 24 h or more after receipt.
pub fn is_last_attempt(curve: &Curve, n: u32, received_ms: i64, start_ms: i64) -> bool {
    n >= curve.attempts() || start_ms - received_ms >= LAST_ATTEMPT_AFTER_MS
}

/// When the first attempt is due (step 1, jittered).
pub fn first_attempt_at(curve: &Curve, now_ms: i64, rng: &mut impl Rng) -> i64 {
    now_ms + jitter(curve.step_ms(1).unwrap_or(0), rng)
}

/// What follows a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// Try again at this time (Unix ms).
    RetryAt(i64),
    /// That was the last attempt.
    DeadLetter,
}

/// After attempt `n` (1-based) started at `start_ms` failed at `now_ms`.
pub fn after_failure(
    curve: &Curve,
    n: u32,
    received_ms: i64,
    start_ms: i64,
    now_ms: i64,
    rng: &mut impl Rng,
) -> AfterFailure {
    if is_last_attempt(curve, n, received_ms, start_ms) {
        return AfterFailure::DeadLetter;
    }
    match curve.step_ms(n + 1) {
        Some(step) => AfterFailure::RetryAt(now_ms + jitter(step, rng)),
        None => AfterFailure::DeadLetter,
    }
}

/// Full jitter: uniform in `[0, step]`.
fn jitter(step_ms: i64, rng: &mut impl Rng) -> i64 {
    if step_ms <= 0 {
        0
    } else {
        rng.gen_range(0..=step_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;

    const H: i64 = 3_600_000;

    #[test]
    fn r_di_6_eight_attempts_then_dead_letter() {
        let c = Curve::default();
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        assert_eq!(c.attempts(), 8);
        assert_eq!(first_attempt_at(&c, 1000, &mut rng), 1000, "step 1 is 0");
        for n in 1..8 {
            assert!(
                matches!(
                    after_failure(&c, n, 0, 0, 0, &mut rng),
                    AfterFailure::RetryAt(_)
                ),
                "{n}"
            );
        }
        assert_eq!(
            after_failure(&c, 8, 0, 0, 0, &mut rng),
            AfterFailure::DeadLetter
        );
    }

    #[test]
    fn r_di_6_an_attempt_24h_after_receipt_is_the_last() {
        let c = Curve::default();
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        assert!(!is_last_attempt(&c, 3, 0, 24 * H - 1));
        assert!(is_last_attempt(&c, 3, 0, 24 * H));
        assert_eq!(
            after_failure(&c, 3, 0, 24 * H, 24 * H + 5, &mut rng),
            AfterFailure::DeadLetter
        );
        assert!(matches!(
            after_failure(&c, 3, 0, 24 * H - 1, 24 * H, &mut rng),
            AfterFailure::RetryAt(_)
        ));
    }

    #[test]
    fn r_di_7_malformed_overrides_fall_back_to_the_default() {
        for bad in [&[][..], &[1; 13][..], &[36_001][..]] {
            assert_eq!(Curve::from_override(Some(bad)), Curve::default(), "{bad:?}");
        }
        assert_eq!(Curve::from_override(None), Curve::default());
        let ok = Curve::from_override(Some(&[10, 20, 36_000]));
        assert_eq!(ok.attempts(), 3);
    }

    proptest! {
        /// Full jitter stays inside [0, step] for every attempt, over many draws.
        #[test]
        fn r_di_6_retry_delays_stay_within_their_step(seed: u64, n in 1u32..8, now in 0i64..1_000_000_000) {
            let c = Curve::default();
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            match after_failure(&c, n, now, now, now, &mut rng) {
                AfterFailure::RetryAt(at) => {
                    let step = i64::from(DEFAULT_CURVE_S[n as usize]) * 1000;
                    prop_assert!(at >= now && at <= now + step, "{at} not in [{now}, {}]", now + step);
                }
                AfterFailure::DeadLetter => prop_assert!(false, "attempt {n} of 8 is not the last"),
            }
        }
    }

    #[test]
    fn r_di_6_jitter_spreads_over_the_whole_step() {
        let c = Curve::default();
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let delays: Vec<i64> = (0..10_000)
            .map(|_| match after_failure(&c, 2, 0, 0, 0, &mut rng) {
                AfterFailure::RetryAt(at) => at,
                AfterFailure::DeadLetter => -1,
            })
            .collect();
        let step = 300_000;
        assert!(delays.iter().all(|d| (0..=step).contains(d)));
        let low = delays.iter().filter(|d| **d < step / 4).count();
        let high = delays.iter().filter(|d| **d > 3 * step / 4).count();
        assert!(
            low > 2000 && high > 2000,
            "uniform-ish: {low} low, {high} high"
        );
    }
}
