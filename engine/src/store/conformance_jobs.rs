//! The delivery half of the store conformance suite: jobs written with their events (R-DI-1),
//! paged per tenant, leased, settled, recovered (R-DI-8), dead-lettered and replayed.

use std::collections::HashSet;
use std::sync::Arc;

use uuid::Uuid;

use super::conformance::event;
use super::{
    AttemptRecord, DeliveryStep, DueQuery, Fence, IngestBatch, Lane, Matches, Settled, Settlement,
    SharedRooms, Store, UnitId,
};

/// Runs every test on lanes `first_lane .. first_lane + 4`, which nothing else may use (a store
/// shared between runs, like a CQL keyspace, needs lanes of its own per run).
pub async fn run_all(store: Arc<dyn Store>, ns: &str, first_lane: Lane) {
    jobs_are_written_with_their_events_once(&*store, ns, first_lane + 1).await;
    leases_retries_dead_letters_and_replay(&*store, ns, first_lane + 2).await;
    lapsed_leases_count_as_recoveries_then_poison(&*store, ns, first_lane + 3).await;
    a_cold_tenant_is_paged_beside_a_hot_backlog(&*store, ns, first_lane).await;
    a_shared_room_bounds_the_queues_of_one_destination(&*store, ns, first_lane).await;
}

pub fn attempt(success: bool, at_ms: i64) -> AttemptRecord {
    AttemptRecord {
        at_ms,
        success,
        error_class: (!success).then(|| "http_status".into()),
        status_code: Some(if success { 204 } else { 503 }),
        detail: String::new(),
        duration_ms: 2,
    }
}

/// A page of `lane` due at `now`, at most `per_tenant` of a queue and `limit` in all.
fn query(
    lane: Lane,
    now: i64,
    (per_tenant, limit): (usize, usize),
    skip: HashSet<u128>,
) -> DueQuery {
    DueQuery {
        lanes: vec![lane],
        now_ms: now,
        per_tenant,
        limit,
        rotation: 0,
        skip,
        pass_over: HashSet::new(),
        rooms: Default::default(),
    }
}

pub(super) async fn due(store: &dyn Store, lane: Lane, now: i64) -> Vec<super::JobRecord> {
    store
        .due_jobs(query(lane, now, (1000, 10_000), HashSet::new()))
        .await
        .expect("due jobs")
        .jobs
}

/// Cancels every job of `lane` due at `now`, so the lane is empty for the next test.
async fn cancel_every_due_job(store: &dyn Store, lane: Lane, now: i64) {
    let all: Vec<Settlement> = due(store, lane, now)
        .await
        .into_iter()
        .map(|j| Settlement {
            job: j.id,
            settled: Settled::Cancelled,
        })
        .collect();
    store
        .delivery_step(step(all, vec![], now))
        .await
        .expect("clean up");
}

pub(super) async fn write_with_jobs(
    store: &dyn Store,
    unit: &UnitId,
    lane: Lane,
    events: Vec<super::InboxEvent>,
    subs: &[Uuid],
) {
    let batch = IngestBatch {
        matches: events.iter().map(|_| Matches(subs.to_vec())).collect(),
        events,
        lane,
        ..Default::default()
    };
    store
        .write_batch(unit, Fence::UNFENCED, Arc::new(batch))
        .await
        .expect("batch written");
}

pub(super) fn step(settle: Vec<Settlement>, start: Vec<u128>, now: i64) -> DeliveryStep {
    DeliveryStep {
        settle,
        start,
        lease_until_ms: now + 60_000,
        now_ms: now,
        recovery_limit: 5,
    }
}

