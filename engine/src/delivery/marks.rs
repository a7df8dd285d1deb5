//! Delivery timestamps on the subscription (R-CP-2): `last_success_at` is the last successful
//! delivery; `last_failure_at` the last failed one since then, cleared by a success — so when it
//! is present, the destination is failing. Each write is a control-store change every engine's
//! index follows, so a lane writes a subscription's marks only when they change meaning (its
//! first failure, its first success after failures) or have aged a minute, and not again until
//! its last write can have come back through the follower.

use std::collections::HashMap;
use std::sync::Arc;

use hub_core::control_store::{ControlStore, DeliveryMark};
use hub_core::model::Subscription;
use uuid::Uuid;

/// How stale a timestamp may get before a delivery refreshes it.
pub const MARK_EVERY_MS: i64 = 60_000;

/// What a lane last wrote, per subscription: (when, success).
#[derive(Debug, Default)]
pub struct Marks {
    written: HashMap<Uuid, (i64, bool)>,
}

impl Marks {
    /// Whether an attempt's outcome must be written to `sub` now (and, if so, notes the write).
    pub fn due(&mut self, sub: &Subscription, success: bool, now: i64) -> bool {
        let stale = |t: Option<i64>| t.is_none_or(|t| now - t >= MARK_EVERY_MS);
        let needed = if success {
            sub.last_failure_at_ms.is_some() || stale(sub.last_success_at_ms)
        } else {
            stale(sub.last_failure_at_ms)
        };
        let just_written = self
            .written
            .get(&sub.id)
            .is_some_and(|(at, was)| *was == success && now - at < MARK_EVERY_MS);
        if !needed || just_written {
            return false;
        }
        self.written.insert(sub.id, (now, success));
        true
    }
}

/// Marks on their way to the control store: lanes hand them over and go on; one task gathers
/// those of `GATHER_MS` and writes them in one call, so the first deliveries of many
/// subscriptions in one second (a start, 2,000 tenants) cost one sync, not one each.
#[derive(Debug, Clone)]
pub struct MarkWriter {
    marks: futures::channel::mpsc::UnboundedSender<DeliveryMark>,
}

/// How long the writer gathers marks after the first one before writing them.
const GATHER_MS: u64 = 200;

impl MarkWriter {
    /// The writer, and the task that writes what it is given to `store` until every sender
    /// is gone; spawn that on the tokio side.
    pub fn new(
        store: Arc<dyn ControlStore>,
    ) -> (Self, impl std::future::Future<Output = ()> + Send) {
        let (marks, gathered) = futures::channel::mpsc::unbounded();
        (Self { marks }, write_marks(gathered, store))
    }

    /// Queues a mark; fire and forget (one lost is marked by a later attempt).
    pub fn send(&self, mark: DeliveryMark) {
        let _ = self.marks.unbounded_send(mark);
    }
}

async fn write_marks(
    mut gathered: futures::channel::mpsc::UnboundedReceiver<DeliveryMark>,
    store: Arc<dyn ControlStore>,
) {
    use futures::StreamExt;
    while let Some(first) = gathered.next().await {
        tokio::time::sleep(std::time::Duration::from_millis(GATHER_MS)).await;
        let mut marks = vec![first];
        while let Ok(more) = gathered.try_recv() {
            marks.push(more);
        }
        let count = marks.len();
        if let Err(e) = store.mark_deliveries(marks).await {
            tracing::debug!(error = %e, count, "delivery timestamps not recorded");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hub_core::control_store::conformance::subscription;

    fn marked(sub: &Subscription, success: bool, at_ms: i64) -> Subscription {
        DeliveryMark::of(sub, success, at_ms).applied_to(sub)
    }

    /// Marks handed over within the gathering window land together, each applied in order;
    /// the task ends once every sender is gone.
    #[tokio::test]
    async fn r_cp_2_marks_handed_over_together_are_written_together() {
        use hub_core::control_store::embedded::EmbeddedControlStore;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("control.redb");
        let store: Arc<dyn ControlStore> =
            Arc::new(EmbeddedControlStore::open(&path).expect("open"));
        let (a, b) = (subscription("t", "a"), subscription("t", "b"));
        store.create(&a).await.expect("a");
        store.create(&b).await.expect("b");
        let (writer, writing) = MarkWriter::new(store.clone());
        let writing = tokio::spawn(writing);
        let mark = |id: Uuid, success: bool, at_ms: i64| DeliveryMark {
            tenant: "t".into(),
            subscription: id,
            success,
            at_ms,
        };
        writer.send(mark(a.id, false, 5));
        writer.send(mark(b.id, true, 6));
        writer.send(mark(a.id, true, 7));
        drop(writer);
        writing.await.expect("the writer ends with its senders");
        let a = store.get("t", a.id).await.expect("get").expect("a");
        let b = store.get("t", b.id).await.expect("get").expect("b");
        assert_eq!(
            (a.last_success_at_ms, a.last_failure_at_ms),
            (Some(7), None)
        );
        assert_eq!((a.revision, b.revision), (3, 2));
        assert_eq!(b.last_success_at_ms, Some(6));
    }

    #[test]
    fn r_cp_2_deliveries_mark_success_and_failure_without_a_write_per_attempt() {
        let mut marks = Marks::default();
        let mut sub = subscription("t", "s");
        assert!(marks.due(&sub, true, 1_000), "the first success is marked");
        assert!(
            !marks.due(&sub, true, 2_000),
            "not again before it comes back"
        );
        sub = marked(&sub, true, 1_000);
        assert_eq!(sub.last_success_at_ms, Some(1_000));
        assert!(!marks.due(&sub, true, 30_000), "fresh enough");
        assert!(
            marks.due(&sub, false, 31_000),
            "the first failure is marked at once"
        );
        sub = marked(&sub, false, 31_000);
        assert_eq!(sub.last_failure_at_ms, Some(31_000));
        assert!(!marks.due(&sub, false, 32_000));
        assert!(
            marks.due(&sub, true, 33_000),
            "a success clears the failure at once"
        );
        sub = marked(&sub, true, 33_000);
        assert_eq!(sub.last_failure_at_ms, None);
        assert!(
            marks.due(&sub, true, 33_000 + MARK_EVERY_MS),
            "refreshed after a minute"
        );
    }
}
