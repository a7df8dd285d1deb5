//! Kafka → verdict → dedup → durable inbox with `seq`, on each store, against real Kafka:
//! 50,000 records over 8 partitions and 20 tenants with 5 % duplicates, 2 % malformed and 1 %
//! system events (R-IN-1 … R-IN-8).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use hub_engine::store::{ForensicsFilter, Store, UnitId};
use rand::{Rng, SeedableRng};

use crate::support::*;

fn committed_sum(topic: &str, group: &str) -> i64 {
    offsets(topic, group)
        .iter()
        .map(|(_, c, _)| c.unwrap_or(0))
        .sum()
}

/// Waits until the group's committed positions pass `from` (the engine is ingesting).
async fn wait_progress(topic: &str, group: &str, from: i64, limit: Duration) {
    let deadline = std::time::Instant::now() + limit;
    while committed_sum(topic, group) <= from {
        assert!(
            std::time::Instant::now() < deadline,
            "no progress within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

const RECORDS: usize = 50_000;

/// An engine that consumes only `source`'s topic.
fn on_source(
    dir: &std::path::Path,
    group: &str,
    port: u16,
    backend: Backend,
    source: &str,
) -> Engine {
    Engine::start_with(
        dir,
        group,
        port,
        backend,
        &[("STREAMING_HUB_KAFKA_SOURCES", source)],
    )
}

/// Checks the store file against what was produced: exactly the unique accepted events, each
/// once, `seq` gap-free per tenant and in partition order for unsalted tenants; exactly the
/// malformed records in quarantine with their reasons.
async fn assert_store_matches(store: &dyn Store, produced: &Produced, topic: &str, source: &str) {
    for (tenant, ids) in &produced.unique {
        let events = store
            .read_events(tenant, 0, usize::MAX)
            .await
            .expect("read");
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        let want: BTreeSet<_> = ids.iter().collect();
        let got: BTreeSet<_> = events.iter().map(|e| &e.event.id).collect();
        let missing: Vec<_> = want.difference(&got).take(5).collect();
        let extra: Vec<_> = got.difference(&want).take(5).collect();
        assert!(
            missing.is_empty() && extra.is_empty() && got.len() == events.len(),
            "{tenant}: {} stored ({} distinct) of {} produced; missing e.g. {missing:?}; unexpected e.g. {extra:?}",
            events.len(),
            got.len(),
            want.len()
        );
        assert!(
            seqs.iter().copied().eq(1..=ids.len() as u64),
            "{tenant}: seq is not gap-free 1..={} (first {:?}, last {:?})",
            ids.len(),
            seqs.first(),
            seqs.last()
        );
        let stored: Vec<_> = events.iter().map(|e| e.event.id).collect();
        if *tenant == produced.salted_tenant {
            let a: BTreeSet<_> = stored.iter().collect();
            let b: BTreeSet<_> = ids.iter().collect();
            assert_eq!(
                a, b,
                "{tenant}: salted tenant keeps every event exactly once"
            );
            assert_eq!(a.len(), stored.len());
        } else {
            assert_eq!(
                &stored, ids,
                "{tenant}: exactly its unique events, in producer order"
            );
        }
    }
    let filter = ForensicsFilter {
        source: Some(source.to_owned()),
        ..Default::default()
    };
    let mut quarantined = BTreeMap::new();
    let mut cursor = 0;
    loop {
        let page = store
            .list_quarantine(&filter, cursor, 1000)
            .await
            .expect("quarantine");
        for r in page.items {
            assert_eq!(r.topic, topic);
            assert!(r.value_prefix.len() <= 4096, "bounded prefix");
            let previous = quarantined.insert((r.partition, r.offset), r.reason.clone());
            assert!(
                previous.is_none(),
                "quarantined once: {}/{}",
                r.partition,
                r.offset
            );
        }
        match page.next_cursor {
            Some(c) => cursor = c,
            None => break,
        }
    }
    let expected: BTreeMap<_, _> = produced
        .malformed
        .iter()
        .map(|(k, v)| (*k, (*v).to_owned()))
        .collect();
    assert_eq!(
        quarantined, expected,
        "quarantine holds exactly the malformed records, with reasons"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_in_6_kafka_50k_mixed_records_land_exactly_with_exact_counters_embedded() {
    fifty_thousand_mixed_records(Backend::Embedded, Taken::ByShards).await;
}

/// The same with every record routed by the consumer thread
/// (`STREAMING_HUB_KAFKA_PARTITIONS_ON_SHARDS=false`), the path before issue 17's split queues.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_in_6_kafka_50k_mixed_records_land_exactly_routed_by_the_consumer_thread_embedded() {
    fifty_thousand_mixed_records(Backend::Embedded, Taken::RoutedByTheConsumerThread).await;
}

/// Who takes a partition's records from the Kafka client.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Taken {
    ByShards,
    RoutedByTheConsumerThread,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_in_6_kafka_50k_mixed_records_land_exactly_with_exact_counters_cql() {
    fifty_thousand_mixed_records(Backend::Cql, Taken::ByShards).await;
}

async fn fifty_thousand_mixed_records(backend: Backend, taken: Taken) {
    let _alone = exclusive_broker().await;
    let ns = format!("k{}", uuid::Uuid::now_v7().simple());
    let source = ns.clone();
    let topic = format!("lerian.streaming.{source}");
    let produced = produce_workload(&topic, &source, &ns, RECORDS, 7).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let group = format!("{ns}-group");
    let on_shards = if taken == Taken::ByShards {
        "true"
    } else {
        "false"
    };
    let engine = Engine::start_with(
        dir.path(),
        &group,
        free_port(),
        backend,
        &[
            ("STREAMING_HUB_KAFKA_SOURCES", &source),
            ("STREAMING_HUB_KAFKA_PARTITIONS_ON_SHARDS", on_shards),
        ],
    );
    engine.wait_ready().await;
    wait_caught_up(&topic, &group, Duration::from_secs(300)).await;

    let m = engine.metrics().await;
    let unique: u64 = produced.unique.values().map(|v| v.len() as u64).sum();
    let q =
        |reason: &str| m[&format!("streaming_hub_ingest_quarantined_total{{reason=\"{reason}\"}}")];
    eprintln!(
        "[{}] {RECORDS} records: {unique} unique, {} duplicates, {} malformed, {} system; metrics stored={} deduplicated={} dropped={}",
        backend.label(),
        produced.duplicates, produced.malformed.len(), produced.system,
        m["streaming_hub_ingest_verdicts_total{verdict=\"stored\"}"],
        m["streaming_hub_ingest_verdicts_total{verdict=\"deduplicated\"}"],
        m["streaming_hub_ingest_verdicts_total{verdict=\"dropped_system\"}"],
    );
    engine.stop();

    let store = backend.open(dir.path()).await;
    assert_store_matches(&*store, &produced, &topic, &source).await;
    // Exact counters: with no crash, every record was judged exactly once by this engine (and
    // this run's topic is the only ingest topic on the broker).
    assert_eq!(
        m["streaming_hub_ingest_verdicts_total{verdict=\"stored\"}"],
        unique
    );
    assert_eq!(
        m["streaming_hub_ingest_verdicts_total{verdict=\"quarantined\"}"],
        produced.malformed.len() as u64
    );
    assert_eq!(
        m["streaming_hub_ingest_verdicts_total{verdict=\"deduplicated\"}"],
        produced.duplicates
    );
    assert_eq!(
        m["streaming_hub_ingest_verdicts_total{verdict=\"dropped_system\"}"],
        produced.system
    );
    for reason in [
        "missing_tenant",
        "id_not_uuidv7",
        "type_source_mismatch",
        "non_utf8_header",
        "control_character",
        "oversized_value",
    ] {
        let want = produced
            .malformed
            .values()
            .filter(|r| **r == reason)
            .count() as u64;
        assert_eq!(q(reason), want, "{reason}");
    }
    for (p, committed, high) in offsets(&topic, &group) {
        let durable = store
            .unit_offset(&UnitId::new(topic.clone(), p))
            .await
            .expect("offset");
        assert_eq!(committed, Some(high));
        assert_eq!(
            durable,
            Some(high),
            "partition {p}: the store's durable offset is the end"
        );
    }
    delete_topic(&topic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_in_7_kill_9_three_times_loses_nothing_and_stores_nothing_twice_embedded() {
    kill_9_three_times(Backend::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_in_7_kill_9_three_times_loses_nothing_and_stores_nothing_twice_cql() {
    kill_9_three_times(Backend::Cql).await;
}

async fn kill_9_three_times(backend: Backend) {
    let _alone = exclusive_broker().await;
    let ns = format!("c{}", uuid::Uuid::now_v7().simple());
    let source = ns.clone();
    let topic = format!("lerian.streaming.{source}");
    let produced = produce_workload(&topic, &source, &ns, RECORDS, 11).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let group = format!("{ns}-group");
    let port = free_port();
    let mut rng = rand::rngs::StdRng::from_entropy();
    for crash in 0..3 {
        let engine = on_source(dir.path(), &group, port, backend, &source);
        engine.wait_ready().await;
        // Kill at a random moment while it is making progress (it first waits for the previous
        // incarnation's session to expire before it gets partitions): after a random further
        // stretch of the run, so the three crashes fall early, midway and late.
        // The log store ingests the whole topic in about a second, so a later incarnation may
        // find nothing left to do: then it is killed at once, after a restart with a full log.
        let stretch = rng.gen_range(1_000..(RECORDS as i64 / 4));
        let end: i64 = offsets(&topic, &group).iter().map(|s| s.2).sum();
        wait_progress(
            &topic,
            &group,
            (committed_sum(&topic, &group) + stretch).min(end - 1),
            Duration::from_secs(120),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..100))).await;
        engine.kill_9();
        // Invariant: no committed offset is ever ahead of the durable write.
        let store = backend.open(dir.path()).await;
        let state = offsets(&topic, &group);
        for (p, committed, _) in &state {
            let durable = store
                .unit_offset(&UnitId::new(topic.clone(), *p))
                .await
                .expect("offset");
            if let Some(c) = committed {
                assert!(
                    durable.is_some_and(|d| d >= *c),
                    "crash {crash}, partition {p}: committed {c} ahead of durable {durable:?}"
                );
            }
        }
        let done: i64 = state.iter().map(|(_, c, _)| c.unwrap_or(0)).sum();
        eprintln!(
            "[{}] crash {crash}: kill -9; {done} of {} positions committed",
            backend.label(),
            state.iter().map(|s| s.2).sum::<i64>()
        );
    }
    let engine = on_source(dir.path(), &group, port, backend, &source);
    engine.wait_ready().await;
    if let Err(state) = caught_up_within(&topic, &group, Duration::from_secs(300)).await {
        // Which side stalled: the store's durable offsets beside the group's commits (a CQL
        // store can be read beside the running engine; the engine's log shows as it drops).
        let mut durable = Vec::new();
        if matches!(backend, Backend::Cql) {
            let store = backend.open(dir.path()).await;
            for (p, ..) in &state {
                let unit = UnitId::new(topic.clone(), *p);
                durable.push((*p, store.unit_offset(&unit).await.expect("offset")));
            }
        }
        panic!("engine did not catch up in 300 s: committed {state:?}, durable {durable:?}");
    }
    engine.stop();
    let store = backend.open(dir.path()).await;
    assert_store_matches(&*store, &produced, &topic, &source).await;
    delete_topic(&topic).await;
}

/// The events the store holds for `tenants`.
async fn stored_count(store: &dyn Store, tenants: &BTreeSet<String>) -> usize {
    let mut n = 0;
    for tenant in tenants {
        n += store
            .read_events(tenant, 0, usize::MAX)
            .await
            .expect("read")
            .len();
    }
    n
}

async fn wait_stored(store: &dyn Store, tenants: &BTreeSet<String>, want: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while stored_count(store, tenants).await < want {
        assert!(std::time::Instant::now() < deadline, "not all stored");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// R-IN-7 on CQL: a unit's offset, and the Kafka commit with it, may trail its durable batches
/// (`STREAMING_HUB_CQL_UNIT_ADVANCE_MS`, here longer than the test), never passing what the store
/// records; a graceful stop moves what trails, so the group's position reaches the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_in_7_trailing_offsets_on_cql_are_committed_at_a_graceful_stop() {
    let _alone = exclusive_broker().await;
    let ns = format!("c{}", uuid::Uuid::now_v7().simple());
    let source = ns.clone();
    let topic = format!("lerian.streaming.{source}");
    let dir = tempfile::tempdir().expect("tempdir");
    let group = format!("{ns}-group");
    let engine = Engine::start_with(
        dir.path(),
        &group,
        free_port(),
        Backend::Cql,
        &[
            ("STREAMING_HUB_KAFKA_SOURCES", source.as_str()),
            ("STREAMING_HUB_CQL_UNIT_ADVANCE_MS", "600000"),
        ],
    );
    engine.wait_ready().await;
    let store = Backend::Cql.open(dir.path()).await;
    // Each unit's first batch moves its offset; the second round's batches trail it.
    let first = produce_workload(&topic, &source, &ns, 2_000, 21).await;
    let mut tenants: BTreeSet<String> = first.unique.keys().cloned().collect();
    let mut want: usize = first.unique.values().map(Vec::len).sum();
    wait_stored(store.as_ref(), &tenants, want).await;
    let second = produce_workload(&topic, &source, &ns, 2_000, 22).await;
    tenants.extend(second.unique.keys().cloned());
    want += second.unique.values().map(Vec::len).sum::<usize>();
    wait_stored(store.as_ref(), &tenants, want).await;
    tokio::time::sleep(Duration::from_secs(1)).await; // the consumer commits every 100 ms
    let end: i64 = offsets(&topic, &group).iter().map(|s| s.2).sum();
    assert!(
        committed_sum(&topic, &group) < end,
        "the second round's batches trail the offset while the interval runs"
    );
    for (p, committed, _) in offsets(&topic, &group) {
        let durable = store
            .unit_offset(&UnitId::new(topic.clone(), p))
            .await
            .expect("offset");
        if let Some(c) = committed {
            assert!(
                durable.is_some_and(|d| d >= c),
                "partition {p}: committed {c} ahead of the store's {durable:?}"
            );
        }
    }
    engine.stop();
    for (p, committed, high) in offsets(&topic, &group) {
        assert_eq!(committed, Some(high), "partition {p}: moved at the stop");
        let durable = store
            .unit_offset(&UnitId::new(topic.clone(), p))
            .await
            .expect("offset");
        assert_eq!(durable, Some(high), "partition {p}: the store's too");
    }
    delete_topic(&topic).await;
}
