//! Writes of the log store: each decides its changes from the indexes, pushes them to the
//! group's frame and applies them to the indexes at once (so later work in the same group sees
//! them). The committer makes the frame durable before anyone hears of it.

use uuid::Uuid;

use super::record::{Change, Frame, Loc, Record};
use super::segments::{read_record, Segments};
use super::state::{EventEntry, State};
use crate::store::{
    BatchOutcome, DlqObservation, Fence, InboxEvent, IngestBatch, JobRecord, StoreError,
    StoredEventRef, UnitId,
};

/// One group's view while it is built: the indexes, the frame, the segments to read from.
pub(super) struct Tx<'a> {
    pub state: &'a mut State,
    pub frame: &'a mut Frame,
    pub segments: &'a Segments,
    /// Segments whose content this group carried forward: removed once its frame landed.
    pub spent: Vec<u32>,
}

impl Tx<'_> {
    /// Records `change` and applies it.
    pub fn change(&mut self, change: Change) {
        let loc = self.frame.push_change(&change);
        self.state.apply(loc, change);
    }

    fn event(&mut self, seq: u64, event: &InboxEvent) {
        let loc = self.frame.push_event(&StoredEventRef { seq, event });
        let entry = EventEntry {
            loc,
            id: event.id,
            received_at_ms: event.received_at_ms,
        };
        self.state.index_event(&event.tenant, seq, entry);
    }

    /// Reads a record, from this group's frame or from its segment.
    pub fn read(&self, loc: Loc) -> Result<Record, StoreError> {
        if let Some(bytes) = self.frame.record(loc) {
            return Record::decode(bytes);
        }
        let file = self
            .segments
            .reader(loc)
            .ok_or_else(|| StoreError::Corrupt(format!("log segment {} is gone", loc.seg)))?;
        read_record(&file, loc)
    }

    /// Where a tenant's stored event at `seq` is, with its segment's file, if it is still kept.
    /// An event of this group's frame is read there once the frame landed (the reader reads
    /// after the group's answer).
    pub fn event_at(
        &self,
        tenant: &str,
        seq: u64,
    ) -> Result<Option<(Loc, std::sync::Arc<std::fs::File>)>, StoreError> {
        let Some(entry) = self.state.events.get(tenant).and_then(|e| e.get(seq)) else {
            return Ok(None);
        };
        let file = self
            .segments
            .reader(entry.loc)
            .ok_or_else(|| StoreError::Corrupt(format!("log segment {} is gone", entry.loc.seg)))?;
        Ok(Some((entry.loc, file)))
    }
}

/// Takes a unit for a new generation.
pub(super) fn claim(tx: &mut Tx<'_>, unit: &UnitId) -> (Fence, Option<i64>) {
    let key = (unit.topic.clone(), unit.partition);
    let (generation, next) = tx.state.units.get(&key).copied().unwrap_or((0, -1));
    tx.change(Change::Unit {
        topic: unit.topic.clone(),
        partition: unit.partition,
        generation: generation + 1,
        next,
    });
    let fence = Fence {
        generation: generation + 1,
    };
    (fence, (next >= 0).then_some(next))
}

/// One unit's batch: dedup (first write wins), a `seq` per new event, its jobs (R-DI-1),
/// quarantine rows once per Kafka position, the unit's next offset. Refused whole with `Fenced`
/// when `fence` is stale.
pub(super) fn ingest(
    tx: &mut Tx<'_>,
    unit: &UnitId,
    fence: Fence,
    batch: &IngestBatch,
) -> Result<BatchOutcome, StoreError> {
    let key = (unit.topic.clone(), unit.partition);
    let (current, _) = tx.state.units.get(&key).copied().unwrap_or((0, -1));
    fence.check(unit, current)?;
    let mut outcome = BatchOutcome {
        jobs_leased: batch.lease_until_ms.is_some(),
        ..BatchOutcome::default()
    };
    for (i, event) in batch.events.iter().enumerate() {
        if tx.state.has_event(&event.tenant, event.id) {
            outcome.duplicates.push((event.tenant.clone(), event.id));
            continue;
        }
        let seq = tx.state.head(&event.tenant) + 1;
        tx.event(seq, event);
        for sub in batch.matches.get(i).map_or(&[][..], |m| m.0.as_slice()) {
            let job =
                JobRecord::created(event, seq, *sub, batch.lane).leased_until(batch.lease_until_ms);
            if !tx.state.jobs.contains_key(job.id) {
                let leased = batch.lease_until_ms.is_some();
                tx.change(Change::Job { job, leased });
            }
        }
        outcome.stored.push((event.tenant.clone(), event.id, seq));
    }
    for record in &batch.quarantined {
        // A Kafka record replayed after a crash is quarantined once; HTTP records (offset -1)
        // have no position to recognise them by.
        let position = (record.topic.clone(), record.partition, record.offset);
        if record.offset >= 0 && tx.state.quarantine_seen.contains_key(&position) {
            continue;
        }
        let number = tx.state.next_quarantine;
        tx.change(Change::Quarantine {
            number,
            record: record.clone(),
        });
        outcome.quarantined += 1;
    }
    if let (Some(next), false) = (batch.next_offset, fence == Fence::UNFENCED) {
        tx.change(Change::Unit {
            topic: unit.topic.clone(),
            partition: unit.partition,
            generation: current,
            next,
        });
    }
    Ok(outcome)
}

/// Moves a pull position from `from` to `to` if it is still `from`.
pub(super) fn advance_pull(
    tx: &mut Tx<'_>,
    tenant: &str,
    subscription: Uuid,
    from: u64,
    to: u64,
) -> bool {
    let key = (tenant.to_owned(), subscription);
    let now = tx.state.pulls.get(&key).copied().unwrap_or(0);
    if now == from {
        tx.change(Change::Pull {
            tenant: key.0,
            subscription,
            position: to,
        });
    }
    now == from
}

/// Records DLQ observations, once per Kafka position.
pub(super) fn record_dlq(tx: &mut Tx<'_>, observations: Vec<DlqObservation>) {
    for observation in observations {
        let position = (
            observation.topic.clone(),
            observation.partition,
            observation.offset,
        );
        if tx.state.dlq_seen.contains_key(&position) {
            continue;
        }
        let number = tx.state.next_dlq;
        tx.change(Change::Dlq {
            number,
            observation,
        });
    }
}
