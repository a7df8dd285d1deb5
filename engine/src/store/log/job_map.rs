//! The pending jobs by id, as the log store's index holds them.
//!
//! The entries sit inline in a dense slab of fixed-size chunks, and a hash table of slot
//! numbers (4 bytes each) finds them by id. Against a map of boxed entries (a 24-byte slot per
//! bucket, twice as many buckets as jobs after a doubling, and a 64-byte allocation per job),
//! a million jobs take ~24 MiB less, a growth copies a table of `u32`s instead of one of
//! pointers and ids (the RSS peak of a million-record backlog), and a new job allocates nothing
//! (issue 17). The slab stays dense: a removed job's slot takes the last one, so chunks a drained
//! backlog leaves empty are freed (all but one, kept spare).
//!
//! The id is kept as two halves: a `u128` aligns to 16 and would pad each slot.

use std::hash::BuildHasher;

use hashbrown::HashTable;

use super::state::JobEntry;

/// A job id as two `u64`s (8-byte aligned), the form the indexes keep it in (here and in the
/// queues' due keys).
pub(super) type Halves = (u64, u64);

pub(super) fn halves(id: u128) -> Halves {
    ((id >> 64) as u64, id as u64)
}

pub(super) fn whole((high, low): Halves) -> u128 {
    (u128::from(high) << 64) | u128::from(low)
}

/// Slots per chunk: 288 KiB of 72-byte slots, so the last chunk's unused room is small beside a
/// million jobs and a chunk is allocated rarely.
const CHUNK: usize = 4096;

/// A job in the slab.
#[derive(Debug)]
struct Slot {
    id: Halves,
    entry: JobEntry,
}

/// The jobs by id.
#[derive(Debug, Default)]
pub(super) struct JobMap {
    /// Slot `n` is `chunks[n / CHUNK][n % CHUNK]`; every chunk before the last slot's is full,
    /// and at most one empty chunk follows it.
    chunks: Vec<Vec<Slot>>,
    /// Slot numbers, hashed by their job's id.
    index: HashTable<u32>,
    hasher: foldhash::fast::RandomState,
}

impl JobMap {
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn contains_key(&self, id: u128) -> bool {
        self.find(id).is_some()
    }

    pub fn get(&self, id: u128) -> Option<&JobEntry> {
        self.find(id).map(|n| &self.slot(n).entry)
    }

    pub fn get_mut(&mut self, id: u128) -> Option<&mut JobEntry> {
        let n = self.find(id)?;
        Some(&mut self.slot_mut(n).entry)
    }

    /// Inserts or replaces job `id` (the store itself always knows which: `insert_new`).
    #[cfg(test)]
    pub fn insert(&mut self, id: u128, entry: JobEntry) {
        match self.get_mut(id) {
            Some(kept) => *kept = entry,
            None => self.insert_new(id, entry),
        }
    }

    /// Inserts job `id`, which the caller just failed to find: one lookup fewer per new job,
    /// each a likely cache miss on a commit thread sharing its core (issue 17).
    pub fn insert_new(&mut self, id: u128, entry: JobEntry) {
        debug_assert!(!self.contains_key(id), "job {id} is already present");
        let n = u32::try_from(self.len()).expect("fewer than 2^32 pending jobs");
        let (chunk, _) = place(n);
        if chunk == self.chunks.len() {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        let id = halves(id);
        self.chunks[chunk].push(Slot { id, entry });
        let (hasher, chunks) = (&self.hasher, &self.chunks);
        self.index.insert_unique(hasher.hash_one(id), n, |&m| {
            hasher.hash_one(slot_in(chunks, m).id)
        });
    }

    /// Removes job `id`; the last slot moves into its place.
    pub fn remove(&mut self, id: u128) -> Option<JobEntry> {
        let key = halves(id);
        let hash = self.hasher.hash_one(key);
        let chunks = &self.chunks;
        let found = self
            .index
            .find_entry(hash, |&n| slot_in(chunks, n).id == key)
            .ok()?;
        let (n, _) = found.remove();
        let last = self.index.len() as u32;
        let moved = self.pop_last()?;
        if n == last {
            return Some(moved.entry);
        }
        // The last slot fills the hole; its index entry follows it.
        let moved_hash = self.hasher.hash_one(moved.id);
        if let Some(at) = self.index.find_mut(moved_hash, |&m| m == last) {
            *at = n;
        }
        let gone = std::mem::replace(self.slot_mut(n), moved);
        Some(gone.entry)
    }

    /// Every job, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (u128, &JobEntry)> {
        (self.chunks.iter().flatten()).map(|slot| (whole(slot.id), &slot.entry))
    }

    fn find(&self, id: u128) -> Option<u32> {
        let key = halves(id);
        let chunks = &self.chunks;
        (self.index)
            .find(self.hasher.hash_one(key), |&n| slot_in(chunks, n).id == key)
            .copied()
    }

