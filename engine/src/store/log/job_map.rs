//! The pending jobs by id, as the log store's index holds them.
//!
//! The id is kept as two halves: a `u128` aligns to 16, which made each slot of the map 32 bytes
//! instead of 24 — 16 MiB of a million jobs' table (issue 17). The entries are boxed: a map of a
//! million grows by doubling, and each empty slot then costs a pointer, not a whole entry.
//! (Splitting the map 64 ways, so that a growth holds less old table, raised the RSS peak of a
//! million-record backlog instead: mimalloc gives a single large table straight back to the
//! kernel once it is freed.)

use super::state::{JobEntry, Map};

/// A job id as two `u64`s (8-byte aligned), the form the indexes keep it in (here and in the
/// queues' due keys).
pub(super) type Halves = (u64, u64);

pub(super) fn halves(id: u128) -> Halves {
    ((id >> 64) as u64, id as u64)
}

pub(super) fn whole((high, low): Halves) -> u128 {
    (u128::from(high) << 64) | u128::from(low)
}

/// The jobs by id.
#[derive(Debug, Default)]
pub(super) struct JobMap {
    map: Map<Halves, Box<JobEntry>>,
}

impl JobMap {
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn contains_key(&self, id: u128) -> bool {
        self.map.contains_key(&halves(id))
    }

    pub fn get(&self, id: u128) -> Option<&JobEntry> {
        self.map.get(&halves(id)).map(|entry| &**entry)
    }

    pub fn get_mut(&mut self, id: u128) -> Option<&mut JobEntry> {
        self.map.get_mut(&halves(id)).map(|entry| &mut **entry)
    }

    pub fn insert(&mut self, id: u128, entry: Box<JobEntry>) {
        self.map.insert(halves(id), entry);
    }

    pub fn remove(&mut self, id: u128) -> Option<Box<JobEntry>> {
        self.map.remove(&halves(id))
    }

    /// Every job, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (u128, &JobEntry)> {
        (self.map.iter()).map(|(key, entry)| (whole(*key), &**entry))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64) -> Box<JobEntry> {
        Box::new(JobEntry {
            queue: 0,
            seg: 0,
            attempts: 0,
            starts: 0,
            leased: false,
            event_id: uuid::Uuid::nil(),
            event_seq: seq,
            received_at_ms: 0,
            due_at_ms: 0,
            last: None,
        })
    }

    #[test]
    fn r_di_8_jobs_are_found_counted_and_removed_by_id() {
        let mut jobs = JobMap::default();
        let ids: Vec<u128> = (0..2_000u128).map(|i| (i << 64) | (i * 7919)).collect();
        for (n, id) in ids.iter().enumerate() {
            jobs.insert(*id, entry(n as u64));
        }
        jobs.insert(ids[0], entry(99_999));
        assert_eq!(jobs.len(), 2_000, "a rewrite does not count twice");
        assert_eq!(jobs.get(ids[0]).map(|e| e.event_seq), Some(99_999));
        assert_eq!(jobs.get(ids[1]).map(|e| e.event_seq), Some(1));
        let mut seen: Vec<u128> = jobs.iter().map(|(id, _)| id).collect();
        seen.sort_unstable();
        let mut want = ids.clone();
        want.sort_unstable();
        assert_eq!(seen, want, "iteration gives back every id whole");
        assert!(jobs.remove(ids[5]).is_some());
        assert!(jobs.remove(ids[5]).is_none());
        assert!(!jobs.contains_key(ids[5]));
        assert_eq!(jobs.len(), 1_999);
    }

    #[test]
    fn r_di_8_a_job_slot_is_24_bytes() {
        assert_eq!(std::mem::size_of::<(Halves, Box<JobEntry>)>(), 24);
    }
}
