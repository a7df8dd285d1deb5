//! Which delivery lanes each shard of this engine pages (issue 18, DESIGN invariant 2).
//!
//! Two numberings:
//! - **By shard** (the embedded store, or CQL without Kafka): a lane is a shard; shard `s` pages
//!   every lane `l < MAX_LANES` with `l % shards == s`. One process, or engines that share the
//!   lanes by who holds them first.
//! - **By partition** (CQL with Kafka): a lane is a Kafka partition (`partition_lane`); the jobs
//!   of an event belong to the partition it came from. A shard pages the lanes of the partitions
//!   the consumer group assigned to it (`ingest::assignment` publishes it here on every
//!   rebalance), so the engines share delivery as they share ingest. The store's lane hold (an LWT
//!   lease) stays the fence: one engine pages a lane at a time, whatever an assignment says.
//!   Lanes nobody is assigned — a topic no engine reads any more, an HTTP-only source, the hub's
//!   own events — are *strays*: an engine adopts one whose hold lapsed `STRAY_GRACE_MS` ago and
//!   keeps it until its queues are empty or an engine assigned its partition asks for it.
//!
//! Pure bookkeeping: the rebalance callback, the stray survey and the lanes call it; I/O is theirs.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use crate::ingest::router::shard_for;
use crate::store::Lane;

/// Most lanes numbered by shard; shard `s` pages every lane `l` with `l % shards == s`.
pub const MAX_LANES: Lane = 64;

/// How long a lane's hold must have lapsed before another engine adopts it as a stray: an
/// engine that was assigned its partition takes it first (within a page of the lapse). A dead
/// static member's partitions stay assigned to it for its whole session (45 s by default); its
/// lanes are delivered again a hold (10 s) plus this grace plus a survey after the kill — about
/// 22 s, inside issue 18's 30 s.
pub const STRAY_GRACE_MS: i64 = 10_000;

/// How a job's lane is numbered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Numbering {
    ByShard,
    ByPartition,
}

impl Numbering {
    /// As the operator view names it.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Numbering::ByShard => "by_shard",
            Numbering::ByPartition => "by_partition",
        }
    }
}

/// The lane of a Kafka partition: 15 bits of the topic's hash above the partition's 16 bits
/// (so it stays a positive CQL `int`). Two topics whose hashes collide share lanes: a lane then
/// carries both partitions' jobs and is delivered by whichever engine holds it — even, not wrong.
#[must_use]
pub fn partition_lane(topic: &str, partition: i32) -> Lane {
    let mut h: u32 = 0x811c_9dc5;
    for b in topic.bytes() {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    ((h & 0x7fff) << 16) | (partition.unsigned_abs() & 0xffff)
}

/// Why a shard pages a lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owned {
    /// The group assigned this engine the partition.
    Assigned { topic: String, partition: i32 },
    /// Adopted: nobody held it (see the module doc).
    Stray { adopted_at_ms: i64 },
    /// Numbered by shard.
    Shard,
}

impl Owned {
    /// As the operator view names it (`how`).
    #[must_use]
    pub fn how(&self) -> &'static str {
        match self {
            Owned::Assigned { .. } => "assigned",
            Owned::Stray { .. } => "stray",
            Owned::Shard => "shard",
        }
    }
}

/// One lane this engine pages (`ownership_report` makes the operator view of it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneOwned {
    pub lane: Lane,
    pub shard: usize,
    pub owned: Owned,
}

#[derive(Debug, Default)]
struct Held {
    /// Partition lanes by lane: (topic, partition, shard).
    assigned: BTreeMap<Lane, (String, i32, usize)>,
    strays: BTreeMap<Lane, i64>,
    /// Changes of the assignment seen, for the operator view.
    generation: u64,
}

/// This engine's lanes.
#[derive(Debug)]
pub struct Ownership {
    numbering: Numbering,
    shards: usize,
    held: Mutex<Held>,
}

impl Ownership {
    #[must_use]
    pub fn new(numbering: Numbering, shards: usize) -> Self {
        Self {
            numbering,
            shards: shards.max(1),
            held: Mutex::new(Held::default()),
        }
    }

    #[must_use]
    pub fn numbering(&self) -> Numbering {
        self.numbering
    }

