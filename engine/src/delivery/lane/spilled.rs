//! Who has due jobs waiting in the store because the lane had no room for them, and when a page
//! should fetch them.

use std::collections::HashSet;

use crate::fast_hash::{FastMap, FastSet};

/// Jobs left in the store because the lane had no room for them: a whole hand-off when the lane
/// held `held_max`, or a destination's jobs past its share of held memory. A page is wanted once
/// there is room for them again — not after every hand-off left behind, which at a steady rate
/// paged a hot destination's queue a hundred times a second only to drop what it read (issue
/// 17: 300 k jobs read in 5 s to hold 7 k, the lane falling seconds behind).
///
/// Until then pages pass over the queues of the subscriptions whose jobs a full destination
/// turned away (`DueQuery::pass_over`): a page for anyone else (or the poll) read every such
/// queue's share only to drop it. Once a destination is down to half, the next page reads its
/// subscriptions' queues together up to the room it has left (`DueQuery::rooms`), not each up
/// to the lane's room: with ten tenants posting to each of three fast destinations, pages read
/// ~11 jobs for each one held. A queue that room cut short (`DuePage::cut`) is left behind again.
#[derive(Debug, Default)]
pub(super) struct Spilled {
    /// Destinations with jobs left behind, and the subscriptions whose jobs they turned away.
    destinations: FastMap<String, FastSet<u128>>,
    /// Destinations down to half since the last page, with those subscriptions: the next page
    /// reads them within the destination's room.
    reopened: FastMap<String, FastSet<u128>>,
    /// The lane was full.
    pub lane: bool,
    /// A spilled destination has room again.
    room: bool,
}

impl Spilled {
    /// A job of `subscription` was left in the store: `destination` held its share.
    pub fn destination(&mut self, destination: &str, subscription: u128) {
        match self.destinations.get_mut(destination) {
            Some(subscriptions) => {
                subscriptions.insert(subscription);
            }
            None => {
                let subscriptions = std::iter::once(subscription).collect();
                self.destinations
                    .insert(destination.to_owned(), subscriptions);
            }
        }
    }

    /// `destination` now holds `holding` of its share `cap`: room once it is down to half.
    pub fn held_fewer(&mut self, destination: &str, holding: usize, cap: usize) {
        if holding > cap / 2 {
            return;
        }
        if let Some((destination, subscriptions)) = self.destinations.remove_entry(destination) {
            self.reopened.insert(destination, subscriptions);
            self.room = true;
        }
    }

    /// The destinations down to half since the last page, with the subscriptions they had
    /// turned away (forgotten: the page reads them).
    pub fn take_reopened(&mut self) -> FastMap<String, FastSet<u128>> {
        std::mem::take(&mut self.reopened)
    }

    /// The subscriptions whose queues a page need not read: their destination is still full.
    pub fn passed_over(&self) -> HashSet<u128> {
        self.destinations.values().flatten().copied().collect()
    }

    /// Whether to page now for what was left behind (and forget it: the page reads it).
    pub fn page_wanted(&mut self, held: usize, held_max: usize) -> bool {
        if self.lane && crate::delivery::pacing::room_to_page(held, held_max) {
            self.lane = false;
            self.room = true;
        }
        std::mem::take(&mut self.room)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_di_3_a_destination_past_its_share_is_paged_again_once_it_is_down_to_half() {
        let mut s = Spilled::default();
        s.destination("https://hot.example", 1);
        s.destination("https://hot.example", 1);
        assert!(!s.page_wanted(0, 1024), "nothing has room yet");
        s.held_fewer("https://hot.example", 100, 128);
        assert!(!s.page_wanted(0, 1024), "still over half its share");
        s.held_fewer("https://other.example", 0, 128);
        assert!(
            !s.page_wanted(0, 1024),
            "another destination left nothing behind"
        );
        s.held_fewer("https://hot.example", 64, 128);
        assert!(s.page_wanted(0, 1024), "down to half: page");
        assert!(!s.page_wanted(0, 1024), "once");
        s.held_fewer("https://hot.example", 0, 128);
        assert!(
            !s.page_wanted(0, 1024),
            "it was forgotten when the page was asked for"
        );
    }

    /// Pages pass over the subscriptions a full destination turned away, until it has room.
    #[test]
    fn r_di_3_pages_pass_over_a_full_destinations_subscriptions_until_it_has_room() {
        let mut s = Spilled::default();
        s.destination("https://shared.example", 1);
        s.destination("https://shared.example", 2);
        s.destination("https://other.example", 3);
        assert_eq!(s.passed_over(), HashSet::from([1, 2, 3]));
        s.held_fewer("https://shared.example", 64, 128);
        assert_eq!(s.passed_over(), HashSet::from([3]), "room again: read");
    }

    /// A destination down to half is read within its room at the next page, once.
    #[test]
    fn r_di_3_a_destination_down_to_half_is_paged_within_its_room_once() {
        let mut s = Spilled::default();
        s.destination("https://shared.example", 1);
        s.destination("https://shared.example", 2);
        assert!(s.take_reopened().is_empty(), "still full");
        s.held_fewer("https://shared.example", 64, 128);
        let reopened = s.take_reopened();
        assert_eq!(
            reopened.get("https://shared.example"),
            Some(&FastSet::from_iter([1, 2]))
        );
        assert!(s.take_reopened().is_empty(), "the page read them");
    }

    #[test]
    fn r_di_3_a_full_lane_pages_again_once_it_holds_less_than_half() {
        let mut s = Spilled {
            lane: true,
            ..Spilled::default()
        };
        assert!(!s.page_wanted(600, 1024));
        assert!(s.page_wanted(511, 1024));
        assert!(!s.page_wanted(0, 1024));
    }
}
