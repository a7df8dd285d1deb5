//! Pull (R-CP-14, R-DI-11 pull half): a pull subscription takes no jobs; a reader pages the
//! tenant's log in `seq` order and keeps what the subscription's rules match (key, origin,
//! majors, the same rules as push).
//!
//! - With `after`, a read is a plain range read from there; nothing durable changes.
//! - Without it, the read starts at the subscription's durable read position and moves it past
//!   what it returns, by compare and set: readers sharing a subscription get disjoint pages and
//!   together see every event once (a reader that loses the race reads again from the new
//!   position).
//! - A paused (or stopped) subscription reads empty pages. After a resume, a position read skips
//!   events received before the resume ("resume delivers only events that reach the hub after
//!   it", R-CP-11); `after` still reads them.
//!
//! No skip: the store never shows `seq = n` before every `seq < n` (R-IN-8), and the cursor only
//! moves past events this read has seen.

use hub_core::model::Subscription;

use crate::matching::{wants, EventFacts};
use crate::store::{EventLog, StoreError, StoredEvent};

/// Most events one read scans (kept or not): a subscription that matches little still answers
/// in bounded time, with a cursor past what it scanned.
pub const SCAN_MAX: usize = 10_000;
/// Events read from the store at a time.
const SCAN_CHUNK: usize = 1_000;
/// Lost position races tolerated before a read gives up (and answers 503).
const MOVE_ATTEMPTS: usize = 32;

/// One page: the kept events in `seq` order and the cursor for the next read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PullPage {
    pub items: Vec<StoredEvent>,
    pub next_after: u64,
}

/// Reads a page for `sub` (a pull subscription of the caller's tenant).
pub async fn read_page(
    store: &dyn EventLog,
    sub: &Subscription,
    after: Option<u64>,
    limit: usize,
) -> Result<PullPage, StoreError> {
    if let Some(after) = after {
        if !delivering(sub) {
            return Ok(empty(after));
        }
        return scan(store, sub, after, limit, None).await;
    }
    for _ in 0..MOVE_ATTEMPTS {
        let position = store.pull_position(&sub.tenant, sub.id).await?;
        if !delivering(sub) {
            return Ok(empty(position));
        }
        let page = scan(store, sub, position, limit, sub.marks.resumed_at_ms).await?;
        if page.next_after == position
            || store
                .advance_pull_position(&sub.tenant, sub.id, position, page.next_after)
                .await?
        {
            return Ok(page);
        }
    }
    Err(StoreError::Unavailable(
        "the read position kept moving under concurrent readers; retry".into(),
    ))
}

fn delivering(sub: &Subscription) -> bool {
    sub.enabled && !sub.paused && !sub.deleted
}

fn empty(at: u64) -> PullPage {
    PullPage {
        items: Vec::new(),
        next_after: at,
    }
}

/// Scans the log from `from` until `limit` events are kept, the log ends, or [`SCAN_MAX`]
/// events were scanned. Events received at or before `received_after` are passed over.
async fn scan(
    store: &dyn EventLog,
    sub: &Subscription,
    from: u64,
    limit: usize,
    received_after: Option<i64>,
) -> Result<PullPage, StoreError> {
    let mut page = empty(from);
    let mut scanned = 0;
    while scanned < SCAN_MAX {
        let chunk = store
            .read_events(&sub.tenant, page.next_after, SCAN_CHUNK)
            .await?;
        let read = chunk.len();
        scanned += read;
        if keep_from(chunk, sub, limit, received_after, &mut page) || read < SCAN_CHUNK {
            break;
        }
    }
    Ok(page)
}