pub async fn jobs_are_written_with_their_events_once(store: &dyn Store, ns: &str, lane: Lane) {
    let tenant = format!("{ns}-jobs");
    let unit = UnitId::new(format!("http:{ns}-jobs"), 0);
    let subs = [Uuid::now_v7(), Uuid::now_v7()];
    let ev = event(&tenant, "x.created");
    let now = ev.received_at_ms;
    write_with_jobs(store, &unit, lane, vec![ev.clone()], &subs).await;
    // R-IN-6: the replayed event is a duplicate and creates no second job.
    write_with_jobs(store, &unit, lane, vec![ev.clone()], &subs).await;
    let jobs: Vec<_> = due(store, lane, now).await;
    let mine: Vec<_> = jobs.iter().filter(|j| *j.tenant == *tenant).collect();
    assert_eq!(
        mine.len(),
        2,
        "{ns}: one job per match, none for the duplicate"
    );
    assert!(mine.iter().all(|j| j.event_id == ev.id && j.attempts == 0));
    let got: HashSet<Uuid> = mine.iter().map(|j| j.subscription).collect();
    assert_eq!(got, subs.iter().copied().collect());
    // An event matching nothing makes no job (R-MA-2).
    write_with_jobs(store, &unit, lane, vec![event(&tenant, "x.other")], &[]).await;
    assert_eq!(
        due(store, lane, now)
            .await
            .iter()
            .filter(|j| *j.tenant == *tenant)
            .count(),
        2
    );
    // Clean up for the other tests of this lane.
    let done = mine
        .iter()
        .map(|j| Settlement {
            job: j.id,
            settled: Settled::Cancelled,
        })
        .collect();
    store
        .delivery_step(step(done, vec![], now))
        .await
        .expect("cancel");
    assert!(due(store, lane, now)
        .await
        .iter()
        .all(|j| *j.tenant != *tenant));
}

pub async fn leases_retries_dead_letters_and_replay(store: &dyn Store, ns: &str, lane: Lane) {
    let tenant = format!("{ns}-lease");
    let unit = UnitId::new(format!("http:{ns}-lease"), 0);
    let sub = Uuid::now_v7();
    let ev = event(&tenant, "x.created");
    let now = ev.received_at_ms;
    write_with_jobs(store, &unit, lane, vec![ev.clone()], &[sub]).await;
    let job = due(store, lane, now)
        .await
        .into_iter()
        .find(|j| *j.tenant == *tenant)
        .expect("job");

    // Leased: started with its event, and no longer due until the lease lapses.
    let out = store
        .delivery_step(step(vec![], vec![job.id], now))
        .await
        .expect("lease");
    assert_eq!(out.started.len(), 1);
    assert_eq!(out.started[0].event.event.id, ev.id);
    assert_eq!(out.started[0].job.starts, 1);
    assert!(due(store, lane, now + 1)
        .await
        .iter()
        .all(|j| j.id != job.id));

    // A failed attempt: due again at the retry time, one attempt counted, the streak opened.
    let retry = Settlement {
        job: job.id,
        settled: Settled::RetryAt(now + 5_000, attempt(false, now)),
    };
    let out = store
        .delivery_step(step(vec![retry], vec![], now))
        .await
        .expect("retry");
    assert_eq!(out.streaks.len(), 1, "{ns}: a failure reports the streak");
    assert!(due(store, lane, now + 4_999)
        .await
        .iter()
        .all(|j| j.id != job.id));
    let again = due(store, lane, now + 5_000)
        .await
        .into_iter()
        .find(|j| j.id == job.id);
    assert_eq!(again.map(|j| j.attempts), Some(1));

    // Dead-lettered: gone from the jobs, listed with its reason and last attempt.
    let dead = Settlement {
        job: job.id,
        settled: Settled::DeadLetter {
            reason: "attempts exhausted after 2".into(),
            attempt: Some(attempt(false, now + 5_000)),
        },
    };
    store
        .delivery_step(step(vec![dead], vec![], now + 5_000))
        .await
        .expect("bury");
    assert!(due(store, lane, i64::MAX / 2)
        .await
        .iter()
        .all(|j| j.id != job.id));
    let (letters, next) = store
        .dead_letters(&tenant, sub, None, 10)
        .await
        .expect("list");
    assert_eq!(letters.len(), 1);
    assert_eq!(next, None);
    assert_eq!(letters[0].job.attempts, 2);
    assert_eq!(letters[0].reason, "attempts exhausted after 2");
    let stats = store.delivery_stats(&tenant, sub).await.expect("stats");
    assert_eq!((stats.failed_attempts, stats.dead_letters), (2, 1));
    // Another tenant sees none of it.
    let (other, _) = store
        .dead_letters("someone-else", sub, None, 10)
        .await
        .expect("list");
    assert!(other.is_empty());

    // Replayed: a job again, due now, with a fresh budget; delivered, the streak clears.
    let n = store
        .replay_dead_letters(&tenant, sub, None, now + 6_000)
        .await
        .expect("replay");
    assert_eq!(n, 1);
    assert!(store
        .dead_letters(&tenant, sub, None, 10)
        .await
        .expect("list")
        .0
        .is_empty());
    let back = due(store, lane, now + 6_000)
        .await
        .into_iter()
        .find(|j| j.id == job.id);
    assert_eq!(back.as_ref().map(|j| (j.attempts, j.starts)), Some((0, 0)));
    let ok = Settlement {
        job: job.id,
        settled: Settled::Delivered(attempt(true, now + 6_000)),
    };
    store
        .delivery_step(step(vec![ok], vec![], now + 6_000))
        .await
        .expect("deliver");
    assert!(due(store, lane, i64::MAX / 2)
        .await
        .iter()
        .all(|j| j.id != job.id));
    let stats = store.delivery_stats(&tenant, sub).await.expect("stats");
    assert_eq!(stats.delivered, 1);
    assert_eq!(
        stats.streak.first_failure_ms, None,
        "one success clears the streak"
    );
    assert_eq!(stats.recent.len(), 3);
}

