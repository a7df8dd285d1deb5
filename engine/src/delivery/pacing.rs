//! When a lane writes its next store step and when it pages the store, as pure decisions over
//! `now` (ms).
//!
//! Each step is one fsynced transaction, and at low rates the commit, not the work in it, is
//! what a delivery costs. Outcomes therefore wait a little (`linger`) for the next lease to
//! carry them, while leases never wait: a job starts as soon as a worker is free. Waiting
//! outcomes widen the window in which a crash repeats an attempt already made, so a lane starts
//! no attempt while [`unrecorded_max`] of them wait to be written.
//!
//! The page is a deadline, not a sleep restarted on every wake-up: a lane busy with attempts
//! still pages retries coming due every `poll`.

/// A lane's timing.
#[derive(Debug, Clone)]
pub struct Pacing {
    poll_ms: i64,
    linger_ms: i64,
    next_page_at: i64,
    /// When the oldest outcome not yet sent to the store was queued.
    settles_since: Option<i64>,
}

impl Pacing {
    pub fn new(poll_ms: i64, linger_ms: i64, now: i64) -> Self {
        Self {
            poll_ms: poll_ms.max(1),
            linger_ms: linger_ms.max(0),
            next_page_at: now,
            settles_since: None,
        }
    }

    /// Outcomes are waiting (`any`); the first one starts the linger.
    pub fn settles_waiting(&mut self, any: bool, now: i64) {
        match (any, self.settles_since) {
            (false, _) => self.settles_since = None,
            (true, None) => self.settles_since = Some(now),
            (true, Some(_)) => {}
        }
    }

    /// Whether to write a step now: leases always; outcomes when there are `max` of them, when
    /// the lane stops, or once the oldest waited `linger`.
    pub fn write_now(
        &self,
        leases: usize,
        settles: usize,
        max: usize,
        stopping: bool,
        now: i64,
    ) -> bool {
        if leases > 0 {
            return true;
        }
        if settles == 0 {
            return false;
        }
        stopping
            || settles >= max
            || self
                .settles_since
                .is_none_or(|since| now - since >= self.linger_ms)
    }

    /// Whether the store is due a page (retries coming due, jobs other writers left); re-arms.
    pub fn page_due(&mut self, now: i64) -> bool {
        if now < self.next_page_at {
            return false;
        }
        self.next_page_at = now + self.poll_ms;
        true
    }

    /// How long the lane may sleep when nothing else wakes it: to the next page, or to the end
    /// of the outcomes' linger when no step is being written.
    pub fn sleep_ms(&self, step_in_flight: bool, now: i64) -> i64 {
        let page = self.next_page_at - now;
        let settle = match (step_in_flight, self.settles_since) {
            (false, Some(since)) => since + self.linger_ms - now,
            _ => i64::MAX,
        };
        page.min(settle).max(1)
    }
}

/// Most attempts a lane may have made whose outcomes are not yet written (running, waiting,
/// or in the step being written): a crash repeats at most these. Twice what the lane leases
/// ahead, a step's worth being written and as many finished meanwhile, which the lease cap
/// alone keeps to; but jobs ingest leased for an idle lane (`FreshLeases`) come on top of that
/// cap, and while a slow store step was written a lane worked through all of them (1,523
/// repeats after one kill on CQL where at most 1,024 were expected).
#[must_use]
pub fn unrecorded_max(workers: u32, lease_ahead: u32) -> usize {
    2 * (workers as usize) * (lease_ahead as usize)
}

/// Whether a lane with `running` attempts and `unwritten` outcomes not yet durable may start
/// one more attempt on a free worker.
#[must_use]
pub fn may_start(running: usize, unwritten: usize, workers: u32, lease_ahead: u32) -> bool {
    running < workers as usize && running + unwritten < unrecorded_max(workers, lease_ahead)
}

/// Whether a lane holding `held` of `held_max` jobs has room for a page: under half full, so
/// a page is worth its read.
#[must_use]
pub fn room_to_page(held: usize, held_max: usize) -> bool {
    held < held_max / 2
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Paging {
    /// Read a page of due jobs.
    Page,
    /// A page was asked for but the lane holds too much to take one: renew the holds only, so
    /// they do not lapse while the held jobs wait.
    KeepHolds,
    Nothing,
}

/// What the lane's last page said: whether a limit cut it short (more is due than it brought),
/// and how many jobs the lane held right after it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LastPage {
    pub cut_short: bool,
    pub held_after: usize,
}

