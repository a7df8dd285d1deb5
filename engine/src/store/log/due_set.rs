//! A queue's jobs by due time, as the log store's index holds them: a sorted set of due keys in
//! chunks of up to [`CHUNK`] keys.
//!
//! A `BTreeSet` was the obvious choice, but jobs reach a queue mostly in due order (an event's
//! jobs are due when it arrives, a lease's end or a retry lies after every job due now), and a
//! B-tree grown that way splits each full leaf in the middle, leaving it half empty for good:
//! 37-50 bytes per 24-byte key, 35-48 MiB of a million pending jobs (issue 17). Here a full
//! chunk first hands a key to a neighbour with room; failing that, the last chunk splits where
//! the new key goes, so keys arriving in due order fill their chunks, and any other splits in
//! half. A chunk emptied goes, and one left under a quarter full joins a neighbour with room.

use std::collections::VecDeque;

use super::state::DueKey;

/// Most keys a chunk holds: a 3 KiB block, so an insert or removal inside one moves at most that.
const CHUNK: usize = 128;

/// Sorted keys, no two equal. Every chunk is non-empty and sorted, and each chunk's keys lie
/// below the next chunk's.
#[derive(Debug, Default)]
pub(super) struct DueSet {
    chunks: VecDeque<Vec<DueKey>>,
}

impl DueSet {
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.chunks.iter().map(Vec::len).sum()
    }

    /// No chunk is ever empty, so no chunk means no key.
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// The chunk that holds `key` or would: the first whose last key is not below it, else the
    /// last chunk.
    fn chunk_of(&self, key: &DueKey) -> usize {
        let at = (self.chunks).partition_point(|c| c.last().is_some_and(|last| last < key));
        at.min(self.chunks.len().saturating_sub(1))
    }

    /// Adds `key`; false when it was there already.
    pub fn insert(&mut self, key: DueKey) -> bool {
        if self.chunks.is_empty() {
            self.chunks.push_back(new_chunk(key));
            return true;
        }
        let i = self.chunk_of(&key);
        let last = i + 1 == self.chunks.len();
        let chunk = &mut self.chunks[i];
        let Err(at) = chunk.binary_search(&key) else {
            return false;
        };
        if chunk.len() < CHUNK {
            chunk.insert(at, key);
            return true;
        }
        if self.spill(i, at, key) {
            return true;
        }
        // A full chunk between full ones splits in half, except the last one near its end: keys
        // come mostly in due order (jobs due in the same millisecond in the order of their
        // random ids), so the last chunk keeps what lies below the new key and the rest starts
        // the next one.
        let chunk = &mut self.chunks[i];
        let cut = if last && at >= CHUNK / 2 {
            at
        } else {
            CHUNK / 2
        };
        let mut upper = Vec::with_capacity(CHUNK);
        upper.extend(chunk.drain(cut..));
        if at < cut {
            chunk.insert(at, key);
        } else {
            upper.insert(at - cut, key);
        }
        self.chunks.insert(i + 1, upper);
        true
    }

    /// Makes room for `key`, which goes at `at` of full chunk `i`, by moving one key into a
    /// neighbour with room (the one before, else the one after); false when neither has any.
    fn spill(&mut self, i: usize, at: usize, key: DueKey) -> bool {
        let room = |j: usize| self.chunks.get(j).is_some_and(|c| c.len() < CHUNK);
        if i > 0 && room(i - 1) {
            if at == 0 {
                self.chunks[i - 1].push(key);
            } else {
                let first = self.chunks[i].remove(0);
                self.chunks[i - 1].push(first);
                self.chunks[i].insert(at - 1, key);
            }
            return true;
        }
        if room(i + 1) {
            if at == CHUNK {
                self.chunks[i + 1].insert(0, key);
            } else {
                let last = self.chunks[i].pop().unwrap_or(key);
                self.chunks[i].insert(at, key);
                self.chunks[i + 1].insert(0, last);
            }
            return true;
        }
        false
    }

    /// Takes `key` out; false when it was not there.
    pub fn remove(&mut self, key: &DueKey) -> bool {
        if self.chunks.is_empty() {
            return false;
        }
        let i = self.chunk_of(key);
        let chunk = &mut self.chunks[i];
        let Ok(at) = chunk.binary_search(key) else {
            return false;
        };
        chunk.remove(at);
        if chunk.is_empty() {
            self.chunks.remove(i);
        } else if chunk.len() < CHUNK / 4 {
            self.join_with_a_neighbour(i);
        }
        true
    }

    /// Moves chunk `i`'s keys into the chunk before or after it when that one has room.
    fn join_with_a_neighbour(&mut self, i: usize) {
        let small = self.chunks[i].len();
        let fits = |j: usize| self.chunks.get(j).is_some_and(|c| c.len() + small <= CHUNK);
        if i > 0 && fits(i - 1) {
            let keys = self.chunks.remove(i).unwrap_or_default();
            self.chunks[i - 1].extend(keys);
        } else if fits(i + 1) {
            let keys = self.chunks.remove(i + 1).unwrap_or_default();
            self.chunks[i].extend(keys);
        }
    }

    /// The keys up to and including `last`, in order.
    pub fn up_to(&self, last: DueKey) -> impl Iterator<Item = &DueKey> {
        (self.chunks.iter())
            .flat_map(|chunk| chunk.iter())
            .take_while(move |key| **key <= last)
    }
}