    /// The lane of the jobs of a unit (a Kafka partition, or an HTTP unit named like one).
    #[must_use]
    pub fn lane_of(&self, topic: &str, partition: i32) -> Lane {
        match self.numbering {
            Numbering::ByShard => shard_for(topic, partition, self.shards) as Lane,
            Numbering::ByPartition => partition_lane(topic, partition),
        }
    }

    /// The shard that pages `lane` in this engine (where a nudge for it goes).
    #[must_use]
    pub fn shard_of(&self, lane: Lane) -> usize {
        if self.numbering == Numbering::ByPartition {
            if let Some((_, _, shard)) = self.lock().assigned.get(&lane) {
                return *shard;
            }
        }
        lane as usize % self.shards
    }

    /// The consumer group's assignment of this engine, as the consumer thread reads it. True
    /// when it changed.
    pub fn set_assignment(&self, partitions: &[(String, i32)]) -> bool {
        if self.numbering != Numbering::ByPartition {
            return false;
        }
        let assigned: BTreeMap<Lane, (String, i32, usize)> = partitions
            .iter()
            .map(|(topic, partition)| {
                let shard = shard_for(topic, *partition, self.shards);
                (
                    partition_lane(topic, *partition),
                    (topic.clone(), *partition, shard),
                )
            })
            .collect();
        let mut held = self.lock();
        if held.assigned == assigned {
            return false;
        }
        // A stray now assigned here is paged as assigned, by the shard that ingests it (a
        // stray's shard may be another: one shard pages a lane, never two).
        held.strays.retain(|l, _| !assigned.contains_key(l));
        held.assigned = assigned;
        held.generation += 1;
        true
    }

    /// The lanes `shard` pages now, in order.
    #[must_use]
    pub fn lanes_of(&self, shard: usize) -> Vec<Lane> {
        match self.numbering {
            Numbering::ByShard => (0..MAX_LANES)
                .filter(|l| *l as usize % self.shards == shard)
                .collect(),
            Numbering::ByPartition => {
                let held = self.lock();
                let mut lanes: BTreeSet<Lane> = held
                    .assigned
                    .iter()
                    .filter(|(_, (_, _, s))| *s == shard)
                    .map(|(l, _)| *l)
                    .collect();
                lanes.extend(held.strays.keys().filter(|l| {
                    **l as usize % self.shards == shard && !held.assigned.contains_key(l)
                }));
                lanes.into_iter().collect()
            }
        }
    }

    /// Assigned lanes and strays, for the survey.
    #[must_use]
    pub fn survey_input(&self) -> (Vec<Lane>, Vec<Lane>) {
        let held = self.lock();
        (
            held.assigned.keys().copied().collect(),
            held.strays.keys().copied().collect(),
        )
    }

    /// What the survey found: `adopt` lanes nobody holds, `drop` strays another engine is
    /// assigned or that have no queue left. A stray that became assigned is simply assigned.
    pub fn apply_survey(&self, adopt: &[Lane], drop: &[Lane], now_ms: i64) {
        let mut held = self.lock();
        for lane in drop {
            held.strays.remove(lane);
        }
        for lane in adopt {
            if !held.assigned.contains_key(lane) {
                held.strays.entry(*lane).or_insert(now_ms);
            }
        }
        let Held {
            assigned, strays, ..
        } = &mut *held;
        strays.retain(|l, _| !assigned.contains_key(l));
    }

