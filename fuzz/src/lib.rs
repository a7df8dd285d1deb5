//! The bodies of the fuzz targets (issue 19), as plain functions: each takes any bytes and must
//! neither panic nor break the invariant it checks. The `fuzz_targets/` binaries hand them
//! libFuzzer's inputs; `tests/corpus.rs` replays the committed corpus through them on every
//! `cargo test`, so a crash once found stays found.
//!
//! Inputs are text-like where the real input is, so the corpus can be read and written by hand:
//! a record is `source`, then `key: value` header lines, a blank line, and the value.

use std::net::IpAddr;

use hub_core::destination::{
    check_endpoint, parse_ipv4_loose, refused_because, DestinationPolicy, ResolveError, Resolver,
};
use hub_core::model::{parse_object, validate_create, validate_edit, SinkKind, Subscription};
use hub_engine::ingest::{judge_into, Judged, RecordIn};
use hub_engine::store::{IngestBatch, HEADER_VALUE_PREFIX, QUARANTINE_VALUE_PREFIX};
use hub_engine::verdict::{VerdictCounters, VerdictLimits};

/// A record as libFuzzer's bytes describe it: the topic's source, the headers, the value.
#[must_use]
pub fn record_of(data: &[u8]) -> (String, RecordIn) {
    let (head, value) = match data.windows(2).position(|w| w == b"\n\n") {
        Some(at) => (&data[..at], &data[at + 2..]),
        None => (data, &[][..]),
    };
    let mut lines = head.split(|b| *b == b'\n');
    let source = String::from_utf8_lossy(lines.next().unwrap_or_default()).into_owned();
    let headers = lines
        .map(|line| match line.iter().position(|b| *b == b':') {
            Some(at) => {
                let value = &line[at + 1..];
                let value = value.strip_prefix(b" ").unwrap_or(value);
                (
                    String::from_utf8_lossy(&line[..at]).into_owned(),
                    Some(value),
                )
            }
            None => (String::from_utf8_lossy(line).into_owned(), None),
        })
        .collect();
    let record = RecordIn {
        topic: format!("lerian.streaming.{source}").into(),
        partition: 0,
        offset: 7,
        headers,
        value: value.to_vec(),
    };
    (source, record)
}

/// The verdict and what ingest keeps of a record: any bytes end in a verdict, an accepted event
/// carries the record's value, a quarantined one is bounded and keeps no credential.
pub fn verdict(data: &[u8]) {
    let (source, record) = record_of(data);
    let tight = VerdictLimits {
        max_value_bytes: 64,
        max_header_bytes: 16,
    };
    for limits in [VerdictLimits::default(), tight] {
        let mut batch = IngestBatch::default();
        let counters = VerdictCounters::default();
        match judge_into(&mut batch, record.clone(), &source, &limits, &counters, 0) {
            Judged::Accepted { tenant, id } => {
                assert_eq!(batch.events.len(), 1);
                let event = &batch.events[0];
                assert_eq!((&event.tenant, event.id), (&tenant, id));
                assert_eq!(event.payload, record.value);
                assert!(record.value.len() <= limits.max_value_bytes);
            }
            Judged::Dropped => assert!(batch.events.is_empty() && batch.quarantined.is_empty()),
            Judged::Quarantined { reason, .. } => {
                assert!(!reason.is_empty());
                let kept = &batch.quarantined[0];
                assert!(kept.value_prefix.len() <= QUARANTINE_VALUE_PREFIX);
                assert!(kept.headers.len() <= 64);
                for h in &kept.headers {
                    assert!(h
                        .value
                        .as_ref()
                        .is_none_or(|v| v.len() <= HEADER_VALUE_PREFIX));
                    assert!(!h.key.eq_ignore_ascii_case("authorization"));
                }
            }
        }
    }
}

/// Answers every name with one address, public or not, as the input's second byte says.
#[derive(Debug)]
struct OneAddress(IpAddr);

#[async_trait::async_trait]
impl Resolver for OneAddress {
    async fn resolve(&self, _: &str, _: u16) -> Result<Vec<IpAddr>, ResolveError> {
        Ok(vec![self.0])
    }
}

const KINDS: [SinkKind; 5] = [
    SinkKind::Webhook,
    SinkKind::Pull,
    SinkKind::Sqs,
    SinkKind::Rabbitmq,
    SinkKind::Eventbridge,
];

thread_local! {
    static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime");
}

/// The endpoint grammar of every kind and the destination classifier (R-SEC-2): any text ends
/// in a stored form or a typed refusal, and a stored form passes the same check again unchanged.
pub fn endpoint(data: &[u8]) {
    let [kind, address, rest @ ..] = data else {
        return;
    };
    let kind = KINDS[usize::from(*kind) % KINDS.len()];
    let resolver = OneAddress(match address % 3 {
        0 => IpAddr::from([93, 184, 216, 34]),
        1 => IpAddr::from([10, 0, 0, 1]),
        _ => IpAddr::from([0x2001, 0xdb8, 0, 0, 0, 0, 0, 1]),
    });
    let text = String::from_utf8_lossy(rest);
    if let Some(ip) = parse_ipv4_loose(&text) {
        let _ = refused_because(IpAddr::V4(ip));
    }
    if let Ok(ip) = text.parse::<IpAddr>() {
        let _ = refused_because(ip);
    }
    let policy = DestinationPolicy::default();
    RUNTIME.with(|rt| {
        rt.block_on(async {
            let checked = check_endpoint(&policy, &resolver, kind, Some(&text)).await;
            if let Ok(Some(stored)) = checked {
                let again = check_endpoint(&policy, &resolver, kind, Some(&stored)).await;
                assert_eq!(again.ok().flatten().as_deref(), Some(stored.as_str()));
            }
        });
    });
}

/// `/v1` subscription bodies, create and edit (R-CP-2, R-CP-10): any bytes end in a typed
/// answer; the first byte picks the operation and the current subscription's kind.
pub fn subscription_body(data: &[u8]) {
    let [op, body @ ..] = data else {
        return;
    };
    let Ok(object) = parse_object(body) else {
        return;
    };
    if op % 2 == 0 {
        let _ = validate_create(&object);
    } else {
        let kind = KINDS[usize::from(op / 2) % KINDS.len()];
        let current = Subscription::new("t", "n", kind, 0);
        let _ = validate_edit(&object, &current);
    }
}

/// `If-Match` and `X-Idempotency` (R-CP-10, R-CP-13): any text is read or refused with 400.
pub fn request_headers(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    match hub_control::service::if_match_tags(&text) {
        Ok(tags) => assert!(!tags.is_empty()),
        Err(e) => assert_eq!(e.code.as_str(), "bad_request"),
    }
    let _ = hub_control::service::valid_key(&text);
}

/// A destination's answer to a webhook (R-DI-13), read by the shards' own HTTP/1.1: the first
/// byte sets how many bytes each read hands over, the rest is the answer. Any bytes are an
/// answer (its body kept to the cap) or a refusal that says why, never a panic.
pub fn webhook_answer(data: &[u8]) {
    let Some((&step, answer)) = data.split_first() else {
        return;
    };
    const CAP: usize = 64;
    match hub_engine::runtime::http::read_answer(answer, usize::from(step), CAP) {
        Ok((read, _kept)) => assert!(read.body.len() <= CAP),
        Err(failed) => assert!(!failed.to_string().is_empty()),
    }
}
