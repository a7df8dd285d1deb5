//! The verdict over a realistic header set (SPEC appendix A). Aim: 2 million records per second
//! per core, i.e. under 500 ns per record.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use hub_engine::ingest::{judge_into, RecordHeaders, RecordIn};
use hub_engine::store::IngestBatch;
use hub_engine::verdict::{judge, Verdict, VerdictCounters, VerdictLimits};

fn producer_headers() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("ce-specversion", b"1.0".to_vec()),
        ("ce-id", uuid::Uuid::now_v7().to_string().into_bytes()),
        ("ce-source", b"lender".to_vec()),
        (
            "ce-type",
            b"studio.lerian.lender.loan_application.approved".to_vec(),
        ),
        ("ce-time", b"2026-11-29T20:17:42.123456789Z".to_vec()),
        ("ce-schemaversion", b"1.0.0".to_vec()),
        ("ce-resourcetype", b"loan_application".to_vec()),
        ("ce-eventtype", b"approved".to_vec()),
        ("ce-tenantid", b"t-7f3e".to_vec()),
        ("ce-subject", b"loan-123".to_vec()),
        ("ce-datacontenttype", b"application/json".to_vec()),
        (
            "traceparent",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_vec(),
        ),
    ]
}

fn verdict(c: &mut Criterion) {
    let limits = VerdictLimits::default();
    let headers = producer_headers();
    let mut group = c.benchmark_group("verdict");
    group.throughput(Throughput::Elements(1));
    group.bench_function("accept_producer_record", |b| {
        b.iter(|| {
            let v = judge(
                "lender",
                headers
                    .iter()
                    .map(|(k, v)| (k.as_bytes(), Some(v.as_slice()))),
                512,
                &limits,
            );
            assert!(matches!(v, Verdict::Accept(_)));
        });
    });
    let mut malformed = producer_headers();
    malformed.retain(|(k, _)| *k != "ce-tenantid");
    group.bench_function("quarantine_missing_tenant", |b| {
        b.iter(|| {
            judge(
                "lender",
                malformed
                    .iter()
                    .map(|(k, v)| (k.as_bytes(), Some(v.as_slice()))),
                512,
                &limits,
            )
        });
    });
    group.finish();
}

/// What ingest does per record beyond the verdict: copy it out of the Kafka client (its headers
/// into one buffer, its value) and judge it into a batch, the value moving into the event.
fn record_into_batch(c: &mut Criterion) {
    let limits = VerdictLimits::default();
    let counters = VerdictCounters::default();
    let headers = producer_headers();
    let value = vec![b'x'; 512];
    let topic: std::sync::Arc<str> = "lerian.streaming.lender".into();
    let mut group = c.benchmark_group("ingest_record");
    group.throughput(Throughput::Elements(100));
    group.bench_function("copy_and_judge_100_into_a_batch", |b| {
        b.iter(|| {
            let mut batch = IngestBatch::default();
            for offset in 0..100 {
                let record = RecordIn {
                    topic: topic.clone(),
                    partition: 0,
                    offset,
                    headers: headers
                        .iter()
                        .map(|(k, v)| (k, Some(v)))
                        .collect::<RecordHeaders>(),
                    value: value.clone(),
                };
                judge_into(&mut batch, record, "lender", &limits, &counters, 0);
            }
            assert_eq!(batch.events.len(), 100);
            batch
        });
    });
    group.finish();
}

criterion_group!(benches, verdict, record_into_batch);
criterion_main!(benches);
