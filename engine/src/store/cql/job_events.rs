//! Stored events looked up by (tenant, seq, id) on CQL — the events of jobs being leased, and of
//! replayed jobs: from the events this process appended last (`recent.rs`), else read from
//! `tenant_log` — one read per bucket of a tenant for all the events asked at once (`seq IN (…)`),
//! not one per event. In a backlog most leased jobs' events
//! have left the recent ones, and a read per job was the largest share of requests left (0.42 per
//! delivered event, issue 17).

use std::collections::HashMap;

use uuid::Uuid;

use super::concurrently::all;
use super::{as_i64, unavailable, CqlStore};
use crate::store::codec::decode;
use crate::store::{JobRecord, StoreError, StoredEvent};

/// Most seqs in one `IN` list: a read of one partition, bounded so a reply stays small.
const SEQS_PER_READ: usize = 64;

/// An event asked for: (tenant, seq, id).
pub(super) type EventAt<'a> = (&'a str, u64, Uuid);

impl CqlStore {
    /// Each job's event, in the order of `jobs`; `None` where it is no longer stored (retention
    /// expired it) or the seq holds another event.
    pub(super) async fn job_events(
        &self,
        jobs: &[&JobRecord],
    ) -> Result<Vec<Option<StoredEvent>>, StoreError> {
        let at: Vec<EventAt<'_>> = jobs
            .iter()
            .map(|j| (&*j.tenant, j.event_seq, j.event_id))
            .collect();
        self.events_at(&at).await
    }

    /// The events asked for, in their order; `None` where it is no longer stored or the seq
    /// holds another event.
    pub(super) async fn events_at(
        &self,
        asked: &[EventAt<'_>],
    ) -> Result<Vec<Option<StoredEvent>>, StoreError> {
        let mut found: Vec<Option<StoredEvent>> = Vec::with_capacity(asked.len());
        // (tenant, bucket) → seqs to read.
        let mut wanted: HashMap<(&str, u64), Vec<u64>> = HashMap::new();
        for &(tenant, seq, id) in asked {
            match self.recent.get(tenant, seq, id) {
                Some(encoded) => found.push(Some(StoredEvent {
                    seq,
                    event: decode(&encoded)?,
                })),
                None => {
                    found.push(None);
                    let seqs = wanted.entry((tenant, self.bucket_of(seq))).or_default();
                    if !seqs.contains(&seq) {
                        seqs.push(seq);
                    }
                }
            }
        }
        let reads = wanted.iter().flat_map(|((tenant, bucket), seqs)| {
            seqs.chunks(SEQS_PER_READ)
                .map(move |chunk| self.read_events_at(tenant, *bucket, chunk))
        });
        let mut read: HashMap<(&str, u64), (Uuid, StoredEvent)> = HashMap::new();
        for (tenant, events) in all(reads).await? {
            for (id, event) in events {
                read.insert((tenant, event.seq), (id, event));
            }
        }
        for (slot, &(tenant, seq, id)) in found.iter_mut().zip(asked) {
            if slot.is_none() {
                *slot = read
                    .get(&(tenant, seq))
                    .filter(|(found_id, _)| *found_id == id)
                    .map(|(_, event)| event.clone());
            }
        }
        Ok(found)
    }

    /// The events at `seqs` of one bucket of `tenant`, with the id each row names.
    async fn read_events_at<'t>(
        &self,
        tenant: &'t str,
        bucket: u64,
        seqs: &[u64],
    ) -> Result<(&'t str, Vec<(Uuid, StoredEvent)>), StoreError> {
        let seqs: Vec<i64> = seqs.iter().map(|s| as_i64(*s)).collect::<Result<_, _>>()?;
        let rows = self
            .session
            .execute_unpaged(&self.jt.log_events_in, (tenant, as_i64(bucket)?, seqs))
            .await
            .map_err(unavailable)?
            .into_rows_result()
            .map_err(unavailable)?;
        let mut out = Vec::new();
        for row in rows
            .rows::<(i64, Option<Uuid>, Option<Vec<u8>>)>()
            .map_err(unavailable)?
        {
            if let (seq, Some(id), Some(blob)) = row.map_err(unavailable)? {
                let seq = u64::try_from(seq).map_err(unavailable)?;
                out.push((
                    id,
                    StoredEvent {
                        seq,
                        event: decode(&blob)?,
                    },
                ));
            }
        }
        Ok((tenant, out))
    }
}
