//! The CQL store against the real CQL server: the shared conformance suite (R-OP-2), plus the
//! recovery paths only a store without multi-partition transactions has.

use std::sync::Arc;

use std::collections::HashSet;

use hub_engine::store::conformance::{event, run_all, write};
use hub_engine::store::conformance_jobs::attempt;
use hub_engine::store::cql::{CqlSettings, CqlStore};
use hub_engine::store::{
    DeliveryStep, DueQuery, EventLog, Fence, Ingest, IngestBatch, Jobs, Lane, LaneHolds, Matches,
    Settled, Settlement, Store, StoreOps, UnitId,
};
use hub_tests::{report, require, unique, CQL};
use scylla::client::session_builder::SessionBuilder;

/// Writes the dedup claim a crashed writer leaves: origin and intended seq, nothing in the log.
async fn leave_claim(
    session: &scylla::client::session::Session,
    ev: &hub_engine::store::InboxEvent,
    origin: String,
    intent: i64,
) {
    let hour = i64::try_from(ev.id.get_timestamp().expect("v7").to_unix().0 / 3600).expect("hour");
    session
        .query_unpaged(
            "INSERT INTO hub_it.dedup_claims \
             (tenant, id_bucket, id, attempt, origin, claimed_at, intent) \
             VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                &ev.tenant,
                hour,
                ev.id,
                rand::random::<i64>(),
                origin,
                0_i64,
                intent,
            ),
        )
        .await
        .expect("leave a claim");
}