fn new_chunk(key: DueKey) -> Vec<DueKey> {
    let mut chunk = Vec::with_capacity(CHUNK);
    chunk.push(key);
    chunk
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn key(n: i64) -> DueKey {
        (n, n as u64, 0)
    }

    /// The chunks' invariant: non-empty, within capacity, sorted within and across.
    fn well_formed(set: &DueSet) -> bool {
        let keys: Vec<&DueKey> = set.chunks.iter().flatten().collect();
        set.chunks.iter().all(|c| !c.is_empty() && c.len() <= CHUNK)
            && keys.windows(2).all(|w| w[0] < w[1])
            && keys.len() == set.len()
    }

    #[test]
    fn r_di_8_jobs_appended_in_due_order_fill_their_chunks() {
        let mut set = DueSet::default();
        for n in 0..10_000 {
            set.insert(key(n));
        }
        assert_eq!(set.chunks.len(), 10_000_usize.div_ceil(CHUNK));
        // The lease pattern: the earliest due job leaves the front and comes back past the end.
        for n in 0..5_000 {
            assert!(set.remove(&key(n)));
            set.insert(key(n + 1_000_000));
        }
        assert!(well_formed(&set));
        assert!(set.chunks.len() <= 10_000_usize.div_ceil(CHUNK) + 1);
        let due: Vec<i64> = set.up_to(key(5_009)).map(|k| k.0).collect();
        assert_eq!(due, (5_000..=5_009).collect::<Vec<_>>());
    }

    #[test]
    fn r_di_8_jobs_due_in_the_same_millisecond_in_any_order_still_fill_their_chunks() {
        let mut set = DueSet::default();
        let mut id = 1_u64;
        for n in 0..10_000_i64 {
            id = id.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            set.insert((n / 10, id, 0));
        }
        assert!(well_formed(&set));
        let full = set.len() as f64 / (set.chunks.len() * CHUNK) as f64;
        assert!(full > 0.9, "chunks {:.0} % full", full * 100.0);
    }

    proptest! {
        /// Any mix of inserts and removals leaves the same keys, in the same order, as a
        /// `BTreeSet`, and every page (`up_to`) reads the same.
        #[test]
        fn r_di_8_the_due_set_keeps_what_a_sorted_set_keeps(
            ops in proptest::collection::vec((any::<bool>(), 0..2_000i64), 0..4_000),
        ) {
            let (mut set, mut model) = (DueSet::default(), BTreeSet::new());
            for (add, n) in ops {
                if add {
                    prop_assert_eq!(set.insert(key(n)), model.insert(key(n)));
                } else {
                    prop_assert_eq!(set.remove(&key(n)), model.remove(&key(n)));
                }
            }
            prop_assert!(well_formed(&set));
            prop_assert_eq!(set.is_empty(), model.is_empty());
            let upper = key(1_000);
            let ours: Vec<&DueKey> = set.up_to(upper).collect();
            let theirs: Vec<&DueKey> = model.range(..=upper).collect();
            prop_assert_eq!(ours, theirs);
        }
    }
}
