//! A tenant's kept events by `seq`, as a dense array. The log numbers each tenant's events 1, 2,
//! 3… and expires them oldest first, so slots from the oldest kept seq need no key and no tree
//! node: 40 bytes an event, where a `BTreeMap` filled in ascending order (its nodes half full)
//! took about 90 (issue 17: the events index is the one that grows with retention, not with
//! pending work). The array is cut in chunks so that expiry frees memory from the front and a
//! small tenant holds a small last chunk. A seq not held is a hole.
//!
//! The index also finds a held event by its ce-id, for deduplication (R-IN-6): a hash table of
//! seqs hashed by their event's id, 9 bytes a bucket where a set of the ids themselves took 17
//! (a million pending jobs, issue 17: ~13 MiB). The id is kept once, in the slot.

use std::collections::VecDeque;
use std::hash::BuildHasher;

use hashbrown::HashTable;
use uuid::Uuid;

use super::record::Loc;
use super::state::EventEntry;

/// Slots per chunk (10 KiB of entries). A chunk's `Vec` grows by doubling up to exactly this.
const CHUNK: u64 = 256;

/// A slot no event holds (no record is ever empty).
const HOLE: EventEntry = EventEntry {
    loc: Loc {
        seg: 0,
        offset: 0,
        len: 0,
    },
    id: uuid::Uuid::nil(),
    received_at_ms: 0,
};

fn is_hole(e: &EventEntry) -> bool {
    e.loc.len == 0
}

#[derive(Debug, Default)]
pub(super) struct SeqIndex {
    /// The seq of the first chunk's first slot (a multiple of `CHUNK`).
    base: u64,
    chunks: VecDeque<Vec<EventEntry>>,
    /// Events held (holes not counted).
    held: usize,
    /// The held seqs, hashed by their event's ce-id.
    by_id: HashTable<u64>,
    hasher: foldhash::fast::RandomState,
}

impl SeqIndex {
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.held
    }

    pub fn is_empty(&self) -> bool {
        self.held == 0
    }

    pub fn get(&self, seq: u64) -> Option<&EventEntry> {
        slot_at(&self.chunks, self.base, seq)
    }

    /// Whether an event with ce-id `id` is held.
    pub fn holds_id(&self, id: Uuid) -> bool {
        let (chunks, base) = (&self.chunks, self.base);
        let same = |&seq: &u64| slot_at(chunks, base, seq).is_some_and(|e| e.id == id);
        self.by_id.find(self.hasher.hash_one(id), same).is_some()
    }

    /// Makes `seq` findable by `id`. Called once the slot holds it: a growth of the table
    /// rehashes every seq through its slot.
    fn index_id(&mut self, seq: u64, id: Uuid) {
        let (chunks, base, hasher) = (&self.chunks, self.base, &self.hasher);
        let rehash =
            |&s: &u64| hasher.hash_one(slot_at(chunks, base, s).map_or(Uuid::nil(), |e| e.id));
        self.by_id.insert_unique(hasher.hash_one(id), seq, rehash);
    }

    /// Forgets `seq` under `id` (its slot may already be gone).
    fn unindex_id(&mut self, seq: u64, id: Uuid) {
        let hash = self.hasher.hash_one(id);
        if let Ok(found) = self.by_id.find_entry(hash, |&s| s == seq) {
            found.remove();
        }
    }

    /// Holds `entry` at `seq`; true when the slot held another event (now replaced).
    pub fn insert(&mut self, seq: u64, entry: EventEntry) -> bool {
        let start = seq - seq % CHUNK;
        if self.chunks.is_empty() {
            self.base = start;
        }
        while start < self.base {
            self.chunks.push_front(Vec::new());
            self.base -= CHUNK;
        }
        let chunk = usize::try_from((start - self.base) / CHUNK).unwrap_or(usize::MAX);
        while self.chunks.len() <= chunk {
            self.chunks.push_back(Vec::new());
        }
        let slot = (seq % CHUNK) as usize;
        let slots = &mut self.chunks[chunk];
        if slots.len() <= slot {
            slots.resize(slot, HOLE);
            slots.push(entry);
            self.held += 1;
            self.index_id(seq, entry.id);
            return false;
        }
        let before = std::mem::replace(&mut slots[slot], entry);
        let replaced = !is_hole(&before);
        if replaced {
            self.unindex_id(seq, before.id);
        } else {
            self.held += 1;
        }
        self.index_id(seq, entry.id);
        replaced
    }

    /// Held events from `from` on, ascending.
    pub fn from(&self, from: u64) -> impl Iterator<Item = (u64, &EventEntry)> + '_ {
        let skip = from.saturating_sub(self.base);
        let first_chunk = usize::try_from(skip / CHUNK).unwrap_or(usize::MAX);
        let first_slot = (skip % CHUNK) as usize;
        self.chunks
            .iter()
            .enumerate()
            .skip(first_chunk)
            .flat_map(move |(c, slots)| {
                let begin = if c == first_chunk { first_slot } else { 0 };
                let chunk_base = self.base + c as u64 * CHUNK;
                (slots.iter().enumerate().skip(begin)).map(move |(s, e)| (chunk_base + s as u64, e))
            })
            .filter(|(_, e)| !is_hole(e))
    }

    /// Every held event, ascending.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &EventEntry)> + '_ {
        self.from(0)
    }

    /// Removes every event up to `through`, and their ids from `by_id`; returns them.
    pub fn expire_through(&mut self, through: u64) -> Vec<EventEntry> {
        let gone = self.drop_through(through);
        for &(seq, entry) in &gone {
            self.unindex_id(seq, entry.id);
        }
        gone.into_iter().map(|(_, entry)| entry).collect()
    }

    /// Takes every event up to `through` out of the slots, with its seq.
    fn drop_through(&mut self, through: u64) -> Vec<(u64, EventEntry)> {
        let mut gone = Vec::new();
        while let Some(front) = self.chunks.front_mut() {
            if through < self.base {
                break;
            }
            let base = self.base;
            let held_at =
                |(at, e): (usize, EventEntry)| (!is_hole(&e)).then_some((base + at as u64, e));
            let last_of_front = base + CHUNK - 1;
            if through >= last_of_front {
                gone.extend(front.drain(..).enumerate().filter_map(held_at));
                self.chunks.pop_front();
                self.base += CHUNK;
                continue;
            }
            let upto = ((through - base + 1) as usize).min(front.len());
            let taken = front[..upto].iter_mut().map(|e| std::mem::replace(e, HOLE));
            gone.extend(taken.enumerate().filter_map(held_at));
            break;
        }
        self.held -= gone.len();
        if self.held == 0 {
            self.chunks.clear();
        }
        gone
    }
}