/// Tiny buckets and appends, so every run crosses bucket and batch boundaries many times.
fn settings() -> CqlSettings {
    CqlSettings {
        nodes: vec![CQL.into()],
        keyspace: "hub_it".into(),
        bucket_size: 8,
        append_bytes: 1024,
        ..CqlSettings::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_op_2_cql_store_passes_the_conformance_suite() {
    require("cassandra", CQL);
    let store = CqlStore::connect(settings()).await.expect("connect");
    let ns = unique("cql");
    run_all(Arc::new(store), &ns).await;
    report(
        "cassandra",
        &format!("{CQL}: store conformance suite passed (namespace {ns})"),
    );
}

/// Lanes of their own for this run: the keyspace outlives runs, and a lane is held by one store
/// (process) at a time.
fn fresh_lanes() -> Lane {
    let spread = (uuid::Uuid::now_v7().as_u128() % 100_000_000) as u32;
    1_000 + spread * 8
}

/// A store on the CQL server, a namespace and lanes no other test pages.
async fn jobs_store(name: &str) -> (CqlStore, String, Lane) {
    require("cassandra", CQL);
    let store = CqlStore::connect(settings()).await.expect("connect");
    (store, unique(name), fresh_lanes())
}

/// R-OP-5: rows written with short TTLs are gone after their windows, as on the embedded store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_op_5_cql_store_expires_everything_after_its_window() {
    use hub_engine::store::conformance_retention as retention;
    require("cassandra", CQL);
    let windows = retention::short_windows();
    let store = CqlStore::connect(CqlSettings {
        retention_ttl_s: windows.events_s,
        dedup_ttl_s: windows.dedup_s,
        forensics_ttl_s: windows.forensics_s,
        ..settings()
    })
    .await
    .expect("connect");
    let ns = unique("cqlret");
    retention::everything_expires_after_its_window(Arc::new(store), &ns, fresh_lanes()).await;
    report(
        "cassandra",
        &format!("{CQL}: events, dedup marks, forensics and dead letters expired by TTL ({ns})"),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_di_1_cql_store_passes_the_delivery_conformance_suite() {
    let (store, ns, lanes) = jobs_store("cqljobs").await;
    hub_engine::store::conformance_jobs::run_all(Arc::new(store), &ns, lanes).await;
    report(
        "cassandra",
        &format!(
            "{CQL}: delivery conformance suite passed (lanes {lanes}..{})",
            lanes + 4
        ),
    );
}

/// R-DI-1 with no recent events kept: every leased job's event is read back from the log (a
/// read per tenant bucket of a step, `seq IN …`), as after a restart or deep in a backlog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_di_1_cql_store_reading_every_event_back_passes_the_delivery_conformance_suite() {
    require("cassandra", CQL);
    let store = Arc::new(
        CqlStore::connect(CqlSettings {
            recent_events_bytes: 0,
            ..settings()
        })
        .await
        .expect("connect"),
    );
    let (ns, lanes) = (unique("cqljobsread"), fresh_lanes());
    hub_engine::store::conformance_jobs::run_all(store.clone(), &ns, lanes).await;
    let reads = sent(&store, "select tenant_log");
    assert!(
        reads > 0,
        "the leased jobs' events were read back from the log"
    );
    report(
        "cassandra",
        &format!("{CQL}: delivery conformance suite passed reading events back ({reads} reads)"),
    );
}

async fn due_of(store: &dyn Store, lane: Lane, now: i64) -> Vec<hub_engine::store::JobRecord> {
    store
        .due_jobs(DueQuery {
            lanes: vec![lane],
            now_ms: now,
            per_tenant: 100,
            limit: 1000,
            rotation: 0,
            skip: HashSet::new(),
            pass_over: HashSet::new(),
            rooms: Default::default(),
        })
        .await
        .expect("due jobs")
        .jobs
}

/// R-DI-1 / R-IN-7: a crash after the append but before the jobs (the batch was not finished, so
/// the offset did not move) is replayed as the event's own claim: the replay writes the jobs. A
/// later replay of the same batch does not undo what delivery did to them since.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_di_1_cql_replay_writes_the_jobs_a_crash_left_out_and_never_undoes_a_lease() {
    let (store, ns, lane) = jobs_store("cqljobreplay").await;
    let unit = UnitId::new(format!("lerian.streaming.{ns}"), 0);
    let mut ev = event(&format!("{ns}-t"), "x.created");
    ev.offset = 7;
    let now = ev.received_at_ms;
    let sub = uuid::Uuid::now_v7();
    let (fence, _) = store.claim_unit(&unit).await.expect("claim unit");
    let batch = |matches: Vec<Matches>| {
        Arc::new(IngestBatch {
            events: vec![ev.clone()],
            matches,
            lane,
            next_offset: Some(8),
            ..Default::default()
        })
    };
    // The crashed attempt: the event appended, no jobs (as if it died right after the append).
    let first = store
        .write_batch(&unit, fence, batch(vec![]))
        .await
        .expect("first");
    assert_eq!(first.stored.len(), 1);
    assert!(due_of(&store, lane, now).await.is_empty());
    // The replay: the event is a duplicate, its jobs are written.
    let replay = store
        .write_batch(&unit, fence, batch(vec![Matches(vec![sub])]))
        .await
        .expect("replay");
    assert_eq!(replay.duplicates.len(), 1, "no second copy of the event");
    let jobs = due_of(&store, lane, now).await;
    assert_eq!(jobs.len(), 1, "the replay wrote the job");
    assert_eq!((jobs[0].event_id, jobs[0].subscription), (ev.id, sub));
    // Lease it; a further replay of the batch must not bring the job back as due.
    let leased = store
        .delivery_step(DeliveryStep {
            settle: vec![],
            start: vec![jobs[0].id],
            lease_until_ms: now + 60_000,
            now_ms: now,
            recovery_limit: 5,
        })
        .await
        .expect("lease");
    assert_eq!(leased.started.len(), 1);
    assert_eq!(leased.started[0].event.event.id, ev.id);
    store
        .write_batch(&unit, fence, batch(vec![Matches(vec![sub])]))
        .await
        .expect("second replay");
    assert!(
        due_of(&store, lane, now + 1).await.is_empty(),
        "the lease stands"
    );
    let lapsed = due_of(&store, lane, now + 60_000).await;
    assert_eq!(lapsed.len(), 1);
    assert_eq!(lapsed[0].starts, 1, "the lease is counted once");
    report(
        "cassandra",
        &format!("{CQL}: a replayed batch wrote its missing job once and left its lease alone"),
    );
}

/// R-DI-1: a crash after an event's job rows and before its queue is touched (a new queue: no
/// page lists it yet); the replay (a later `received_at_ms`, as a re-read Kafka record has) must
/// leave each job due exactly once. A replayed job takes the stored event's time, so it rewrites
/// the row its first attempt wrote: a row keyed by the replay's own time would be a second copy of
/// the job (and, when job and due index were two tables, the first row could win a tie at the
/// claim's timestamp and name a due row never written — the CI run where a kill -9 left
/// thousands of deliveries undone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_di_1_cql_a_replay_after_a_crash_before_the_queue_touch_keeps_every_job_due_once() {
    let (store, ns, lane) = jobs_store("cqlhalfjobs").await;
    let tenant = format!("{ns}-t");
    let unit = UnitId::new(format!("lerian.streaming.{ns}"), 0);
    let sub = uuid::Uuid::now_v7();
    const EVENTS: usize = 16;
    let events: Vec<_> = (0..EVENTS)
        .map(|i| {
            let mut ev = event(&tenant, "x.created");
            ev.offset = i as i64;
            // Low bits that the replays' later times wrap past (see `later`).
            ev.received_at_ms = ev.received_at_ms / 64 * 64 + 60;
            ev
        })
        .collect();
    let (fence, _) = store.claim_unit(&unit).await.expect("claim unit");
    let batch = |events: Vec<hub_engine::store::InboxEvent>| {
        Arc::new(IngestBatch {
            matches: vec![Matches(vec![sub]); events.len()],
            events,
            lane,
            next_offset: Some(EVENTS as i64),
            ..Default::default()
        })
    };
    // The crash: the events appended, their job rows written, their queue not touched.
    store.crash_after_job_rows();
    let crashed = store.write_batch(&unit, fence, batch(events.clone())).await;
    assert!(crashed.is_err(), "the crash point stopped the write");
    assert!(due_of(&store, lane, events[0].received_at_ms + 3_600_000)
        .await
        .is_empty());
    // Replayed a second or so later, each by a different amount.
    let later: Vec<_> = events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let mut e = e.clone();
            e.received_at_ms += 1_000 + 8 * i as i64;
            e
        })
        .collect();
    let replay = store
        .write_batch(&unit, fence, batch(later))
        .await
        .expect("replay");
    assert_eq!(
        replay.duplicates.len(),
        EVENTS,
        "no second copy of any event"
    );
    let far = events[0].received_at_ms + 3_600_000;
    let mut due: Vec<uuid::Uuid> = due_of(&store, lane, far)
        .await
        .into_iter()
        .map(|j| j.event_id)
        .collect();
    due.sort();
    let mut want: Vec<uuid::Uuid> = events.iter().map(|e| e.id).collect();
    want.sort();
    assert_eq!(due, want, "every job is due after the replay, once");
    report(
        "cassandra",
        &format!(
            "{CQL}: a replay after a crash before the queue touch left all {EVENTS} jobs due, once"
        ),
    );
}

