//! Who has due jobs waiting in the store because the lane had no room for them, and when a page
//! should fetch them.

/// Jobs left in the store because the lane had no room for them: a whole hand-off when the lane
/// held `held_max`, or a destination's jobs past its share of held memory. A page is wanted once
/// there is room for them again — not after every hand-off left behind, which at a steady rate
/// paged a hot destination's queue a hundred times a second only to drop what it read (issue
/// 17: 300 k jobs read in 5 s to hold 7 k, the lane falling seconds behind).
#[derive(Debug, Default)]
pub(super) struct Spilled {
    /// Destinations with jobs left behind.
    destinations: crate::fast_hash::FastSet<String>,
    /// The lane was full.
    pub lane: bool,
    /// A spilled destination has room again.
    room: bool,
}

impl Spilled {
    pub fn destination(&mut self, destination: &str) {
        if !self.destinations.contains(destination) {
            self.destinations.insert(destination.to_owned());
        }
    }

    /// `destination` now holds `holding` of its share `cap`: room once it is down to half.
    pub fn held_fewer(&mut self, destination: &str, holding: usize, cap: usize) {
        if holding <= cap / 2 && self.destinations.remove(destination) {
            self.room = true;
        }
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
        s.destination("https://hot.example");
        s.destination("https://hot.example");
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