impl LastPage {
    /// Whether to page now. When a page was asked for (the poll, a nudge, a hand-off left to the
    /// store): as soon as the lane holds less than half of `held_max`. When the last page was
    /// cut short: also once the lane has worked off half of what it held after it, so a backlog
    /// flows in pages as fast as the workers take it, while a page whose jobs all wait behind
    /// their destination's share of memory is not read again at once. Paging only at each poll
    /// capped a lane at `held_max` jobs per `poll` (5,120 a second with the defaults) and one
    /// destination at a page of its queue per poll.
    pub fn paging(&self, asked: bool, held: usize, held_max: usize) -> Paging {
        let room = room_to_page(held, held_max);
        let worked_off = held * 2 <= self.held_after;
        if room && (asked || (self.cut_short && worked_off)) {
            Paging::Page
        } else if asked {
            Paging::KeepHolds
        } else {
            Paging::Nothing
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_di_2_leases_go_at_once_and_outcomes_wait_for_a_lease_or_the_linger() {
        let mut p = Pacing::new(200, 20, 0);
        assert!(p.write_now(1, 0, 64, false, 0), "a lease never waits");
        assert!(!p.write_now(0, 0, 64, false, 0), "nothing to write");
        p.settles_waiting(true, 100);
        p.settles_waiting(true, 110); // a later outcome keeps the first one's start
        assert!(!p.write_now(0, 3, 64, false, 110));
        assert!(
            p.write_now(2, 3, 64, false, 110),
            "a lease carries the outcomes"
        );
        assert!(p.write_now(0, 3, 64, false, 120), "the linger is over");
        assert!(
            p.write_now(0, 64, 64, false, 101),
            "a full step goes at once"
        );
        assert!(
            p.write_now(0, 1, 64, true, 101),
            "a stopping lane writes what it has"
        );
        p.settles_waiting(false, 120);
        assert!(!p.write_now(0, 0, 64, false, 500));
    }

    #[test]
    fn r_di_6_a_busy_lane_still_pages_retries_every_poll() {
        let mut p = Pacing::new(200, 20, 1_000);
        assert!(p.page_due(1_000), "pages at once when it starts");
        // Wake-ups at every millisecond (attempts finishing) do not push the page back.
        let pages = (1_001..=1_600).filter(|now| p.page_due(*now)).count();
        assert_eq!(pages, 3, "at 1200, 1400 and 1600");
    }

    #[test]
    fn r_di_2_the_lane_sleeps_to_the_next_page_or_the_end_of_the_linger() {
        let mut p = Pacing::new(200, 20, 0);
        assert!(p.page_due(0));
        assert_eq!(p.sleep_ms(false, 50), 150);
        p.settles_waiting(true, 50);
        assert_eq!(p.sleep_ms(false, 55), 15);
        assert_eq!(
            p.sleep_ms(true, 55),
            145,
            "a step in flight will carry them"
        );
        assert_eq!(p.sleep_ms(false, 90), 1, "never a busy loop");
    }

    #[test]
    fn r_di_8_a_lane_stops_starting_attempts_while_too_many_outcomes_wait_to_be_written() {
        let (workers, ahead) = (8, 32);
        assert_eq!(unrecorded_max(workers, ahead), 512);
        assert!(may_start(0, 0, workers, ahead));
        assert!(!may_start(8, 0, workers, ahead), "every worker is busy");
        assert!(may_start(7, 504, workers, ahead));
        assert!(
            !may_start(7, 505, workers, ahead),
            "a crash now would repeat 512 attempts already"
        );
        assert!(!may_start(0, 600, workers, ahead));
    }

    fn page(cut_short: bool, held_after: usize) -> LastPage {
        LastPage {
            cut_short,
            held_after,
        }
    }

    #[test]
    fn r_di_2_a_lane_with_more_due_pages_again_once_it_has_room_without_waiting_for_the_poll() {
        assert_eq!(
            page(true, 1000).paging(false, 400, 1024),
            Paging::Page,
            "more is due and the lane worked off half of its last page"
        );
        assert_eq!(
            page(true, 1024).paging(false, 600, 1024),
            Paging::Nothing,
            "no room yet: no page, and no hold renewal nobody asked for"
        );
        assert_eq!(
            page(true, 128).paging(false, 100, 1024),
            Paging::Nothing,
            "one destination's page (its share of memory) is not worked off yet"
        );
        assert_eq!(page(true, 128).paging(false, 64, 1024), Paging::Page);
        assert_eq!(
            page(true, 0).paging(false, 0, 1024),
            Paging::Page,
            "an empty lane pages what is due"
        );
        assert_eq!(
            page(false, 300).paging(true, 300, 1024),
            Paging::Page,
            "the poll asks"
        );
        assert_eq!(
            page(true, 1024).paging(true, 900, 1024),
            Paging::KeepHolds,
            "the poll asks and there is no room: the holds are renewed"
        );
        assert_eq!(page(false, 0).paging(false, 0, 1024), Paging::Nothing);
    }
}