/// R-DI-8 across engines: a lane is paged by one holder at a time; when the holder is gone (its
/// hold lapses) the next one takes the lane and its leased jobs are due at once, counted as
/// recoveries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_di_8_cql_a_new_lane_holder_releases_the_old_holders_leases() {
    require("cassandra", CQL);
    let first = CqlStore::connect(settings()).await.expect("connect");
    let second = CqlStore::connect(settings()).await.expect("connect");
    let ns = unique("cqlhold");
    let lane = fresh_lanes();
    let unit = UnitId::new(format!("http:{ns}"), 0);
    let ev = event(&format!("{ns}-t"), "x.created");
    let now = ev.received_at_ms;
    let batch = IngestBatch {
        events: vec![ev.clone()],
        matches: vec![Matches(vec![uuid::Uuid::now_v7()])],
        lane,
        ..Default::default()
    };
    first
        .write_batch(&unit, Fence::UNFENCED, Arc::new(batch))
        .await
        .expect("write");
    let jobs = due_of(&first, lane, now).await;
    assert_eq!(jobs.len(), 1);
    assert!(
        due_of(&second, lane, now).await.is_empty(),
        "a held lane is paged by its holder only"
    );
    // Leased far ahead: only the holder's release can make it due before then.
    let step = DeliveryStep {
        settle: vec![],
        start: vec![jobs[0].id],
        lease_until_ms: hub_engine::clock::now_ms() + 300_000,
        now_ms: now,
        recovery_limit: 5,
    };
    assert_eq!(
        first
            .delivery_step(step)
            .await
            .expect("lease")
            .started
            .len(),
        1
    );
    drop(first); // the holder is gone without a word, as after kill -9
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let released = loop {
        let due = due_of(&second, lane, hub_engine::clock::now_ms()).await;
        if !due.is_empty() || std::time::Instant::now() > deadline {
            break due;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    };
    assert_eq!(released.len(), 1, "the new holder released the lease");
    assert_eq!(
        released[0].recoveries(),
        1,
        "the lapse counts as a recovery"
    );
    report(
        "cassandra",
        &format!("{CQL}: a new lane holder took lane {lane} and released the old holder's lease"),
    );
}