    fn slot(&self, n: u32) -> &Slot {
        slot_in(&self.chunks, n)
    }

    fn slot_mut(&mut self, n: u32) -> &mut Slot {
        let (chunk, at) = place(n);
        &mut self.chunks[chunk][at]
    }

    /// Takes the last slot (its index entry already gone). One emptied chunk is kept spare and
    /// any beyond it freed, so a count that hovers at a chunk's edge (or at zero) does not
    /// allocate and free 288 KiB each time it crosses.
    fn pop_last(&mut self) -> Option<Slot> {
        let left = self.len();
        let slot = self.chunks.get_mut(left / CHUNK)?.pop();
        self.chunks.truncate(left.div_ceil(CHUNK) + 1);
        slot
    }
}

fn slot_in(chunks: &[Vec<Slot>], n: u32) -> &Slot {
    let (chunk, at) = place(n);
    &chunks[chunk][at]
}

/// Slot `n`'s chunk and place in it.
fn place(n: u32) -> (usize, usize) {
    let n = n as usize;
    (n / CHUNK, n % CHUNK)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64) -> JobEntry {
        let event = crate::store::conformance::event("t", "loan.approved");
        let job = crate::store::JobRecord::created(&event, seq, uuid::Uuid::nil(), 1);
        JobEntry::new(&job, 0, false, 0, super::super::attempts::NONE)
    }

    #[test]
    fn r_di_8_jobs_are_found_counted_and_removed_by_id() {
        let mut jobs = JobMap::default();
        let ids: Vec<u128> = (0..10_000u128).map(|i| (i << 64) | (i * 7919)).collect();
        for (n, id) in ids.iter().enumerate() {
            jobs.insert(*id, entry(n as u64));
        }
        jobs.insert(ids[0], entry(99_999));
        assert_eq!(jobs.len(), 10_000, "a rewrite does not count twice");
        assert_eq!(jobs.get(ids[0]).map(|e| e.event_seq), Some(99_999));
        assert_eq!(jobs.get(ids[1]).map(|e| e.event_seq), Some(1));
        let mut seen: Vec<u128> = jobs.iter().map(|(id, _)| id).collect();
        seen.sort_unstable();
        let mut want = ids.clone();
        want.sort_unstable();
        assert_eq!(seen, want, "iteration gives back every id whole");
        assert_eq!(jobs.remove(ids[5]).map(|e| e.event_seq), Some(5));
        assert!(jobs.remove(ids[5]).is_none());
        assert!(!jobs.contains_key(ids[5]));
        assert_eq!(jobs.len(), 9_999);
    }

    /// Removing in any order keeps every other job findable (the last slot moves into each
    /// hole) and frees the chunks a drain empties.
    #[test]
    fn r_di_8_removals_keep_the_rest_findable_and_free_empty_chunks() {
        use rand::seq::SliceRandom;
        let mut jobs = JobMap::default();
        let mut ids: Vec<u128> = (0..3 * CHUNK as u128 + 17).map(|i| i * 104_729).collect();
        for id in &ids {
            jobs.insert(*id, entry(*id as u64));
        }
        ids.shuffle(&mut rand::thread_rng());
        let (gone, kept) = ids.split_at(ids.len() - 100);
        for id in gone {
            assert_eq!(jobs.remove(*id).map(|e| e.event_seq), Some(*id as u64));
        }
        for id in kept {
            assert_eq!(jobs.get(*id).map(|e| e.event_seq), Some(*id as u64));
        }
        assert_eq!(jobs.len(), 100);
        assert_eq!(
            jobs.chunks.len(),
            2,
            "drained chunks are freed but one spare"
        );
        for id in kept {
            assert!(jobs.remove(*id).is_some());
        }
        assert!(jobs.chunks.len() == 1 && jobs.len() == 0);
        assert!(jobs.chunks[0].capacity() == CHUNK, "the spare is kept");
    }

    /// A count going back and forth over a chunk's edge reuses the spare chunk: it neither grows
    /// the slab nor loses a job.
    #[test]
    fn r_di_8_a_count_hovering_at_a_chunks_edge_reuses_the_spare() {
        let mut jobs = JobMap::default();
        for id in 0..CHUNK as u128 {
            jobs.insert(id, entry(id as u64));
        }
        for round in 0..100u128 {
            let id = 1_000_000 + round;
            jobs.insert(id, entry(7));
            assert_eq!(jobs.chunks.len(), 2);
            assert!(jobs.remove(id).is_some());
            assert_eq!(jobs.chunks.len(), 2, "the emptied chunk stays as the spare");
        }
        assert_eq!(jobs.len(), CHUNK);
        assert!((0..CHUNK as u128).all(|id| jobs.get(id).map(|e| e.event_seq) == Some(id as u64)));
    }

    #[test]
    fn r_di_8_a_job_slot_is_72_bytes() {
        assert_eq!(std::mem::size_of::<Slot>(), 72);
    }
}
