//! What the log holds: frames, each one group commit, each a run of records.
//!
//! A frame is `[u32 body length][u64 xxh3 of the body][body]`; the body is records, each
//! `[u32 length][u8 kind][postcard value]`. A frame is written whole with one `fdatasync`, and a
//! frame whose length or checksum does not hold (a crash tore it) is dropped whole on replay: a
//! group's changes land together or not at all, as one redb transaction did.
//!
//! Events (the bulk) are kind [`EVENT`], encoded straight from the batch; every other change is
//! one [`Change`].

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::store::codec::decode;
use crate::store::{
    DeadLetter, DeliveryStats, DlqObservation, JobRecord, QuarantineRecord, StoreError,
    StoredEvent, StoredEventRef,
};

/// Bytes before a frame's body: its length and checksum.
pub(super) const FRAME_HEADER: usize = 12;
/// Bytes before a record's kind: its length.
const RECORD_HEADER: usize = 4;

/// A stored `StoredEvent`.
const EVENT: u8 = 0;
/// A stored [`Change`].
const CHANGE: u8 = 1;

/// Where a record lies: its segment, the offset of its kind byte, and its length from there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Loc {
    pub seg: u32,
    pub offset: u64,
    pub len: u32,
}

impl Loc {
    /// Where the record ends in its segment.
    pub fn end(&self) -> u64 {
        self.offset + u64::from(self.len)
    }
}

/// Every change but an event's arrival. Replay applies them in log order; each says the whole
/// new state of what it names, so applying the last one is enough.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) enum Change {
    /// A unit's fence and durable next offset (-1: none yet).
    Unit {
        topic: String,
        partition: i32,
        generation: u64,
        next: i64,
    },
    /// A tenant's last `seq`, kept when its events are gone.
    Head {
        tenant: String,
        seq: u64,
    },
    /// A job's whole state; `leased` while an attempt is under way.
    Job {
        job: JobRecord,
        leased: bool,
    },
    /// A job delivered, cancelled or buried.
    JobGone {
        id: u128,
    },
    Dead(DeadLetter),
    DeadGone {
        tenant: String,
        subscription: Uuid,
        job: u128,
    },
    Stats {
        tenant: String,
        subscription: Uuid,
        stats: DeliveryStats,
    },
    Pull {
        tenant: String,
        subscription: Uuid,
        position: u64,
    },
    Quarantine {
        number: u64,
        record: QuarantineRecord,
    },
    Dlq {
        number: u64,
        observation: DlqObservation,
    },
    /// The next quarantine and DLQ numbers, kept when their rows are gone.
    Counters {
        quarantine: u64,
        dlq: u64,
    },
    /// A tenant's events up to `through` expired (R-OP-5).
    EventsExpired {
        tenant: String,
        through: u64,
    },
    /// A dedup mark that outlives its event, until `ends_at_ms`.
    DedupMark {
        tenant: String,
        id: u128,
        seq: u64,
        ends_at_ms: i64,
    },
    DedupGone {
        tenant: String,
        id: u128,
        ends_at_ms: i64,
    },
    QuarantineExpired {
        through: u64,
    },
    DlqExpired {
        through: u64,
    },
    /// A delivery step's change to a subscription's statistics: its totals and streak as they
    /// now are, and in `stats.recent` only the outcomes the step adds to the recent ones. The
    /// whole recent list went with every step before (issue 17: twenty outcomes serialized per
    /// settled job, ~4 % of the hub's cycles under a backlog); replay applies these in order on
    /// top of the whole `Stats` that starts every segment (`retention::snapshot`), so the state
    /// rebuilt is the same. Last of the variants: a log written before it still reads.
    StatsStep {
        tenant: String,
        subscription: Uuid,
        stats: DeliveryStats,
    },
}

/// A record read back.
#[derive(Debug)]
pub(super) enum Record {
    Event(StoredEvent),
    Change(Change),
}

impl Record {
    /// Decodes a record from its kind byte on.
    pub(super) fn decode(bytes: &[u8]) -> Result<Self, StoreError> {
        match bytes.split_first() {
            Some((&EVENT, body)) => Ok(Record::Event(decode(body)?)),
            Some((&CHANGE, body)) => Ok(Record::Change(decode(body)?)),
            _ => Err(StoreError::Corrupt("unknown log record kind".into())),
        }
    }

    /// The event an event index pointed at (anything else is corruption).
    pub(super) fn into_event(self) -> Result<StoredEvent, StoreError> {
        match self {
            Record::Event(event) => Ok(event),
            Record::Change(_) => Err(StoreError::Corrupt(
                "an event index points at a change".into(),
            )),
        }
    }

    /// The change an index of changes pointed at (anything else is corruption).
    pub(super) fn into_change(self) -> Result<Change, StoreError> {
        match self {
            Record::Change(change) => Ok(change),
            Record::Event(_) => Err(StoreError::Corrupt(
                "a change index points at an event".into(),
            )),
        }
    }
}

/// A frame being built at a known place: every record pushed knows its `Loc` at once.
pub(super) struct Frame {
    bytes: Vec<u8>,
    seg: u32,
    /// Where the frame starts in its segment.
    at: u64,
}

impl Frame {
    #[cfg(test)]
    pub(super) fn new(seg: u32, at: u64) -> Self {
        Self::in_buffer(Vec::new(), seg, at)
    }

    /// A frame built in `buffer` (its content dropped, its room kept): the committer hands each
    /// group the last one's buffer, so that a large group does not grow a fresh one by doubling,
    /// copying and zeroing new pages each time.
    pub(super) fn in_buffer(mut buffer: Vec<u8>, seg: u32, at: u64) -> Self {
        buffer.clear();
        buffer.resize(FRAME_HEADER, 0);
        Self {
            bytes: buffer,
            seg,
            at,
        }
    }