/// R-IN-7 / R-IN-6: a crash after the dedup claim but before the append leaves a claim whose
/// origin is the record's own Kafka position. The replay must finish it, not drop it as a
/// duplicate; and a second replay must then drop it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_in_7_cql_replay_finishes_a_claim_left_by_a_crash() {
    require("cassandra", CQL);
    let store = CqlStore::connect(settings()).await.expect("connect");
    let ns = unique("cqlcrash");
    let tenant = format!("{ns}-t");
    let unit = UnitId::new(format!("lerian.streaming.{ns}"), 2);
    let mut ev = event(&tenant, "x.created");
    ev.offset = 41;

    // What a crashed writer leaves: the claim, naming seq 1, and nothing in the log.
    let session = SessionBuilder::new()
        .known_node(CQL)
        .build()
        .await
        .expect("session");
    leave_claim(&session, &ev, format!("{}/2/41", unit.topic), 1).await;

    let (fence, _) = store.claim_unit(&unit).await.expect("claim unit");
    let batch = Arc::new(IngestBatch {
        events: vec![ev.clone()],
        quarantined: vec![],
        next_offset: Some(42),
        ..Default::default()
    });
    let replay = store
        .write_batch(&unit, fence, batch.clone())
        .await
        .expect("replay");
    assert_eq!(
        replay.stored,
        vec![(tenant.clone(), ev.id, 1)],
        "the claim is finished"
    );
    let again = store
        .write_batch(&unit, fence, batch)
        .await
        .expect("second replay");
    assert!(again.stored.is_empty());
    assert_eq!(again.duplicates, vec![(tenant.clone(), ev.id)]);
    let read = store.read_events(&tenant, 0, 10).await.expect("read");
    assert_eq!(read.len(), 1);
    assert_eq!(read[0].event, ev);

    // A replayed batch in which one event's claim was left unfinished and the others are new:
    // that one must be finished too, in the partition's order.
    let mut left = event(&tenant, "x.created");
    left.offset = 50;
    let (b, c) = (event(&tenant, "x.created"), event(&tenant, "x.created"));
    leave_claim(&session, &left, format!("{}/2/50", unit.topic), 2).await;
    let mixed = store
        .write_batch(
            &unit,
            fence,
            Arc::new(IngestBatch {
                events: vec![left.clone(), b.clone(), c.clone()],
                quarantined: vec![],
                next_offset: Some(53),
                ..Default::default()
            }),
        )
        .await
        .expect("mixed replay");
    let stored: Vec<_> = mixed.stored.iter().map(|s| s.1).collect();
    assert_eq!(
        stored,
        vec![left.id, b.id, c.id],
        "the unfinished claim is finished too"
    );
    let order: Vec<_> = store
        .read_events(&tenant, 0, 10)
        .await
        .expect("read")
        .iter()
        .map(|e| e.event.id)
        .collect();
    assert_eq!(
        order,
        vec![ev.id, left.id, b.id, c.id],
        "seq follows the partition's order, the finished claim included"
    );

    // The same id from another position while the first one's claim is unfinished: claims
    // order nothing, appends do. The copy that comes is stored; the first one's replay then
    // finds it stored under another origin and drops itself as a duplicate.
    let other_tenant = format!("{ns}-u");
    let mut first = event(&other_tenant, "x.created");
    first.offset = 7;
    leave_claim(&session, &first, format!("{}/2/7", unit.topic), 1).await;
    let mut resent = first.clone();
    resent.offset = 9;
    let out = write(&store, &unit, fence, vec![resent], 10).await;
    assert_eq!(out.stored, vec![(other_tenant.clone(), first.id, 1)]);
    let replayed = write(&store, &unit, fence, vec![first.clone()], 8).await;
    assert!(replayed.stored.is_empty(), "{replayed:?}");
    assert_eq!(replayed.duplicates, vec![(other_tenant.clone(), first.id)]);
    let log = store.read_events(&other_tenant, 0, 10).await.expect("read");
    assert_eq!(log.len(), 1, "stored once");
    report(
        "cassandra",
        "an unfinished claim is finished by its own replay; another origin's copy is stored once",
    );
}

