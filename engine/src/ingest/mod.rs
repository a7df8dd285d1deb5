//! Ingest: records from Kafka (`kafka`, routed to shards by `router`, persisted by `shard`) or
//! from HTTP (`http`) go through the same `judge_into` step and the same `Store::write_batch`.
//! Producer dead-letter topics are observed by `dlq`, never delivered.

pub mod assignment;
pub mod dlq;
pub mod http;
pub mod jobs;
pub mod kafka;
pub mod kafka_security;
pub mod kafka_stall;
pub mod kafka_topics;
pub mod partition_feed;
mod record;
pub mod router;
pub mod shard;
mod unit_advance;

use crate::store::{
    InboxEvent, IngestBatch, QuarantineRecord, RawHeader, HEADER_VALUE_PREFIX,
    QUARANTINE_VALUE_PREFIX,
};
use crate::verdict::{judge, Attr, CeHeaders, Verdict, VerdictCounters, VerdictLimits};

pub use record::{RecordHeaders, RecordIn};

/// What became of one record, for callers that answer per record (HTTP).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judged {
    /// Added to the batch's events (dedup decides later whether it is new).
    Accepted {
        tenant: String,
        id: uuid::Uuid,
    },
    Dropped,
    Quarantined {
        reason: &'static str,
        detail: String,
    },
}

/// Judges `record`, counts the verdict, and adds what must be stored to `batch` (an accepted
/// event takes the record's value).
pub fn judge_into(
    batch: &mut IngestBatch,
    record: RecordIn,
    topic_source: &str,
    limits: &VerdictLimits,
    counters: &VerdictCounters,
    now_ms: i64,
) -> Judged {
    let verdict = judge(
        topic_source,
        record.headers.iter(),
        record.value.len(),
        limits,
    );
    counters.count(&verdict);
    match verdict {
        Verdict::Accept(ev) => {
            let judged = Judged::Accepted {
                tenant: ev.tenant.to_owned(),
                id: ev.id,
            };
            let offset = record.offset;
            batch
                .events
                .push(InboxEvent::from_verdict(&ev, record.value, now_ms, offset));
            judged
        }
        Verdict::Drop(_) => Judged::Dropped,
        Verdict::Quarantine(reason) => {
            batch.quarantined.push(quarantine_record(
                &record,
                reason.code(),
                reason.describe(),
                now_ms,
            ));
            Judged::Quarantined {
                reason: reason.code(),
                detail: reason.describe(),
            }
        }
    }
}

/// A bounded copy of a malformed record: headers capped per value, a prefix of the value.
pub fn quarantine_record(
    record: &RecordIn,
    reason: &str,
    detail: String,
    now_ms: i64,
) -> QuarantineRecord {
    let tenant = CeHeaders::collect(record.headers.iter())
        .get(Attr::TenantId)
        .and_then(|t| std::str::from_utf8(&t[..t.len().min(HEADER_VALUE_PREFIX)]).ok())
        .map(str::to_owned);
    QuarantineRecord {
        topic: record.topic.to_string(),
        partition: record.partition,
        offset: record.offset,
        reason: reason.to_owned(),
        detail,
        tenant,
        headers: bounded_headers(&record.headers),
        value_prefix: record.value[..record.value.len().min(QUARANTINE_VALUE_PREFIX)].to_vec(),
        value_len: record.value.len() as u64,
        received_at_ms: now_ms,
    }
}

/// Headers never kept: credentials a careless HTTP client may send along.
const SECRET_HEADERS: [&str; 4] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "x-api-key",
];

/// Headers as kept for forensics: at most 64 of them, each value cut to a prefix, credentials
/// left out.
pub fn bounded_headers(headers: &RecordHeaders) -> Vec<RawHeader> {
    headers
        .iter()
        .filter(|(k, _)| {
            !SECRET_HEADERS
                .iter()
                .any(|s| k.eq_ignore_ascii_case(s.as_bytes()))
        })
        .take(64)
        .map(|(k, v)| RawHeader {
            key: String::from_utf8_lossy(k).chars().take(256).collect(),
            value: v.map(|v| v[..v.len().min(HEADER_VALUE_PREFIX)].to_vec()),
        })
        .collect()
}

/// An event key as the catalog knows it: `(key, origin, schema major)`.
pub type EventKey<'a> = (&'a str, &'a str, u32);

/// The distinct keys of a batch's events: a batch holds thousands of events and a handful of
/// keys, so observers work (and allocate) per key, not per event.
pub fn distinct_keys(events: &[crate::store::InboxEvent]) -> Vec<EventKey<'_>> {
    let mut keys: Vec<EventKey<'_>> = Vec::new();
    for e in events {
        let k = (e.key.as_str(), e.source.as_str(), e.schema_major);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys
}

/// Learns the event keys of accepted events (the control plane's catalog, R-CP-15). Called after
/// a batch is durable, with the batch's distinct keys.
pub trait KeyObserver: Send + Sync + std::fmt::Debug {
    fn observe(&self, keys: &[EventKey<'_>]);
}

impl KeyObserver for hub_core::catalog::Catalog {
    fn observe(&self, keys: &[EventKey<'_>]) {
        self.observe_all(keys.iter().copied());
    }
}

/// Records keys in the store the first time this process sees them, for a control plane running
/// as its own process. Writes run on the tokio side; a failed write is retried on the next sight.
#[derive(Debug)]
pub struct StoreKeyObserver {
    pub store: std::sync::Arc<dyn crate::store::Store>,
    pub tokio: tokio::runtime::Handle,
    pub seen: std::sync::Arc<std::sync::Mutex<std::collections::HashSet<(String, String, u32)>>>,
}

impl KeyObserver for StoreKeyObserver {
    fn observe(&self, keys: &[EventKey<'_>]) {
        let new: Vec<(String, String, u32)> = match self.seen.lock() {
            Ok(mut seen) => keys
                .iter()
                .map(|(k, o, m)| ((*k).to_owned(), (*o).to_owned(), *m))
                // Bounded as the catalog is: keys past its limit are not recorded either.
                .filter(|k| {
                    seen.len() < hub_core::catalog::OBSERVED_KEY_LIMIT && seen.insert(k.clone())
                })
                .collect(),
            Err(_) => return,
        };
        if new.is_empty() {
            return;
        }
        let (store, seen) = (self.store.clone(), self.seen.clone());
        self.tokio.spawn(async move {
            if let Err(e) = store.record_catalog_keys(new.clone()).await {
                tracing::warn!(error = %e, "recording catalog keys failed; will retry");
                if let Ok(mut s) = seen.lock() {
                    for k in &new {
                        s.remove(k);
                    }
                }
            }
        });
    }
}

/// Tells several observers.
#[derive(Debug)]
pub struct Observers(pub Vec<std::sync::Arc<dyn KeyObserver>>);

impl KeyObserver for Observers {
    fn observe(&self, keys: &[EventKey<'_>]) {
        for o in &self.0 {
            o.observe(keys);
        }
    }
}

#[cfg(test)]
mod key_tests {
    use super::*;

    #[test]
    fn r_cp_15_a_batch_is_observed_once_per_distinct_key() {
        let mut events: Vec<_> = (0..1000)
            .map(|i| crate::store::conformance::event("t", if i % 2 == 0 { "a.b" } else { "c.d" }))
            .collect();
        events[7].schema_major = 2;
        let keys = distinct_keys(&events);
        assert_eq!(
            keys,
            vec![
                ("a.b", "lender", 1),
                ("c.d", "lender", 1),
                ("c.d", "lender", 2)
            ],
            "first-seen order"
        );
    }
}