    /// Every lane of this engine, for the operator view, and the assignment's generation.
    #[must_use]
    pub fn snapshot(&self) -> (u64, Vec<LaneOwned>) {
        if self.numbering == Numbering::ByShard {
            let lanes = (0..MAX_LANES)
                .map(|lane| LaneOwned {
                    lane,
                    shard: lane as usize % self.shards,
                    owned: Owned::Shard,
                })
                .collect();
            return (0, lanes);
        }
        let held = self.lock();
        let mut lanes: Vec<LaneOwned> = held
            .assigned
            .iter()
            .map(|(lane, (topic, partition, shard))| LaneOwned {
                lane: *lane,
                shard: *shard,
                owned: Owned::Assigned {
                    topic: topic.clone(),
                    partition: *partition,
                },
            })
            .collect();
        lanes.extend(held.strays.iter().map(|(lane, at)| LaneOwned {
            lane: *lane,
            shard: *lane as usize % self.shards,
            owned: Owned::Stray { adopted_at_ms: *at },
        }));
        (held.generation, lanes)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        // Plain maps, left whole by every writer: a poisoned lock still holds good data.
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assigned(list: &[(&str, i32)]) -> Vec<(String, i32)> {
        list.iter().map(|(t, p)| ((*t).to_owned(), *p)).collect()
    }

    #[test]
    fn r_op_1_by_shard_every_lane_has_one_shard() {
        let o = Ownership::new(Numbering::ByShard, 2);
        let (a, b) = (o.lanes_of(0), o.lanes_of(1));
        assert_eq!(a.len() + b.len(), MAX_LANES as usize);
        assert!(a.iter().all(|l| !b.contains(l)));
        assert!(
            !o.set_assignment(&assigned(&[("t", 0)])),
            "no assignment by shard"
        );
        let lane = o.lane_of("lerian.streaming.lender", 3);
        assert!(o.lanes_of(o.shard_of(lane)).contains(&lane));
    }

    #[test]
    fn r_op_1_a_partition_is_one_lane_paged_by_the_shard_that_ingests_it() {
        let o = Ownership::new(Numbering::ByPartition, 2);
        let topic = "lerian.streaming.lender";
        let lanes: BTreeSet<Lane> = (0..12).map(|p| partition_lane(topic, p)).collect();
        assert_eq!(lanes.len(), 12, "one lane per partition");
        assert!(lanes.iter().all(|l| i32::try_from(*l).is_ok()), "a CQL int");
        assert_ne!(
            partition_lane("lerian.streaming.hub", 0),
            partition_lane(topic, 0)
        );

        assert!(
            o.lanes_of(0).is_empty() && o.lanes_of(1).is_empty(),
            "nothing assigned"
        );
        assert!(o.set_assignment(&assigned(&[(topic, 0), (topic, 1), (topic, 5)])));
        assert!(!o.set_assignment(&assigned(&[(topic, 0), (topic, 1), (topic, 5)])));
        for p in [0, 1, 5] {
            let lane = partition_lane(topic, p);
            let shard = shard_for(topic, p, 2);
            assert_eq!(o.shard_of(lane), shard);
            assert!(o.lanes_of(shard).contains(&lane));
            assert!(!o.lanes_of(1 - shard).contains(&lane));
        }
        // Revoked: no shard pages it any more.
        o.set_assignment(&assigned(&[(topic, 0)]));
        let gone = partition_lane(topic, 5);
        assert!(!o.lanes_of(0).contains(&gone) && !o.lanes_of(1).contains(&gone));
        assert_eq!(o.snapshot().0, 2, "two changes of the assignment");
    }

    #[test]
    fn r_op_1_strays_are_adopted_dropped_and_give_way_to_an_assignment() {
        let o = Ownership::new(Numbering::ByPartition, 2);
        let stray = partition_lane("http:hub", 0);
        o.apply_survey(&[stray], &[], 100);
        assert!(o.lanes_of(stray as usize % 2).contains(&stray));
        assert_eq!(o.snapshot().1[0].owned, Owned::Stray { adopted_at_ms: 100 });
        o.apply_survey(&[stray], &[], 200);
        assert_eq!(
            o.snapshot().1[0].owned,
            Owned::Stray { adopted_at_ms: 100 },
            "adopted once"
        );
        o.apply_survey(&[], &[stray], 300);
        assert!(o.snapshot().1.is_empty(), "dropped");

        // A stray whose partition is then assigned here is paged as assigned, once.
        let topic = "lerian.streaming.lender";
        let lane = partition_lane(topic, 2);
        o.apply_survey(&[lane], &[], 400);
        o.set_assignment(&assigned(&[(topic, 2)]));
        o.apply_survey(&[], &[], 500);
        let (_, lanes) = o.snapshot();
        assert_eq!(lanes.len(), 1);
        assert!(matches!(lanes[0].owned, Owned::Assigned { .. }));
        let all: Vec<Lane> = o.lanes_of(0).into_iter().chain(o.lanes_of(1)).collect();
        assert_eq!(all, vec![lane]);
    }
}