/// R-IN-6: two writers of one id at once — two processes, each owning a partition the same
/// event reached — store it once. Claims are plain writes; the tenant's conditional append
/// orders the writers, and the one that loses the race reads the claims again and finds the
/// other's copy stored. The log stays gap-free and holds every id once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_in_6_cql_two_writers_of_one_id_at_once_store_it_once() {
    require("cassandra", CQL);
    let (a, b) = (
        CqlStore::connect(settings()).await.expect("connect a"),
        CqlStore::connect(settings()).await.expect("connect b"),
    );
    let ns = unique("cqlrace");
    let tenant = format!("{ns}-t");
    let topic = format!("lerian.streaming.{ns}");
    let (unit_a, unit_b) = (UnitId::new(topic.clone(), 0), UnitId::new(topic, 1));
    let (fence_a, _) = a.claim_unit(&unit_a).await.expect("claim a");
    let (fence_b, _) = b.claim_unit(&unit_b).await.expect("claim b");
    let rounds: u32 = 30;
    let mut stored = Vec::new();
    let mut shared_ids = Vec::new();
    for round in 0..rounds {
        let offset = i64::from(round) * 2;
        let mut shared_a = event(&tenant, "x.created");
        shared_a.offset = offset;
        let mut shared_b = shared_a.clone();
        shared_b.offset = offset + 1;
        shared_ids.push(shared_a.id);
        let mut own_a = event(&tenant, "x.created");
        own_a.offset = offset + 1;
        let mut own_b = event(&tenant, "x.created");
        own_b.offset = offset;
        let (out_a, out_b) = futures::join!(
            write(&a, &unit_a, fence_a, vec![shared_a, own_a], offset + 2),
            write(&b, &unit_b, fence_b, vec![own_b, shared_b], offset + 2),
        );
        stored.extend(out_a.stored);
        stored.extend(out_b.stored);
    }
    for id in &shared_ids {
        let times = stored
            .iter()
            .filter(|(_, stored_id, _)| stored_id == id)
            .count();
        assert_eq!(times, 1, "the shared event {id} is stored once");
    }
    let log = a.read_events(&tenant, 0, 1000).await.expect("read");
    let seqs: Vec<u64> = log.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (1..=3 * u64::from(rounds)).collect::<Vec<_>>(),
        "gap-free"
    );
    let ids: HashSet<_> = log.iter().map(|e| e.event.id).collect();
    assert_eq!(ids.len(), log.len(), "every id once");
    report(
        "cassandra",
        &format!("{CQL}: {rounds} ids written by two processes at once, each stored once"),
    );
}