pub async fn lapsed_leases_count_as_recoveries_then_poison(
    store: &dyn Store,
    ns: &str,
    lane: Lane,
) {
    let tenant = format!("{ns}-poison");
    let unit = UnitId::new(format!("http:{ns}-poison"), 0);
    let sub = Uuid::now_v7();
    let ev = event(&tenant, "x.created");
    let mut now = ev.received_at_ms;
    write_with_jobs(store, &unit, lane, vec![ev], &[sub]).await;
    let job = due(store, lane, now)
        .await
        .into_iter()
        .find(|j| *j.tenant == *tenant)
        .expect("job");
    // Five attempts start and never report (the worker dies each time): the leases lapse.
    for started in 1..=5 {
        let out = store
            .delivery_step(step(vec![], vec![job.id], now))
            .await
            .expect("lease");
        assert_eq!(out.started.len(), 1, "{ns}: start {started}");
        now += 60_001;
        let lapsed = due(store, lane, now)
            .await
            .into_iter()
            .find(|j| j.id == job.id);
        assert_eq!(lapsed.map(|j| j.recoveries()), Some(started));
    }
    // The sixth start is refused: dead-lettered as poison (R-DI-8).
    let out = store
        .delivery_step(step(vec![], vec![job.id], now))
        .await
        .expect("poison");
    assert!(out.started.is_empty());
    assert_eq!(out.poisoned, vec![job.id]);
    let (letters, _) = store
        .dead_letters(&tenant, sub, None, 10)
        .await
        .expect("list");
    assert!(
        letters[0].reason.starts_with("poison"),
        "{}",
        letters[0].reason
    );
}

