//! The dead-letter observer (R-IN-9): a second consumer group reads producers' `.dlq` topics and
//! records each record for operators (`GET /admin/dlq`). Its records never become deliveries.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{CommitMode, Consumer};

use crate::ingest::kafka::{no_topic_yet, HubConsumer};

use super::kafka::record_from;
use super::{bounded_headers, RecordIn};
use crate::store::{DlqObservation, Forensics, QUARANTINE_VALUE_PREFIX};
use crate::verdict::{dlq_topic_source, Attr, CeHeaders};

/// Turns a `.dlq` record into an observation, keeping the `x-lerian-dlq-*` headers.
pub fn observation(r: &RecordIn, now_ms: i64) -> DlqObservation {
    let text = |key: &str| {
        r.headers
            .iter()
            .rev()
            .find(|(k, _)| k.eq_ignore_ascii_case(key.as_bytes()))
            .and_then(|(_, v)| v)
            .map(|v| String::from_utf8_lossy(&v[..v.len().min(256)]).into_owned())
    };
    let tenant = CeHeaders::collect(r.headers.iter())
        .get(Attr::TenantId)
        .map(|t| String::from_utf8_lossy(&t[..t.len().min(256)]).into_owned());
    DlqObservation {
        topic: r.topic.to_string(),
        partition: r.partition,
        offset: r.offset,
        source: dlq_topic_source(&r.topic).unwrap_or_default().to_owned(),
        tenant,
        error_class: text("x-lerian-dlq-error-class"),
        headers: bounded_headers(&r.headers),
        value_prefix: r.value[..r.value.len().min(QUARANTINE_VALUE_PREFIX)].to_vec(),
        value_len: r.value.len() as u64,
        observed_at_ms: now_ms,
    }
}

/// Polls `.dlq` topics until `stop`, recording observations before committing their offsets.
pub fn run_dlq_consumer(
    consumer: Arc<HubConsumer>,
    store: Arc<dyn Forensics>,
    tokio: tokio::runtime::Handle,
    stop: Arc<AtomicBool>,
    leave_within: Duration,
) {
    observe_until_stopped(&consumer, store, tokio, stop);
    super::kafka::leave_group(consumer, leave_within, "dlq");
}

fn observe_until_stopped(
    consumer: &HubConsumer,
    store: Arc<dyn Forensics>,
    tokio: tokio::runtime::Handle,
    stop: Arc<AtomicBool>,
) {
    let mut pending = Vec::new();
    let mut since = Instant::now();
    while !stop.load(Ordering::Acquire) {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => pending.push(observation(&record_from(&m), crate::clock::now_ms())),
            Some(Err(e)) if no_topic_yet(&e) => tracing::debug!(error = %e, "no dlq topic yet"),
            Some(Err(e)) => tracing::warn!(error = %e, "dlq consumer error"),
            None => {}
        }
        if pending.is_empty()
            || (pending.len() < 500 && since.elapsed() < Duration::from_millis(200))
        {
            continue;
        }
        let batch = std::mem::take(&mut pending);
        loop {
            match tokio.block_on(store.record_dlq(batch.clone())) {
                Ok(()) => break,
                Err(e) if !stop.load(Ordering::Acquire) => {
                    tracing::warn!(error = %e, "dlq observations not stored; retrying");
                    std::thread::park_timeout(Duration::from_millis(500));
                }
                // Stopping with nothing stored: nothing is committed either, so it is replayed.
                Err(_) => return,
            }
        }
        // Every polled record is now stored, so the consumer's position is durable.
        let committed = consumer
            .position()
            .and_then(|pos| consumer.commit(&pos, CommitMode::Async));
        if let Err(e) = committed {
            tracing::warn!(error = %e, "dlq offset commit failed");
        }
        since = Instant::now();
    }
}
