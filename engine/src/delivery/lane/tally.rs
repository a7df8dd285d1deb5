//! What a lane did over the last few seconds, logged at `debug` (issue 17: where a hot
//! destination waits at a steady rate — hand-offs left to the store, pages, store steps, the
//! workers). Counting costs a few additions per job; the log line is written only when the
//! target is enabled.

/// How often a lane says what it did.
const EVERY_MS: i64 = 5_000;

#[derive(Debug, Default)]
pub(super) struct LaneTally {
    since_ms: i64,
    /// Jobs ingest handed over, and how many of them were left to the store (no room, or their
    /// destination's share of held memory full).
    pub handed: u64,
    pub handed_left: u64,
    /// Pages read, jobs they brought, jobs the lane held of them, and the time they took.
    pub pages: u64,
    pub paged: u64,
    pub paged_held: u64,
    pub page_ms: i64,
    /// Store steps, the jobs they leased and the outcomes they wrote, and their time.
    pub steps: u64,
    pub leased: u64,
    pub settled: u64,
    pub step_ms: i64,
    pub step_ms_max: i64,
    /// Attempts finished, and the sum of their durations.
    pub attempts: u64,
    pub attempt_ms: i64,
    pub attempt_ms_max: i64,
    /// The longest the loop spent on a page or a hold renewal, collecting no attempt meanwhile.
    pub inline_ms_max: i64,
    /// Rounds of the lane's loop, and those that found every worker busy at their end.
    pub rounds: u64,
    pub rounds_all_busy: u64,
    /// Rounds that left a leased job waiting while a worker was free (its destination at its
    /// R-DI-3 cap).
    pub rounds_capped: u64,
}

impl LaneTally {
    /// A tally whose first window starts at `now_ms`.
    pub fn since(now_ms: i64) -> Self {
        Self {
            since_ms: now_ms,
            ..Self::default()
        }
    }

    /// Counts a finished attempt that took `ms`.
    pub fn attempt(&mut self, ms: i64) {
        self.attempts += 1;
        self.attempt_ms += ms;
        self.attempt_ms_max = self.attempt_ms_max.max(ms);
    }

    /// Counts a written store step that took `ms`.
    pub fn step(&mut self, ms: i64) {
        self.step_ms += ms;
        self.step_ms_max = self.step_ms_max.max(ms);
    }

    /// Notes how long the loop spent on a page or a hold renewal.
    pub fn inline(&mut self, ms: i64) {
        self.inline_ms_max = self.inline_ms_max.max(ms);
    }

    /// Logs and restarts the tally once its window is over.
    pub fn close(&mut self, shard: usize, held: usize, ready: usize, now_ms: i64) {
        if now_ms - self.since_ms < EVERY_MS {
            return;
        }
        if tracing::enabled!(tracing::Level::DEBUG) {
            let per = |n: i64, d: u64| if d == 0 { 0.0 } else { n as f64 / d as f64 };
            tracing::debug!(
                shard,
                window_ms = now_ms - self.since_ms,
                held,
                ready,
                handed = self.handed,
                handed_left = self.handed_left,
                pages = self.pages,
                paged = self.paged,
                paged_held = self.paged_held,
                page_ms_mean = per(self.page_ms, self.pages),
                steps = self.steps,
                leased = self.leased,
                settled = self.settled,
                step_ms_mean = per(self.step_ms, self.steps),
                step_ms_max = self.step_ms_max,
                attempts = self.attempts,
                attempt_ms_mean = per(self.attempt_ms, self.attempts),
                attempt_ms_max = self.attempt_ms_max,
                inline_ms_max = self.inline_ms_max,
                rounds = self.rounds,
                rounds_all_busy = self.rounds_all_busy,
                rounds_capped = self.rounds_capped,
                "delivery lane tally"
            );
        }
        *self = Self::since(now_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::LaneTally;

    #[test]
    fn a_window_keeps_the_sums_and_the_longest_attempt_step_and_inline_wait() {
        let mut t = LaneTally::since(0);
        for ms in [3, 900, 5] {
            t.attempt(ms);
        }
        t.step(4);
        t.step(2);
        t.inline(7);
        t.inline(1);
        assert_eq!((t.attempts, t.attempt_ms, t.attempt_ms_max), (3, 908, 900));
        assert_eq!((t.step_ms, t.step_ms_max, t.inline_ms_max), (6, 4, 7));
        t.close(0, 0, 0, 5_000);
        assert_eq!(
            (t.attempts, t.attempt_ms_max, t.inline_ms_max),
            (0, 0, 0),
            "a closed window starts again"
        );
    }
}