pub async fn a_cold_tenant_is_paged_beside_a_hot_backlog(store: &dyn Store, ns: &str, lane: Lane) {
    let hot = format!("{ns}-hot");
    let cold = format!("{ns}-cold");
    let unit = UnitId::new(format!("http:{ns}-fair"), 0);
    let sub = Uuid::now_v7();
    let backlog: Vec<_> = (0..300).map(|_| event(&hot, "x.created")).collect();
    let now = backlog[0].received_at_ms;
    write_with_jobs(store, &unit, lane, backlog, &[sub]).await;
    write_with_jobs(store, &unit, lane, vec![event(&cold, "x.created")], &[sub]).await;
    let page = store
        .due_jobs(query(lane, now, (16, 32), HashSet::new()))
        .await
        .expect("page");
    assert!(
        page.more,
        "{ns}: a page cut short by its limits says more is due"
    );
    let page = page.jobs;
    assert!(
        page.iter().any(|j| *j.tenant == *cold),
        "{ns}: the cold tenant is on the first page"
    );
    assert!(page.iter().filter(|j| *j.tenant == *hot).count() <= 16);
    // Held jobs are passed over: the next page brings the hot tenant's next ones.
    let held: HashSet<u128> = page.iter().map(|j| j.id).collect();
    let next = store
        .due_jobs(query(lane, now, (16, 32), held.clone()))
        .await
        .expect("page")
        .jobs;
    assert!(next.iter().all(|j| !held.contains(&j.id)));
    assert!(!next.is_empty());
    // Pages until one says nothing more is due: by then every job was on one.
    let mut seen: HashSet<u128> = held.into_iter().chain(next.iter().map(|j| j.id)).collect();
    let mut pages = 0;
    loop {
        let skip = seen.clone();
        let page = (store.due_jobs(query(lane, now, (1000, 10_000), skip)).await).expect("page");
        seen.extend(page.jobs.iter().map(|j| j.id));
        pages += 1;
        if !page.more || pages == 6 {
            break;
        }
    }
    assert_eq!(
        seen.len(),
        301,
        "{ns}: a page saying no more came after every job"
    );
    // The queues of subscriptions passed over are not read (their destination is full, R-DI-3).
    let other = Uuid::now_v7();
    let elsewhere = event(&cold, "x.created");
    let now = now.max(elsewhere.received_at_ms);
    write_with_jobs(store, &unit, lane, vec![elsewhere], &[other]).await;
    let passing_over = DueQuery {
        pass_over: HashSet::from([sub.as_u128()]),
        ..query(lane, now, (1000, 10_000), HashSet::new())
    };
    let page = store.due_jobs(passing_over).await.expect("page");
    let read: Vec<Uuid> = page.jobs.iter().map(|j| j.subscription).collect();
    assert_eq!(
        read,
        vec![other],
        "{ns}: only the queue of the subscription not passed over is read"
    );
    cancel_every_due_job(store, lane, now).await;
}

/// Two subscriptions posting to one destination share its room (R-DI-3): a page returns about
/// that many of their two queues together, names what the room cut short, and reads a third
/// queue in full.
pub async fn a_shared_room_bounds_the_queues_of_one_destination(
    store: &dyn Store,
    ns: &str,
    lane: Lane,
) {
    let tenant = format!("{ns}-room");
    let unit = UnitId::new(format!("http:{ns}-room"), 0);
    let (a, b, c) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    let events: Vec<_> = (0..10).map(|_| event(&tenant, "x.created")).collect();
    let now = events
        .iter()
        .map(|e| e.received_at_ms)
        .max()
        .unwrap_or_default();
    write_with_jobs(store, &unit, lane, events, &[a, b, c]).await;
    let mut rooms = SharedRooms::default();
    rooms.add([a.as_u128(), b.as_u128()], 5);
    let shared = DueQuery {
        rooms,
        ..query(lane, now, (1000, 10_000), HashSet::new())
    };
    let page = store.due_jobs(shared.clone()).await.expect("page");
    let of = |s: Uuid| page.jobs.iter().filter(|j| j.subscription == s).count();
    // A store reading queues at once splits the room evenly among them, rounding up.
    assert!(
        (5..=6).contains(&(of(a) + of(b))),
        "{ns}: the shared room bounds both queues together: {} and {}",
        of(a),
        of(b)
    );
    assert_eq!(of(c), 10, "{ns}: a queue no room names is read in full");
    assert!(
        !page.cut.is_empty()
            && page
                .cut
                .is_subset(&HashSet::from([a.as_u128(), b.as_u128()])),
        "{ns}: the queues the room cut short are named, and only those: {:?}",
        page.cut
    );
    // The jobs held are passed over: the next page within the room brings the next ones.
    let held: HashSet<u128> = page.jobs.iter().map(|j| j.id).collect();
    let next = DueQuery {
        skip: held.clone(),
        ..shared
    };
    let next = store.due_jobs(next).await.expect("page").jobs;
    assert!(next
        .iter()
        .all(|j| !held.contains(&j.id) && j.subscription != c));
    assert!((5..=6).contains(&next.len()), "{ns}: {} jobs", next.len());
    cancel_every_due_job(store, lane, now).await;
}