    /// The frame's buffer, for the next frame.
    pub(super) fn into_buffer(self) -> Vec<u8> {
        self.bytes
    }

    pub(super) fn is_empty(&self) -> bool {
        self.bytes.len() == FRAME_HEADER
    }

    pub(super) fn push_event(&mut self, event: &StoredEventRef<'_>) -> Loc {
        self.push_with(EVENT, |buf| postcard::to_extend(event, buf))
    }

    pub(super) fn push_change(&mut self, change: &Change) -> Loc {
        self.push_with(CHANGE, |buf| postcard::to_extend(change, buf))
    }

    fn push_with(
        &mut self,
        kind: u8,
        encode: impl FnOnce(Vec<u8>) -> postcard::Result<Vec<u8>>,
    ) -> Loc {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(&[0; RECORD_HEADER]);
        self.bytes.push(kind);
        // Encoding our own plain values into a Vec cannot fail; an empty body would fail to
        // decode on replay rather than pass silently.
        self.bytes = encode(std::mem::take(&mut self.bytes)).unwrap_or_else(|_| {
            tracing::error!("log record failed to encode");
            Vec::new()
        });
        let len = (self.bytes.len() - start - RECORD_HEADER) as u32;
        self.bytes[start..start + RECORD_HEADER].copy_from_slice(&len.to_le_bytes());
        Loc {
            seg: self.seg,
            offset: self.at + (start + RECORD_HEADER) as u64,
            len,
        }
    }

    /// A record pushed to this frame (kind byte on), if `loc` lies in it.
    pub(super) fn record(&self, loc: Loc) -> Option<&[u8]> {
        if loc.seg != self.seg || loc.offset < self.at {
            return None;
        }
        let start = (loc.offset - self.at) as usize;
        self.bytes.get(start..start + loc.len as usize)
    }

    /// The frame's bytes, header filled in.
    pub(super) fn seal(&mut self) -> &[u8] {
        let body_len = (self.bytes.len() - FRAME_HEADER) as u32;
        let sum = xxhash_rust::xxh3::xxh3_64(&self.bytes[FRAME_HEADER..]);
        self.bytes[..4].copy_from_slice(&body_len.to_le_bytes());
        self.bytes[4..FRAME_HEADER].copy_from_slice(&sum.to_le_bytes());
        &self.bytes
    }
}

/// Reads the frames of a segment's bytes in order, with each record's `Loc`; stops at the first
/// frame that is cut short or fails its checksum and says where the good frames end.
pub(super) fn frames(seg: u32, bytes: &[u8]) -> (Vec<(Loc, &[u8])>, u64) {
    let mut records = Vec::new();
    let mut at = 0usize;
    while let Some(body) = frame_at(bytes, at) {
        let mut pos = 0usize;
        while pos + RECORD_HEADER <= body.len() {
            let len = u32::from_le_bytes(body[pos..pos + 4].try_into().unwrap_or_default());
            let start = pos + RECORD_HEADER;
            let Some(record) = body.get(start..start + len as usize) else {
                break;
            };
            let loc = Loc {
                seg,
                offset: (at + FRAME_HEADER + start) as u64,
                len,
            };
            records.push((loc, record));
            pos = start + len as usize;
        }
        at += FRAME_HEADER + body.len();
    }
    (records, at as u64)
}

/// The body of the whole, intact frame at `at`, if there is one.
fn frame_at(bytes: &[u8], at: usize) -> Option<&[u8]> {
    let header = bytes.get(at..at + FRAME_HEADER)?;
    let len = u32::from_le_bytes(header[..4].try_into().ok()?) as usize;
    let sum = u64::from_le_bytes(header[4..].try_into().ok()?);
    let body = bytes.get(at + FRAME_HEADER..at + FRAME_HEADER + len)?;
    (len > 0 && xxhash_rust::xxh3::xxh3_64(body) == sum).then_some(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(n: u64) -> Change {
        Change::Head {
            tenant: "t".into(),
            seq: n,
        }
    }

    #[test]
    fn r_in_7_records_read_back_where_the_frame_said_they_lie() {
        let mut frame = Frame::new(3, 100);
        let a = frame.push_change(&change(1));
        let b = frame.push_change(&change(2));
        let mut file = vec![7u8; 100];
        file.extend_from_slice(frame.seal());
        let read = |loc: Loc| &file[loc.offset as usize..loc.offset as usize + loc.len as usize];
        assert!(matches!(
            Record::decode(read(b)),
            Ok(Record::Change(Change::Head { seq: 2, .. }))
        ));
        let (records, end) = frames(3, &file[100..]);
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].0.offset + 100, a.offset);
        assert_eq!(end as usize, file.len() - 100);
    }

    #[test]
    fn r_in_7_a_torn_or_damaged_frame_is_dropped_whole() {
        let mut first = Frame::new(0, 0);
        first.push_change(&change(1));
        let mut bytes = first.seal().to_vec();
        let good_end = bytes.len() as u64;
        let mut second = Frame::new(0, good_end);
        second.push_change(&change(2));
        second.push_change(&change(3));
        let sealed = second.seal().to_vec();

        let mut torn = bytes.clone();
        torn.extend_from_slice(&sealed[..sealed.len() - 3]);
        let (records, end) = frames(0, &torn);
        assert_eq!((records.len(), end), (1, good_end));

        bytes.extend_from_slice(&sealed);
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        let (records, end) = frames(0, &bytes);
        assert_eq!((records.len(), end), (1, good_end));
    }
}
