//! Quarantine records (R-IN-4) and producer DLQ observations (R-IN-9) in CQL.
//!
//! Each is keyed for listing by `qid` (write time in ms << 22 | a per-process counter, so this
//! process's keys strictly increase) in a partition per kind and UTC day. A record from a Kafka
//! position is first claimed in `forensics_seen` with `IF NOT EXISTS`; a replay that finds the
//! claim rewrites the same listing row from it (so a crash between the two writes loses nothing)
//! and counts nothing.

use std::sync::atomic::Ordering;

use futures::{StreamExt, TryStreamExt};
use serde::de::DeserializeOwned;

use super::lwt::lwt;
use super::{as_i64, unavailable, CqlStore};
use crate::clock::now_ms;
use crate::store::codec::{decode, encode};
use crate::store::{DlqObservation, Page, QuarantineRecord, StoreError};

pub(super) const QUARANTINE: &str = "quarantine";
pub(super) const DLQ: &str = "dlq";

const DAY_MS: u64 = 86_400_000;
const COUNTER_BITS: u32 = 22;
/// Rows read per query while filtering a listing.
const SCAN_ROWS: i32 = 256;
const WRITE_CONCURRENCY: usize = 64;

fn day_of(qid: u64) -> i64 {
    i64::try_from((qid >> COUNTER_BITS) / DAY_MS).unwrap_or(i64::MAX)
}

/// Where a record came from; `offset < 0` (HTTP) has no position to claim.
struct Position {
    topic: String,
    partition: i32,
    offset: i64,
}

/// Records that came from a Kafka position.
trait Positioned {
    fn position(&self) -> Position;
}

impl Positioned for QuarantineRecord {
    fn position(&self) -> Position {
        Position {
            topic: self.topic.clone(),
            partition: self.partition,
            offset: self.offset,
        }
    }
}

impl Positioned for DlqObservation {
    fn position(&self) -> Position {
        Position {
            topic: self.topic.clone(),
            partition: self.partition,
            offset: self.offset,
        }
    }
}

impl CqlStore {
    fn next_qid(&self) -> u64 {
        let floor = u64::try_from(now_ms()).unwrap_or(0) << COUNTER_BITS;
        let mut last = self.last_qid.load(Ordering::Relaxed);
        loop {
            let next = floor.max(last + 1);
            match self
                .last_qid
                .compare_exchange(last, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return next,
                Err(seen) => last = seen,
            }
        }
    }

    async fn put_listing(&self, kind: &str, qid: u64, record: &[u8]) -> Result<(), StoreError> {
        let ttl = Self::ttl(self.settings.forensics_ttl_s);
        self.session
            .execute_unpaged(
                &self.st.listing_put,
                (kind, day_of(qid), as_i64(qid)?, record, ttl),
            )
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    /// Records one item once per position; true when it was new.
    async fn record_once(
        &self,
        kind: &str,
        at: Position,
        qid: u64,
        record: Vec<u8>,
    ) -> Result<bool, StoreError> {
        if at.offset < 0 {
            self.put_listing(kind, qid, &record).await?;
            return Ok(true);
        }
        let ttl = Self::ttl(self.settings.forensics_ttl_s);
        let answer = lwt(self
            .session
            .execute_unpaged(
                &self.st.seen_claim,
                (
                    kind,
                    &at.topic,
                    at.partition,
                    at.offset,
                    as_i64(qid)?,
                    &record,
                    ttl,
                ),
            )
            .await
            .map_err(unavailable)?)?;
        if answer.applied {
            self.put_listing(kind, qid, &record).await?;
            return Ok(true);
        }
        let (Some(qid), Some(record)) = (answer.bigint("qid"), answer.blob("record")) else {
            return Err(StoreError::Corrupt(format!(
                "{kind} claim for {}/{}/{} has no listing key",
                at.topic, at.partition, at.offset
            )));
        };
        self.put_listing(kind, u64::try_from(qid).map_err(unavailable)?, record)
            .await?;
        Ok(false)
    }

    /// Keys are handed out in input order before the writes run concurrently, so a listing shows
    /// a batch in its order.
    async fn record_all(
        &self,
        kind: &'static str,
        items: impl Iterator<Item = (Position, Vec<u8>)>,
    ) -> Result<usize, StoreError> {
        let keyed: Vec<_> = items
            .map(|(at, bytes)| (at, self.next_qid(), bytes))
            .collect();
        let writes = keyed
            .into_iter()
            .map(|(at, qid, bytes)| self.record_once(kind, at, qid, bytes));
        let new: Vec<bool> = futures::stream::iter(writes)
            .buffered(WRITE_CONCURRENCY)
            .try_collect()
            .await?;
        Ok(new.into_iter().filter(|n| *n).count())
    }

    pub(super) async fn record_quarantine(
        &self,
        records: &[QuarantineRecord],
    ) -> Result<usize, StoreError> {
        self.record_all(
            QUARANTINE,
            records.iter().map(|r| (r.position(), encode(r))),
        )
        .await
    }

    pub(super) async fn record_observations(
        &self,
        obs: &[DlqObservation],
    ) -> Result<(), StoreError> {
        self.record_all(DLQ, obs.iter().map(|o| (o.position(), encode(o))))
            .await
            .map(|_| ())
    }

    /// Items of `kind` from `cursor` that `keep` accepts, at most `limit`; the next cursor is the
    /// key of the first row not returned. A listing from cursor 0 starts at the retention horizon.
    pub(super) async fn list_forensics<T: DeserializeOwned>(
        &self,
        kind: &str,
        cursor: u64,
        limit: usize,
        keep: impl Fn(&T) -> bool,
    ) -> Result<Page<T>, StoreError> {
        let now = u64::try_from(now_ms()).unwrap_or(0);
        let horizon = now.saturating_sub(u64::from(self.settings.forensics_ttl_s) * 1000);
        let mut from = cursor.max(horizon << COUNTER_BITS);
        let last_day = day_of(
            self.last_qid
                .load(Ordering::Relaxed)
                .max(now << COUNTER_BITS),
        );
        let mut items = Vec::new();
        let mut day = day_of(from);
        while day <= last_day {
            let rows = self
                .session
                .execute_unpaged(&self.st.listing_scan, (kind, day, as_i64(from)?, SCAN_ROWS))
                .await
                .map_err(unavailable)?
                .into_rows_result()
                .map_err(unavailable)?;
            let mut read = 0;
            for row in rows.rows::<(i64, Vec<u8>)>().map_err(unavailable)? {
                let (qid, bytes) = row.map_err(unavailable)?;
                let qid = u64::try_from(qid).map_err(unavailable)?;
                if items.len() == limit {
                    return Ok(Page {
                        items,
                        next_cursor: Some(qid),
                    });
                }
                let item: T = decode(&bytes)?;
                if keep(&item) {
                    items.push(item);
                }
                from = qid + 1;
                read += 1;
            }
            if read < SCAN_ROWS {
                day += 1;
                from = from.max((u64::try_from(day).unwrap_or(0) * DAY_MS) << COUNTER_BITS);
            }
        }
        Ok(Page {
            items,
            next_cursor: None,
        })
    }
}