/// Adds the events of `chunk` that `sub` wants to `page`, moving its cursor past each event
/// looked at; returns `true` once the page is full (the events after the last kept one stay
/// unread).
pub fn keep_from(
    chunk: Vec<StoredEvent>,
    sub: &Subscription,
    limit: usize,
    received_after: Option<i64>,
    page: &mut PullPage,
) -> bool {
    for stored in chunk {
        if page.items.len() >= limit {
            return true;
        }
        page.next_after = stored.seq;
        let ev = &stored.event;
        let facts = EventFacts {
            tenant: &ev.tenant,
            key: &ev.key,
            source: &ev.source,
            major: ev.schema_major,
        };
        let fresh = received_after.is_none_or(|r| ev.received_at_ms > r);
        if fresh && wants(sub, &facts) {
            page.items.push(stored);
        }
    }
    page.items.len() >= limit
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::conformance::event;
    use crate::store::Ingest;
    use hub_core::model::SinkKind;

    fn stored(seq: u64, key: &str, received: i64) -> StoredEvent {
        let mut ev = event("t", key);
        ev.received_at_ms = received;
        StoredEvent { seq, event: ev }
    }

    fn pull_sub(types: &[&str]) -> Subscription {
        let mut s = hub_core::control_store::conformance::subscription("t", "p");
        s.sink_kind = SinkKind::Pull;
        s.event_types = types.iter().map(|t| (*t).to_owned()).collect();
        s
    }

    #[test]
    fn r_cp_14_a_page_keeps_matching_events_and_its_cursor_never_passes_an_unreturned_one() {
        let sub = pull_sub(&["loan.approved"]);
        let chunk: Vec<StoredEvent> = (1..=6)
            .map(|i| {
                stored(
                    i,
                    if i % 2 == 0 {
                        "loan.approved"
                    } else {
                        "loan.rejected"
                    },
                    0,
                )
            })
            .collect();
        let mut page = empty(0);
        assert!(keep_from(chunk.clone(), &sub, 2, None, &mut page));
        let seqs: Vec<u64> = page.items.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, vec![2, 4]);
        assert_eq!(page.next_after, 4, "seq 5 and 6 were not looked at");

        let mut rest = empty(0);
        assert!(!keep_from(chunk, &sub, 10, None, &mut rest));
        assert_eq!(rest.next_after, 6, "non-matching events are passed over");
    }

    #[test]
    fn r_cp_11_after_a_resume_a_position_read_passes_over_events_received_before_it() {
        let sub = pull_sub(&[]);
        let chunk = vec![
            stored(1, "a.b", 100),
            stored(2, "a.b", 200),
            stored(3, "a.b", 300),
        ];
        let mut page = empty(0);
        keep_from(chunk, &sub, 10, Some(200), &mut page);
        let seqs: Vec<u64> = page.items.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, vec![3]);
        assert_eq!(page.next_after, 3);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn r_di_11_pull_reads_in_seq_order_and_position_reads_never_overlap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = crate::store::embedded::EmbeddedStore::open(&dir.path().join("hub.redb"))
            .expect("store");
        let batch = crate::store::IngestBatch {
            events: (0..25).map(|_| event("t", "a.b")).collect(),
            ..Default::default()
        };
        store
            .write_batch(
                &crate::store::UnitId::new("http:lender", 0),
                crate::store::Fence::UNFENCED,
                std::sync::Arc::new(batch),
            )
            .await
            .expect("written");
        let sub = pull_sub(&[]);
        let mut seen = Vec::new();
        loop {
            let page = read_page(&store, &sub, None, 7).await.expect("page");
            if page.items.is_empty() {
                break;
            }
            seen.extend(page.items.iter().map(|e| e.seq));
        }
        assert_eq!(
            seen,
            (1..=25).collect::<Vec<u64>>(),
            "every event once, in seq order"
        );
        let again = read_page(&store, &sub, Some(20), 100).await.expect("after");
        let tail: Vec<u64> = again.items.iter().map(|e| e.seq).collect();
        assert_eq!(
            tail,
            vec![21, 22, 23, 24, 25],
            "`after` reads without the position"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn r_in_8_a_reader_paging_while_ingest_writes_never_skips_an_event() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = std::sync::Arc::new(
            crate::store::embedded::EmbeddedStore::open(&dir.path().join("hub.redb"))
                .expect("store"),
        );
        let writer = {
            let store = store.clone();
            tokio::spawn(async move {
                for _ in 0..40 {
                    let batch = crate::store::IngestBatch {
                        events: (0..5).map(|_| event("t", "a.b")).collect(),
                        ..Default::default()
                    };
                    store
                        .write_batch(
                            &crate::store::UnitId::new("http:lender", 0),
                            crate::store::Fence::UNFENCED,
                            std::sync::Arc::new(batch),
                        )
                        .await
                        .expect("written");
                }
            })
        };
        let sub = pull_sub(&[]);
        let mut seen = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while seen.len() < 200 && std::time::Instant::now() < deadline {
            let page = read_page(&*store, &sub, None, 3).await.expect("page");
            seen.extend(page.items.iter().map(|e| e.seq));
        }
        writer.await.expect("writer");
        let rest = read_page(&*store, &sub, None, 1000).await.expect("page");
        seen.extend(rest.items.iter().map(|e| e.seq));
        assert_eq!(
            seen,
            (1..=200).collect::<Vec<u64>>(),
            "gap-free, in order, once"
        );
    }
}
