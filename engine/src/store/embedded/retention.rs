//! Retention of the embedded store (R-OP-5): rows past their window are deleted in bounded
//! chunks, each chunk its own write transaction, so a pass never holds redb's one writer long
//! enough to stall ingest.
//!
//! What is ordered by age is read from its oldest end and stops at the first young row: a
//! tenant's events by `seq`, quarantine and DLQ rows by number. Dedup marks outlive their events
//! when the dedup window is longer than the retention; they move to `DEDUP_EXPIRY`, ordered by the
//! time they end, as their events go. Dead letters have no age order: a cursor walks them a chunk
//! per pass and wraps around.

use redb::{Database, ReadableTable};

use super::tables::*;
use super::unavailable;
use crate::store::codec::decode;
use crate::store::{
    DeadLetter, DlqObservation, Expired, QuarantineRecord, Retention, StoreError, StoredEvent,
};

/// Rows deleted per write transaction.
const CHUNK: usize = 1_000;
/// Dead letters looked at per pass.
const DEAD_LETTER_WALK: usize = 5_000;

/// Where the dead-letter walk goes on from: the key after the last one looked at.
pub type DeadLetterCursor = Option<(String, u128, u128)>;

/// One retention pass at `now_ms`.
pub fn expire(
    db: &Database,
    retention: Retention,
    now_ms: i64,
    cursor: &mut DeadLetterCursor,
) -> Result<Expired, StoreError> {
    let horizon = |window_s: u32| now_ms.saturating_sub(i64::from(window_s) * 1_000);
    let mut expired = Expired::default();
    for tenant in tenants(db)? {
        while expire_events(
            db,
            &tenant,
            horizon(retention.events_s),
            retention,
            &mut expired,
        )? == CHUNK
        {}
    }
    while expire_dedup_marks(db, now_ms, &mut expired)? == CHUNK {}
    while expire_quarantine(db, horizon(retention.forensics_s), &mut expired)? == CHUNK {}
    while expire_dlq(db, horizon(retention.forensics_s), &mut expired)? == CHUNK {}
    expire_dead_letters(db, horizon(retention.events_s), cursor, &mut expired)?;
    Ok(expired)
}

fn tenants(db: &Database) -> Result<Vec<String>, StoreError> {
    let txn = db.begin_read().map_err(unavailable)?;
    let table = txn.open_table(TENANT_SEQ).map_err(unavailable)?;
    let mut out = Vec::new();
    for row in table.iter().map_err(unavailable)? {
        out.push(row.map_err(unavailable)?.0.value().to_owned());
    }
    Ok(out)
}

/// Deletes up to a chunk of `tenant`'s oldest events received before `horizon`, with their dedup
/// marks (or, with a longer dedup window, schedules the marks' end). Returns how many.
fn expire_events(
    db: &Database,
    tenant: &str,
    horizon: i64,
    retention: Retention,
    expired: &mut Expired,
) -> Result<usize, StoreError> {
    let txn = db.begin_write().map_err(unavailable)?;
    let removed = {
        let mut events = txn.open_table(EVENTS).map_err(unavailable)?;
        let mut dedup = txn.open_table(DEDUP).map_err(unavailable)?;
        let mut ends = txn.open_table(DEDUP_EXPIRY).map_err(unavailable)?;
        let mut old = Vec::new();
        for row in events
            .range((tenant, 0)..=(tenant, u64::MAX))
            .map_err(unavailable)?
            .take(CHUNK)
        {
            let (key, value) = row.map_err(unavailable)?;
            let stored: StoredEvent = decode(value.value())?;
            if stored.event.received_at_ms >= horizon {
                break;
            }
            old.push((
                key.value().1,
                stored.event.id.as_u128(),
                stored.event.received_at_ms,
            ));
        }
        let mark_outlives_event = retention.dedup_s > retention.events_s;
        for (seq, id, received_at_ms) in &old {
            events.remove((tenant, *seq)).map_err(unavailable)?;
            if mark_outlives_event {
                let ends_at = received_at_ms.saturating_add(i64::from(retention.dedup_s) * 1_000);
                ends.insert((ends_at.max(0) as u64, tenant, *id), ())
                    .map_err(unavailable)?;
            } else if dedup.remove((tenant, *id)).map_err(unavailable)?.is_some() {
                expired.dedup_marks += 1;
            }
        }
        old.len()
    };
    finish(txn, removed)?;
    expired.events += removed as u64;
    Ok(removed)
}