/// R-OP-3 (issue 17): the CQL store counts what it sends, by statement, and tells the Paxos
/// rounds (its conditional writes and serial reads) from plain requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_op_3_cql_store_counts_its_requests_and_paxos_rounds_by_statement() {
    require("cassandra", CQL);
    let store = CqlStore::connect(settings()).await.expect("connect");
    assert!(store.cql_requests().is_empty(), "nothing sent yet");
    let ns = unique("cqlcount");
    let unit = UnitId::new(format!("lerian.streaming.{ns}"), 0);
    let (fence, _) = store.claim_unit(&unit).await.expect("claim unit");
    // Two events of one tenant and hour: their dedup claims go as one conditional batch.
    let tenant = format!("{ns}-t");
    let batch = Arc::new(IngestBatch {
        events: vec![event(&tenant, "x.created"), event(&tenant, "x.created")],
        quarantined: vec![],
        next_offset: Some(2),
        ..Default::default()
    });
    store.write_batch(&unit, fence, batch).await.expect("write");
    store.pending_jobs().await.expect("pending");

    let sent = store.cql_requests();
    let of = |statement: &str| {
        sent.iter()
            .find(|r| r.statement == statement)
            .unwrap_or_else(|| panic!("{statement} in {sent:?}"))
    };
    let advance = of("update units if");
    assert!(advance.requests >= 1, "{sent:?}");
    assert_eq!(
        advance.paxos, advance.requests,
        "a conditional write is a Paxos round"
    );
    let count = of("select job_counts");
    assert_eq!((count.requests, count.paxos), (1, 0), "a plain read is not");
    let claims = sent
        .iter()
        .find(|r| r.statement.starts_with("batch insert dedup_claims"))
        .unwrap_or_else(|| panic!("the dedup claims' batch in {sent:?}"));
    assert_eq!(
        (claims.requests, claims.paxos),
        (1, 0),
        "the claims of one dedup partition are one plain batch"
    );
    assert_eq!(of("select dedup_claims").paxos, 0, "{sent:?}");
    let append = of("batch update tenant_log if");
    assert_eq!(
        (append.requests, append.paxos),
        (1, 1),
        "one tenant's append is the batch's one Paxos round for its events"
    );
    assert!(
        sent.iter().all(|r| r.paxos <= r.requests && r.requests > 0),
        "{sent:?}"
    );
}

/// Requests of one statement the store sent so far.
fn sent(store: &CqlStore, statement: &str) -> u64 {
    store
        .cql_requests()
        .iter()
        .find(|r| r.statement == statement)
        .map_or(0, |r| r.requests)
}

/// R-DI-1 (issue 17: cost that follows work): a queue whose page found nothing to start is not
/// read again until something may be due — a wake of its lane, our lease running out, or the
/// bound on quiet — and then its job is found as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_di_1_cql_a_quiet_queue_is_read_again_only_when_something_may_be_due() {
    let (store, ns, lane) = jobs_store("cqlquiet").await;
    let unit = UnitId::new(format!("lerian.streaming.{ns}"), 0);
    let ev = event(&format!("{ns}-t"), "x.created");
    let now = ev.received_at_ms;
    let (fence, _) = store.claim_unit(&unit).await.expect("claim unit");
    let batch = Arc::new(IngestBatch {
        events: vec![ev.clone()],
        matches: vec![Matches(vec![uuid::Uuid::now_v7()])],
        lane,
        next_offset: Some(1),
        ..Default::default()
    });
    store.write_batch(&unit, fence, batch).await.expect("write");
    let jobs = due_of(&store, lane, now).await;
    assert_eq!(jobs.len(), 1);
    let step = DeliveryStep {
        settle: vec![],
        start: vec![jobs[0].id],
        lease_until_ms: now + 60_000,
        now_ms: now,
        recovery_limit: 5,
    };
    store.delivery_step(step).await.expect("lease");

    let reads = || sent(&store, "select queued_jobs");
    let before = reads();
    assert!(due_of(&store, lane, now + 1).await.is_empty(), "leased");
    assert_eq!(
        reads(),
        before + 1,
        "read once: nothing to start, the queue is quiet"
    );
    assert!(due_of(&store, lane, now + 2).await.is_empty());
    assert_eq!(reads(), before + 1, "quiet: not read");
    store.wake_pages(&[lane]);
    assert!(due_of(&store, lane, now + 3).await.is_empty());
    assert_eq!(reads(), before + 2, "a wake of its lane reads it");
    assert!(due_of(&store, lane, now + 2_000).await.is_empty());
    assert_eq!(reads(), before + 2, "quiet again");
    assert!(due_of(&store, lane, now + 2_010).await.is_empty());
    assert_eq!(reads(), before + 3, "read again past the bound on quiet");
    let lapsed = due_of(&store, lane, now + 60_000).await;
    assert_eq!(lapsed.len(), 1, "due again once our lease ran out");
}

