//! Jobs leased by the ingest batch that creates them (issue 17): the start is counted in the
//! event's own frame, no page finds them while leased, a lease given back unattempted counts no
//! recovery, and a crash releases the rest, their start counted (R-DI-8).

use std::sync::Arc;

use uuid::Uuid;

use super::LogStore;
use crate::ingest::jobs::leased_written;
use crate::store::conformance::event;
use crate::store::conformance_jobs::{attempt, due, step};
use crate::store::{Fence, Ingest, IngestBatch, Jobs, Matches, Settled, Settlement, UnitId};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_di_8_a_job_leased_by_its_ingest_batch_counts_its_start_once_and_a_crash_releases_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (sub, tenant, lane) = (Uuid::now_v7(), "t-lease-at-ingest", 1);
    let unit = UnitId::new("http:lender", 0);
    let now = crate::clock::now_ms();
    let (delivered_id, returned_id, crashed_id) = {
        let store = LogStore::open(dir.path()).expect("open");
        assert!(store.leases_at_ingest());
        let events: Vec<_> = (0..3).map(|_| event(tenant, "x.created")).collect();
        let batch = IngestBatch {
            matches: events.iter().map(|_| Matches(vec![sub])).collect(),
            events,
            lane,
            lease_until_ms: Some(now + 60_000),
            ..Default::default()
        };
        let outcome = store
            .write_batch(&unit, Fence::UNFENCED, Arc::new(batch.clone()))
            .await
            .expect("write");
        let handed = leased_written(&batch, &outcome);
        assert_eq!(handed.len(), 3, "one leased job per match, with its event");
        for (s, (_, id, seq)) in handed.iter().zip(&outcome.stored) {
            assert_eq!((s.job.event_id, s.event.seq), (*id, *seq));
            assert_eq!((s.job.starts, s.job.due_at_ms), (1, now + 60_000));
        }
        assert!(
            due(&store, lane, now + 30_000).await.is_empty(),
            "no page finds a job while its ingest lease holds"
        );
        let ids = (handed[0].job.id, handed[1].job.id, handed[2].job.id);
        let settle = vec![
            Settlement {
                job: ids.0,
                settled: Settled::Delivered(attempt(true, now)),
            },
            // Not attempted (an open breaker): due again, its start given back.
            Settlement {
                job: ids.1,
                settled: Settled::Returned(now),
            },
        ];
        store
            .delivery_step(step(settle, vec![], now))
            .await
            .expect("settled");
        let jobs = due(&store, lane, now).await;
        let returned: Vec<_> = jobs.iter().map(|j| (j.id, j.starts)).collect();
        assert_eq!(
            returned,
            vec![(ids.1, 0)],
            "a returned lease counts no recovery"
        );
        ids
    };
    // The process dies with the third job leased and never attempted.
    let store = LogStore::open(dir.path()).expect("reopen");
    let mut jobs: Vec<_> = due(&store, lane, crate::clock::now_ms())
        .await
        .into_iter()
        .map(|j| (j.id, j.starts))
        .collect();
    jobs.sort_unstable();
    let mut expected = vec![(returned_id, 0), (crashed_id, 1)];
    expected.sort_unstable();
    assert_eq!(
        jobs, expected,
        "the crash's lease is released with its start counted; the delivered job is gone"
    );
    assert!(!jobs.iter().any(|(id, _)| *id == delivered_id));
}