/// Deletes up to a chunk of dedup marks whose window ended before `now_ms`.
fn expire_dedup_marks(
    db: &Database,
    now_ms: i64,
    expired: &mut Expired,
) -> Result<usize, StoreError> {
    let txn = db.begin_write().map_err(unavailable)?;
    let removed = {
        let mut ends = txn.open_table(DEDUP_EXPIRY).map_err(unavailable)?;
        let mut dedup = txn.open_table(DEDUP).map_err(unavailable)?;
        let due: Vec<(u64, String, u128)> = ends
            .range(..(now_ms.max(0) as u64, "", 0))
            .map_err(unavailable)?
            .take(CHUNK)
            .map(|row| {
                row.map(|(k, _)| {
                    let (at, tenant, id) = k.value();
                    (at, tenant.to_owned(), id)
                })
            })
            .collect::<Result<_, _>>()
            .map_err(unavailable)?;
        for (at, tenant, id) in &due {
            ends.remove((*at, tenant.as_str(), *id))
                .map_err(unavailable)?;
            if dedup
                .remove((tenant.as_str(), *id))
                .map_err(unavailable)?
                .is_some()
            {
                expired.dedup_marks += 1;
            }
        }
        due.len()
    };
    finish(txn, removed)?;
    Ok(removed)
}

/// Deletes up to a chunk of the oldest quarantine records received before `horizon`.
fn expire_quarantine(
    db: &Database,
    horizon: i64,
    expired: &mut Expired,
) -> Result<usize, StoreError> {
    let removed = expire_numbered(db, QUARANTINE, QUARANTINE_SEEN, |bytes| {
        let r: QuarantineRecord = decode(bytes)?;
        Ok((r.received_at_ms < horizon).then_some((r.topic, r.partition, r.offset)))
    })?;
    expired.quarantined += removed as u64;
    Ok(removed)
}

/// Deletes up to a chunk of the oldest DLQ observations made before `horizon`.
fn expire_dlq(db: &Database, horizon: i64, expired: &mut Expired) -> Result<usize, StoreError> {
    let removed = expire_numbered(db, DLQ, DLQ_SEEN, |bytes| {
        let o: DlqObservation = decode(bytes)?;
        Ok((o.observed_at_ms < horizon).then_some((o.topic, o.partition, o.offset)))
    })?;
    expired.dlq_observations += removed as u64;
    Ok(removed)
}

/// A Kafka position, the key of a `*_SEEN` table.
type Position = (String, i32, i64);

/// Deletes the oldest rows of a numbered table (and their `seen` keys) while `old` says a row is
/// past its window, up to a chunk.
fn expire_numbered(
    db: &Database,
    rows: redb::TableDefinition<u64, &[u8]>,
    seen: redb::TableDefinition<(&str, i32, i64), u64>,
    old: impl Fn(&[u8]) -> Result<Option<Position>, StoreError>,
) -> Result<usize, StoreError> {
    let txn = db.begin_write().map_err(unavailable)?;
    let removed = {
        let mut table = txn.open_table(rows).map_err(unavailable)?;
        let mut seen = txn.open_table(seen).map_err(unavailable)?;
        let mut gone = Vec::new();
        for row in table.iter().map_err(unavailable)?.take(CHUNK) {
            let (number, value) = row.map_err(unavailable)?;
            match old(value.value())? {
                Some(position) => gone.push((number.value(), position)),
                None => break,
            }
        }
        for (number, (topic, partition, offset)) in &gone {
            table.remove(*number).map_err(unavailable)?;
            seen.remove((topic.as_str(), *partition, *offset))
                .map_err(unavailable)?;
        }
        gone.len()
    };
    finish(txn, removed)?;
    Ok(removed)
}

/// Commits a chunk that removed rows; one that found nothing old is dropped unwritten, so a
/// pass over young tables costs no fsync per tenant.
fn finish(txn: redb::WriteTransaction, removed: usize) -> Result<(), StoreError> {
    if removed == 0 {
        txn.abort().map_err(unavailable)
    } else {
        txn.commit().map_err(unavailable)
    }
}

/// Looks at the next stretch of dead letters and deletes those that died before `horizon`.
fn expire_dead_letters(
    db: &Database,
    horizon: i64,
    cursor: &mut DeadLetterCursor,
    expired: &mut Expired,
) -> Result<(), StoreError> {
    let txn = db.begin_write().map_err(unavailable)?;
    {
        let mut dead = txn.open_table(DEAD).map_err(unavailable)?;
        let mut old = Vec::new();
        let mut last = None;
        let mut looked = 0;
        let start = cursor.clone().unwrap_or_default();
        for row in dead
            .range((start.0.as_str(), start.1, start.2)..)
            .map_err(unavailable)?
            .take(DEAD_LETTER_WALK)
        {
            let (key, value) = row.map_err(unavailable)?;
            let (tenant, subscription, job) = key.value();
            let letter: DeadLetter = decode(value.value())?;
            if letter.dead_at_ms < horizon {
                old.push((tenant.to_owned(), subscription, job));
            }
            last = Some((tenant.to_owned(), subscription, job));
            looked += 1;
        }
        for (tenant, subscription, job) in &old {
            dead.remove((tenant.as_str(), *subscription, *job))
                .map_err(unavailable)?;
        }
        expired.dead_letters += old.len() as u64;
        // A short walk reached the end: the next pass starts from the beginning.
        *cursor = match last {
            Some((tenant, subscription, job)) if looked == DEAD_LETTER_WALK => {
                Some((tenant, subscription, job.saturating_add(1)))
            }
            _ => None,
        };
    }
    txn.commit().map_err(unavailable)?;
    Ok(())
}