/// R-DI-8 (issue 17): a batch writes its jobs leased by this process when it holds their lane,
/// so the lane starts them with no lease step; the lease counts for this process only, and the
/// job's row stays where another holder pages it at once. Without the lane's hold the jobs are
/// written unleased, and the outcome says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_di_8_cql_jobs_written_leased_by_their_batch_count_only_for_their_process() {
    let (store, ns, lane) = jobs_store("cqlleased").await;
    let unit = UnitId::new(format!("lerian.streaming.{ns}"), 0);
    let (fence, _) = store.claim_unit(&unit).await.expect("claim unit");
    let write = |offset: i64, lane: Lane| {
        let ev = event(&format!("{ns}-t"), "x.created");
        Arc::new(IngestBatch {
            events: vec![ev],
            matches: vec![Matches(vec![uuid::Uuid::now_v7()])],
            lane,
            next_offset: Some(offset),
            lease_until_ms: Some(hub_engine::clock::now_ms() + 60_000),
            ..Default::default()
        })
    };
    let now = hub_engine::clock::now_ms();
    assert!(
        due_of(&store, lane, now).await.is_empty(),
        "the lane is held"
    );
    let batch = write(1, lane);
    let outcome = store
        .write_batch(&unit, fence, batch.clone())
        .await
        .expect("write");
    assert!(outcome.jobs_leased, "held lane: written leased");
    let now = hub_engine::clock::now_ms();
    assert!(
        due_of(&store, lane, now).await.is_empty(),
        "leased by this process: not due here"
    );

    // Another process taking the lane (after this one died) finds the job due at once.
    store.release_lanes(vec![lane]).await.expect("let go");
    let other = CqlStore::connect(settings()).await.expect("connect");
    let found = due_of(&other, lane, now).await;
    assert_eq!(found.len(), 1, "another holder pages it at once");
    assert_eq!(found[0].event_id, batch.events[0].id);
    assert_eq!(found[0].starts, 1, "the batch's lease counted its start");

    // A lane this process does not hold: written unleased.
    let unheld = lane + 1;
    let outcome = store
        .write_batch(&unit, fence, write(2, unheld))
        .await
        .expect("write");
    assert!(
        !outcome.jobs_leased,
        "a lane not held here: written unleased"
    );
}