/// The event held at `seq` in `chunks` starting at `base`.
fn slot_at(chunks: &VecDeque<Vec<EventEntry>>, base: u64, seq: u64) -> Option<&EventEntry> {
    let off = seq.checked_sub(base)?;
    let chunk = usize::try_from(off / CHUNK).ok()?;
    chunks
        .get(chunk)?
        .get((off % CHUNK) as usize)
        .filter(|e| !is_hole(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(n: u64) -> EventEntry {
        EventEntry {
            loc: Loc {
                seg: 1,
                offset: n,
                len: 10,
            },
            id: uuid::Uuid::from_u128(u128::from(n)),
            received_at_ms: n as i64,
        }
    }

    fn seqs<'a>(it: impl Iterator<Item = (u64, &'a EventEntry)>) -> Vec<u64> {
        it.map(|(s, e)| {
            assert_eq!(e.loc.offset, s, "the entry at its own seq");
            s
        })
        .collect()
    }

    #[test]
    fn r_op_5_events_by_seq_read_from_a_point_and_expire_oldest_first() {
        let mut index = SeqIndex::default();
        for seq in 1..=1000 {
            assert!(!index.insert(seq, entry(seq)));
        }
        assert_eq!(index.len(), 1000);
        assert_eq!(index.get(0).map(|e| e.loc.offset), None);
        assert_eq!(index.get(700).map(|e| e.loc.offset), Some(700));
        assert_eq!(seqs(index.from(998)), vec![998, 999, 1000]);
        assert_eq!(seqs(index.from(1001)), Vec::<u64>::new());
        let gone = index.expire_through(600);
        assert_eq!(gone.len(), 600);
        assert_eq!(gone.last().map(|e| e.loc.offset), Some(600));
        assert_eq!(index.len(), 400);
        assert!(index.get(600).is_none());
        assert_eq!(seqs(index.iter()).first(), Some(&601));
        assert_eq!(
            seqs(index.from(5)).len(),
            400,
            "from before the oldest kept"
        );
        assert_eq!(index.expire_through(5000).len(), 400);
        assert!(index.is_empty());
        assert!(index.chunks.is_empty(), "nothing left allocated");
    }

    /// An event is found by its ce-id while it is held: not before, not after it expires, and
    /// a replaced slot answers for its new id only (R-IN-6).
    #[test]
    fn r_in_6_a_held_event_is_found_by_its_ce_id_until_it_expires() {
        let mut index = SeqIndex::default();
        let id = |n: u64| uuid::Uuid::from_u128(u128::from(n));
        assert!(!index.holds_id(id(5)));
        for seq in 1..=2000 {
            index.insert(seq, entry(seq));
        }
        assert!((1..=2000).all(|n| index.holds_id(id(n))), "every held id");
        assert!(!index.holds_id(id(2001)));
        let mut other = entry(7);
        other.id = id(9_999);
        assert!(index.insert(7, other));
        assert!(!index.holds_id(id(7)) && index.holds_id(id(9_999)));
        index.expire_through(1000);
        assert!(!index.holds_id(id(9_999)) && !index.holds_id(id(1000)));
        assert!((1001..=2000).all(|n| index.holds_id(id(n))));
        assert_eq!(
            index.by_id.len(),
            1000,
            "one seq per held event, none left behind"
        );
        index.expire_through(5000);
        assert!(index.by_id.is_empty());
    }

    #[test]
    fn r_op_5_holes_and_out_of_order_seqs_are_kept_apart() {
        let mut index = SeqIndex::default();
        index.insert(700, entry(700));
        index.insert(3, entry(3));
        index.insert(256, entry(256));
        assert!(index.insert(3, entry(3)), "a replaced slot");
        assert_eq!(index.len(), 3);
        assert_eq!(seqs(index.iter()), vec![3, 256, 700]);
        assert_eq!(seqs(index.from(4)), vec![256, 700]);
        assert!(index.get(255).is_none() && index.get(701).is_none());
        assert_eq!(index.expire_through(256).len(), 2);
        assert_eq!(seqs(index.iter()), vec![700]);
    }
}
