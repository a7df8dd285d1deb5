//! The events of jobs being leased (CQL): from the events this process appended last
//! (`recent.rs`), else read from `tenant_log` — one read per bucket of a tenant for all the jobs
//! of a step that need it (`seq IN (…)`), not one per job. In a backlog most leased jobs' events
//! have left the recent ones, and a read per job was the largest share of requests left (0.42 per
//! delivered event, issue 17).

use std::collections::HashMap;

use uuid::Uuid;

use super::jobs::all;
use super::{as_i64, unavailable, CqlStore};
use crate::store::codec::decode;
use crate::store::{JobRecord, StoreError, StoredEvent};

/// Most seqs in one `IN` list: a read of one partition, bounded so a reply stays small.
const SEQS_PER_READ: usize = 64;

impl CqlStore {
    /// Each job's event, in the order of `jobs`; `None` where it is no longer stored (retention
    /// expired it) or the seq holds another event.
    pub(super) async fn job_events(
        &self,
        jobs: &[&JobRecord],
    ) -> Result<Vec<Option<StoredEvent>>, StoreError> {
        let mut found: Vec<Option<StoredEvent>> = Vec::with_capacity(jobs.len());
        // (tenant, bucket) → seqs to read.
        let mut wanted: HashMap<(&str, u64), Vec<u64>> = HashMap::new();
        for job in jobs {
            match self.recent.get(&job.tenant, job.event_seq, job.event_id) {
                Some(encoded) => found.push(Some(StoredEvent {
                    seq: job.event_seq,
                    event: decode(&encoded)?,
                })),
                None => {
                    found.push(None);
                    let bucket = self.bucket_of(job.event_seq);
                    let seqs = wanted.entry((job.tenant.as_str(), bucket)).or_default();
                    if !seqs.contains(&job.event_seq) {
                        seqs.push(job.event_seq);
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
        for (slot, job) in found.iter_mut().zip(jobs) {
            if slot.is_none() {
                *slot = read
                    .get(&(job.tenant.as_str(), job.event_seq))
                    .filter(|(id, _)| *id == job.event_id)
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