/// R-DI-1 (the tombstone limit): a queue is paged from a floor, never again from its start, so
/// a row that lands below the floor — a stalled batch's, a replay's, due minutes before it was
/// written — is announced by its writer and read by its key. Its holder finds it and the
/// announcement goes once the job is delivered; the holder writes down where the next holder
/// starts (a minute behind its floor).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_di_1_cql_a_row_written_below_its_queues_floor_is_announced_and_delivered() {
    let (store, ns, lane) = jobs_store("cqllate").await;
    let tenant = format!("{ns}-t");
    let unit = UnitId::new(format!("lerian.streaming.{ns}"), 0);
    let sub = uuid::Uuid::now_v7();
    let (fence, _) = store.claim_unit(&unit).await.expect("claim unit");
    let write = |ev: hub_engine::store::InboxEvent, next: i64| {
        Arc::new(IngestBatch {
            events: vec![ev],
            matches: vec![Matches(vec![sub])],
            lane,
            next_offset: Some(next),
            ..Default::default()
        })
    };
    // Leased, then delivered: its row goes.
    let deliver = |id: u128, now: i64| {
        let store = &store;
        async move {
            let lease = DeliveryStep {
                settle: vec![],
                start: vec![id],
                lease_until_ms: now + 60_000,
                now_ms: now,
                recovery_limit: 5,
            };
            store.delivery_step(lease).await.expect("lease");
            let settled = Settled::Delivered(attempt(true, now));
            let done = DeliveryStep {
                settle: vec![Settlement { job: id, settled }],
                start: vec![],
                lease_until_ms: now,
                now_ms: now,
                recovery_limit: 5,
            };
            store.delivery_step(done).await.expect("deliver");
        }
    };
    // A fresh job, paged and delivered: the queue's floor is now a few seconds behind.
    let mut fresh = event(&tenant, "x.created");
    fresh.received_at_ms = hub_engine::clock::now_ms();
    store
        .write_batch(&unit, fence, write(fresh.clone(), 1))
        .await
        .expect("write fresh");
    let now = hub_engine::clock::now_ms();
    let jobs = due_of(&store, lane, now).await;
    assert_eq!(jobs.len(), 1);
    deliver(jobs[0].id, now).await;
    let session = SessionBuilder::new()
        .known_node(CQL)
        .build()
        .await
        .expect("session");
    let hint: Option<(i64,)> = session
        .query_unpaged(
            "SELECT floor_ms FROM hub_it.queue_floors WHERE lane = ? AND tenant = ? \
             AND subscription = ?",
            (lane as i32, &tenant, sub),
        )
        .await
        .expect("read hint")
        .into_rows_result()
        .expect("rows")
        .maybe_first_row()
        .expect("row");
    let hint = hint.expect("a hint written at the first page").0;
    assert!(
        hint <= now - 60_000 && hint > now - 120_000,
        "a minute behind the floor: {} ms",
        now - hint
    );

    // A stalled batch: its event was received two minutes ago, its job row written now.
    let mut stalled = event(&tenant, "x.created");
    stalled.received_at_ms = hub_engine::clock::now_ms() - 120_000;
    stalled.offset = 1;
    store
        .write_batch(&unit, fence, write(stalled.clone(), 2))
        .await
        .expect("write stalled");
    let announced = || async {
        session
            .query_unpaged(
                "SELECT id FROM hub_it.late_jobs WHERE lane = ?",
                (lane as i32,),
            )
            .await
            .expect("read announcements")
            .into_rows_result()
            .expect("rows")
            .rows_num()
    };
    assert_eq!(announced().await, 1, "the late row is announced");
    // R-DI-3: while its destination is full, its subscription's announced rows are not read,
    // through more than one reading of the announcements (every 5 s).
    for _ in 0..24 {
        let passing_over = DueQuery {
            lanes: vec![lane],
            now_ms: hub_engine::clock::now_ms(),
            per_tenant: 100,
            limit: 1000,
            rotation: 0,
            skip: HashSet::new(),
            pass_over: HashSet::from([sub.as_u128()]),
            rooms: Default::default(),
        };
        let page = store.due_jobs(passing_over).await.expect("page");
        assert!(
            page.jobs.is_empty(),
            "a passed-over subscription's row is not read"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    assert_eq!(announced().await, 1, "nor its announcement forgotten");
    let mut found = Vec::new();
    for _ in 0..40 {
        found = due_of(&store, lane, hub_engine::clock::now_ms()).await;
        if !found.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    assert_eq!(found.len(), 1, "found by its announcement, once");
    assert_eq!(found[0].event_id, stalled.id);
    let now = hub_engine::clock::now_ms();
    deliver(found[0].id, now).await;
    for _ in 0..40 {
        due_of(&store, lane, hub_engine::clock::now_ms()).await;
        if announced().await == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    assert_eq!(announced().await, 0, "the announcement goes with its row");
    report(
        "cassandra",
        &format!("{CQL}: a job row written two minutes late was announced, found and delivered"),
    );
}
