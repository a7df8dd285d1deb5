//! Following subscription changes (DESIGN "change propagation", R-MA-3): the control plane writes
//! every change to its revision log; an engine reads the log from the last revision it applied,
//! reloads the subscriptions it names, and publishes a new immutable [`Snapshot`] (the
//! `MatchIndex` and the subscriptions by id). Each shard keeps its own copy of the current
//! snapshot ([`LocalSubscriptions`]) and looks at the shared one only when a new one was published
//! (STYLE §11: no lock shared between cores per job); a stale revision is never applied over a
//! newer one.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use hub_core::control_store::{ControlStore, ControlStoreError};
use hub_core::model::Subscription;
use uuid::Uuid;

use super::by_id::ById;
use super::index::MatchIndex;
use crate::runtime::Stop;

/// Log entries read per round trip.
const PAGE: usize = 1000;

/// The engine's view of the subscriptions.
#[derive(Debug, Default)]
pub struct Subscriptions {
    /// What matching and delivery read: replaced whole by each catch-up that changed something.
    current: RwLock<Arc<Snapshot>>,
    /// How many snapshots were published: a shard's copy is current while this has not moved.
    published: AtomicU64,
    /// What catch-ups apply changes to; published as the next snapshot's subscriptions.
    known: Mutex<Known>,
    /// One catch-up at a time: the follower and, in one process, the control plane's writes
    /// (two at once could put an older copy of a subscription over a newer one). Holds how
    /// many there were, so a change is first read again by a later one.
    catching_up: tokio::sync::Mutex<u64>,
    /// Changes to read again: on CQL a change's log entry is written just before the
    /// subscription's row, so a reader between the two finds the old row under the new entry
    /// and would otherwise keep it until the next change. Each is read again twice ([`Recent`]),
    /// not on every catch-up for a while (a burst of delivery marks on 2,000 subscriptions made
    /// every catch-up read hundreds of rows again). Kept only for a store whose rows may lag its
    /// log (`rows_may_lag_log`).
    recent: Mutex<Vec<Recent>>,
}

/// A change read from the log whose subscription is read again: by the next catch-up (the row
/// lands a moment after its entry), and once more [`RECHECK`] after (a writer that stalled
/// between the two).
#[derive(Debug)]
struct Recent {
    first_read: std::time::Instant,
    /// The catch-up that first read it.
    catch_up: u64,
    tenant: String,
    id: Uuid,
    read_again: u8,
}

impl Recent {
    /// Whether catch-up number `catch_up`, at `now`, reads it again.
    fn due(&self, catch_up: u64, now: std::time::Instant) -> bool {
        match self.read_again {
            0 => catch_up > self.catch_up,
            1 => now.duration_since(self.first_read) >= RECHECK,
            _ => false,
        }
    }
}

/// One revision of the subscriptions, immutable once published.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub index: Arc<MatchIndex>,
    by_id: ById,
}

impl Snapshot {
    /// The subscription `id` of `tenant` as of this revision (`None` once deleted or never
    /// seen). By id alone, the tenant checked after: no key is built per job.
    pub fn get(&self, tenant: &str, id: Uuid) -> Option<&Arc<Subscription>> {
        self.by_id.get(&id).filter(|s| s.tenant == tenant)
    }
}

/// The subscriptions as of the last change applied.
#[derive(Debug, Default)]
struct Known {
    /// By id (ids are unique across tenants): the next snapshot's.
    by_id: ById,
    /// Each tenant's ids, for rebuilding the index of a tenant whose subscriptions changed.
    by_tenant: HashMap<String, HashSet<Uuid>>,
}

impl Known {
    /// Keeps `current` as the subscription `id` unless a newer copy is known (never an older
    /// copy over a newer one); `None` (deleted for good) removes it. True when it changed.
    fn apply(&mut self, id: Uuid, current: Option<Subscription>) -> bool {
        match current {
            Some(s) => {
                if self
                    .by_id
                    .get(&id)
                    .is_some_and(|k| k.revision >= s.revision)
                {
                    return false;
                }
                self.by_tenant
                    .entry(s.tenant.clone())
                    .or_default()
                    .insert(id);
                self.by_id.insert(Arc::new(s));
            }
            None => {
                if let Some(gone) = self.by_id.remove(&id) {
                    if let Some(ids) = self.by_tenant.get_mut(&gone.tenant) {
                        ids.remove(&id);
                        if ids.is_empty() {
                            self.by_tenant.remove(&gone.tenant);
                        }
                    }
                }
            }
        }
        true
    }

    fn of_tenant(&self, tenant: &str) -> Vec<&Subscription> {
        self.by_tenant
            .get(tenant)
            .into_iter()
            .flatten()
            .filter_map(|id| self.by_id.get(id))
            .map(|s| &**s)
            .collect()
    }
}

/// A shard's own copy of the current [`Snapshot`] (STYLE §11): a look costs one read of the
/// published count, and the shared lock is taken only after a new snapshot was published. Only
/// the shard holding it reads or replaces its copy.
#[derive(Debug)]
pub struct LocalSubscriptions {
    shared: Arc<Subscriptions>,
    seen: Cell<u64>,
    copy: RefCell<Arc<Snapshot>>,
}

impl LocalSubscriptions {
    pub fn new(shared: Arc<Subscriptions>) -> Self {
        let seen = shared.published.load(Ordering::Acquire);
        let copy = shared.snapshot();
        Self {
            shared,
            seen: Cell::new(seen),
            copy: RefCell::new(copy),
        }
    }

    /// The subscription as of the current snapshot ([`Snapshot::get`]).
    pub fn get(&self, tenant: &str, id: Uuid) -> Option<Arc<Subscription>> {
        self.refresh();
        self.copy.borrow().get(tenant, id).cloned()
    }

    /// `read` of the current snapshot's index, borrowed from the copy (no count of a shared
    /// `Arc` moves per batch).
    pub fn with_index<T>(&self, read: impl FnOnce(&MatchIndex) -> T) -> T {
        self.refresh();
        read(&self.copy.borrow().index)
    }

    /// Takes the shared snapshot if one was published since the copy was.
    fn refresh(&self) {
        let published = self.shared.published.load(Ordering::Acquire);
        if published != self.seen.get() {
            *self.copy.borrow_mut() = self.shared.snapshot();
            self.seen.set(published);
        }
    }
}

impl Clone for LocalSubscriptions {
    /// A copy of its own, current when made.
    fn clone(&self) -> Self {
        Self::new(self.shared.clone())
    }
}

/// When a change's subscription is read a last time after its log entry was first read (far
/// longer than the moment between a writer's log entry and its row).
const RECHECK: Duration = Duration::from_secs(5);

impl Subscriptions {
    /// The snapshot published last (one `Arc` clone under the shared lock; a shard reads its
    /// own copy, [`LocalSubscriptions`]).
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.current
            .read()
            .map(|i| i.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// The index to match with now.
    pub fn index(&self) -> Arc<MatchIndex> {
        self.snapshot().index.clone()
    }

    /// Every subscription known (the automatic prober walks them).
    pub fn all(&self) -> Vec<Arc<Subscription>> {
        self.snapshot().by_id.values().cloned().collect()
    }

    /// Applies every change after the current index's revision; true when the index changed.
    /// Only the tenants with changes have their part of the index built again.
    pub async fn catch_up(&self, store: &dyn ControlStore) -> Result<bool, ControlStoreError> {
        let mut catch_ups = self.catching_up.lock().await;
        *catch_ups += 1;
        let this = *catch_ups;
        let mut revision = self.index().revision;
        let start = revision;
        let mut touched: BTreeSet<String> = BTreeSet::new();
        loop {
            let changes = store.changes_since(revision, PAGE).await?;
            let Some(last) = changes.last().map(|c| c.revision) else {
                break;
            };
            for c in &changes {
                let current = store.get(&c.tenant, c.id).await?;
                self.apply(c.id, current);
                touched.insert(c.tenant.clone());
                if store.rows_may_lag_log() {
                    if let Ok(mut recent) = self.recent.lock() {
                        recent.push(Recent {
                            first_read: std::time::Instant::now(),
                            catch_up: this,
                            tenant: c.tenant.clone(),
                            id: c.id,
                            read_again: 0,
                        });
                    }
                }
            }
            revision = last;
            if changes.len() < PAGE {
                break;
            }
        }
        if store.rows_may_lag_log() {
            touched.extend(self.recheck_recent(store, this).await?);
        }
        if revision == start && touched.is_empty() {
            return Ok(false);
        }
        let next = match self.known.lock() {
            Ok(known) => Snapshot {
                index: Arc::new(self.index().rebuilt(
                    revision,
                    touched.iter().map(|t| (t.as_str(), known.of_tenant(t))),
                )),
                by_id: known.by_id.clone(),
            },
            Err(_) => return Ok(false),
        };
        if let Ok(mut current) = self.current.write() {
            if current.index.revision <= revision {
                *current = Arc::new(next);
                self.published.fetch_add(1, Ordering::Release);
            }
        }
        Ok(true)
    }

    /// Applies one subscription's current copy (see [`Known::apply`]).
    fn apply(&self, id: Uuid, current: Option<Subscription>) -> bool {
        self.known
            .lock()
            .is_ok_and(|mut known| known.apply(id, current))
    }

    /// Reads again the subscriptions of recent changes due a read ([`Recent::due`]); returns
    /// the tenants of those newer than the copy kept.
    async fn recheck_recent(
        &self,
        store: &dyn ControlStore,
        catch_up: u64,
    ) -> Result<Vec<String>, ControlStoreError> {
        let due: BTreeSet<(String, Uuid)> = match self.recent.lock() {
            Ok(mut recent) => {
                let (mut due, now) = (BTreeSet::new(), std::time::Instant::now());
                for r in recent.iter_mut().filter(|r| r.due(catch_up, now)) {
                    r.read_again += 1;
                    due.insert((r.tenant.clone(), r.id));
                }
                recent.retain(|r| r.read_again < 2);
                due
            }
            Err(_) => return Ok(Vec::new()),
        };
        let mut changed = Vec::new();
        for (tenant, id) in due {
            if let Some(s) = store.get(&tenant, id).await? {
                if self.apply(id, Some(s)) {
                    changed.push(tenant);
                }
            }
        }
        Ok(changed)
    }
}

impl Subscriptions {
    /// Says, once, how many live subscriptions are sealed under master keys `keyring` lacks
    /// (a process deployed without the key material the others use): their attempts and probes
    /// would each fail `secret_unavailable`, and health names the key (R-SEC-1).
    pub fn report_missing_keys(&self, keyring: &hub_core::secrets::Keyring) {
        let mut missing: std::collections::BTreeMap<String, usize> = Default::default();
        for sub in self.all().iter().filter(|s| !s.deleted) {
            if let Some(k) = hub_core::sink::missing_key(keyring, sub) {
                *missing.entry(k.to_owned()).or_default() += 1;
            }
        }
        for (key_id, n) in missing {
            tracing::error!(
                key_id,
                subscriptions = n,
                "subscriptions are sealed under a master key this process does not hold: add it \
                 to STREAMING_HUB_MASTER_KEYS (their deliveries and probes fail until then)"
            );
        }
    }
}

/// The control plane's hook into this engine's index when both run in one process (the
/// standalone hub): a control-plane write answers only once the index has it.
#[derive(Debug)]
pub struct InProcess {
    pub subs: Arc<Subscriptions>,
    pub store: Arc<dyn ControlStore>,
}

#[async_trait::async_trait]
impl hub_core::in_process::LocalIndex for InProcess {
    async fn caught_up(&self) {
        if let Err(e) = self.subs.catch_up(&*self.store).await {
            tracing::warn!(error = %e, "reading subscription changes failed; the follower retries");
        }
    }
}

/// Reads the revision log every `every`, and at once when `pushed` is notified (a control
/// process said a change was written), until `stop`.
pub async fn follow(
    subs: Arc<Subscriptions>,
    store: Arc<dyn ControlStore>,
    every: Duration,
    pushed: Arc<tokio::sync::Notify>,
    stop: Stop,
) {
    while !stop.is_set() {
        if let Err(e) = subs.catch_up(&*store).await {
            tracing::warn!(error = %e, "reading subscription changes failed; retrying");
        }
        tokio::select! {
            _ = stop.sleep(every) => {}
            () = pushed.notified() => {}
        }
    }
}

/// How long a long poll may take before it is abandoned and made again (the control process
/// answers within 25 s).
const LONG_POLL_LIMIT: Duration = Duration::from_secs(35);

/// Keeps a long poll open on a control process's `/internal/changes` (R-TR-4) and notifies
/// `pushed` each time it reports a change; on a failure it waits a second and asks again (the
/// follower's own polling covers the gap).
pub async fn listen_for_changes(control_url: String, pushed: Arc<tokio::sync::Notify>, stop: Stop) {
    let client = match reqwest::Client::builder().timeout(LONG_POLL_LIMIT).build() {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "no client for change notifications; polling alone");
            return;
        }
    };
    let mut seen: Option<u64> = None;
    while !stop.is_set() {
        let url = format!("{control_url}/internal/changes?after={}", seen.unwrap_or(0));
        let answer = async {
            let r = client.get(&url).send().await?.error_for_status()?;
            r.json::<serde_json::Value>().await
        };
        let answer = tokio::select! {
            answer = answer => answer,
            () = stop.said() => break,
        };
        match answer {
            Ok(v) => {
                let count = v["changes"].as_u64().unwrap_or(0);
                if seen.is_some_and(|s| s != count) {
                    pushed.notify_one();
                }
                seen = Some(count);
            }
            Err(e) => {
                tracing::debug!(error = %e, "change notifications interrupted; asking again");
                seen = None;
                stop.sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matching::EventFacts;
    use hub_core::control_store::conformance::subscription;
    use hub_core::control_store::embedded::EmbeddedControlStore;
    use hub_core::model::VerificationState;

    fn active(tenant: &str, name: &str) -> Subscription {
        let mut s = subscription(tenant, name);
        s.verification_state = VerificationState::Active;
        s
    }

    /// A store whose next read of one subscription answers a stale copy: the moment on CQL when a
    /// change's log entry is written and its row not yet (unit tests only).
    #[derive(Debug)]
    struct RowLagsLog {
        inner: Arc<dyn ControlStore>,
        /// Answered (last first) before the real row.
        stale: Mutex<Vec<Subscription>>,
        /// Subscription reads answered.
        reads: std::sync::atomic::AtomicUsize,
        /// Whether it says its rows may lag its log (the CQL store does).
        lags: bool,
    }

    #[async_trait::async_trait]
    impl ControlStore for RowLagsLog {
        fn rows_may_lag_log(&self) -> bool {
            self.lags
        }
        async fn create(&self, sub: &Subscription) -> Result<(), ControlStoreError> {
            self.inner.create(sub).await
        }
        async fn get(&self, t: &str, id: Uuid) -> Result<Option<Subscription>, ControlStoreError> {
            self.reads.fetch_add(1, Ordering::Relaxed);
            if let Some(stale) = self.stale.lock().ok().and_then(|mut s| s.pop()) {
                return Ok(Some(stale));
            }
            self.inner.get(t, id).await
        }
        async fn list(
            &self,
            t: &str,
            after: Option<Uuid>,
            limit: usize,
        ) -> Result<Vec<Subscription>, ControlStoreError> {
            self.inner.list(t, after, limit).await
        }
        async fn replace(
            &self,
            sub: &Subscription,
            expected: u64,
        ) -> Result<(), ControlStoreError> {
            self.inner.replace(sub, expected).await
        }
        async fn changes_since(
            &self,
            revision: u64,
            limit: usize,
        ) -> Result<Vec<hub_core::control_store::Change>, ControlStoreError> {
            self.inner.changes_since(revision, limit).await
        }
        async fn idem_begin(
            &self,
            t: &str,
            k: &str,
            f: [u8; 32],
            times: hub_core::control_store::IdemTimes,
        ) -> Result<hub_core::control_store::IdemBegin, ControlStoreError> {
            self.inner.idem_begin(t, k, f, times).await
        }
        async fn idem_finish(
            &self,
            t: &str,
            k: &str,
            f: [u8; 32],
            r: hub_core::control_store::StoredResponse,
            now_ms: i64,
        ) -> Result<(), ControlStoreError> {
            self.inner.idem_finish(t, k, f, r, now_ms).await
        }
        async fn idem_release(&self, t: &str, k: &str) -> Result<(), ControlStoreError> {
            self.inner.idem_release(t, k).await
        }
        async fn idem_unrecorded(
            &self,
            t: &str,
            k: &str,
            now: i64,
        ) -> Result<(), ControlStoreError> {
            self.inner.idem_unrecorded(t, k, now).await
        }
    }

    /// R-MA-3: a change read while its row still shows the old state (its log entry written
    /// first) is read again on the next catch-up, so the index never keeps the old state.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn r_ma_3_a_row_written_after_its_log_entry_is_read_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let inner: Arc<dyn ControlStore> =
            Arc::new(EmbeddedControlStore::open(&dir.path().join("control.redb")).expect("open"));
        let store = RowLagsLog {
            inner: inner.clone(),
            stale: Mutex::new(Vec::new()),
            reads: Default::default(),
            lags: true,
        };
        let subs = Subscriptions::default();
        let pending = subscription("t1", "hook");
        store.create(&pending).await.expect("create");
        subs.catch_up(&store).await.expect("catch up");
        let ev = EventFacts {
            tenant: "t1",
            key: "loan.approved",
            source: "lender",
            major: 1,
        };
        assert!(subs.index().matches(&ev).is_empty(), "pending: no match");

        // Activated (a ping); the next two reads of its row still answer the pending copy (the
        // catch-up's read of the change, and its read again of the creation, read by the last).
        let mut activated = pending.clone();
        activated.verification_state = VerificationState::Active;
        activated.revision = 2;
        store.replace(&activated, 1).await.expect("replace");
        *store.stale.lock().expect("lock") = vec![pending.clone(), pending.clone()];
        subs.catch_up(&store).await.expect("catch up");
        assert!(
            subs.index().matches(&ev).is_empty(),
            "the stale row was read"
        );
        // No new log entry, but the next catch-up reads the change again: the row has landed.
        subs.catch_up(&store).await.expect("catch up");
        assert_eq!(subs.index().matches(&ev), vec![pending.id]);
        // Not again on every catch-up after that (once more only after `RECHECK`).
        let reads = store.reads.load(Ordering::Relaxed);
        for _ in 0..5 {
            subs.catch_up(&store).await.expect("catch up");
        }
        assert_eq!(store.reads.load(Ordering::Relaxed), reads);
    }

    /// R-MA-3: on a store whose rows never lag its log (the embedded one), a burst of writes,
    /// each followed by a catch-up (as the standalone hub's control plane does), reads each
    /// change once — not every recent change again on every catch-up (5,150 reads here before).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn r_ma_3_a_burst_of_writes_reads_each_change_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = RowLagsLog {
            inner: Arc::new(
                EmbeddedControlStore::open(&dir.path().join("control.redb")).expect("open"),
            ),
            stale: Mutex::new(Vec::new()),
            reads: Default::default(),
            lags: false,
        };
        let subs = Subscriptions::default();
        for n in 0..100 {
            store
                .create(&subscription("t1", &format!("hook-{n}")))
                .await
                .expect("create");
            subs.catch_up(&store).await.expect("catch up");
        }
        assert_eq!(subs.all().len(), 100);
        assert_eq!(store.reads.load(Ordering::Relaxed), 100);
    }

    /// R-MA-3: changes reach the engine's index through the revision log, within one poll.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn r_ma_3_changes_reach_the_index_through_the_log() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store: Arc<dyn ControlStore> =
            Arc::new(EmbeddedControlStore::open(&dir.path().join("control.redb")).expect("open"));
        let subs = Arc::new(Subscriptions::default());
        let ev = EventFacts {
            tenant: "t1",
            key: "loan.approved",
            source: "lender",
            major: 1,
        };
        assert!(subs.index().matches(&ev).is_empty());

        let a = active("t1", "a");
        store.create(&a).await.expect("create");
        store
            .create(&active("t2", "other tenant"))
            .await
            .expect("create");
        let stop = Stop::default();
        let follower = tokio::spawn(follow(
            subs.clone(),
            store.clone(),
            Duration::from_millis(100),
            Arc::default(),
            stop.clone(),
        ));

        let within = |want: Vec<Uuid>| {
            let subs = subs.clone();
            async move {
                let deadline = std::time::Instant::now() + Duration::from_secs(1);
                loop {
                    let got = subs.index().matches(&ev);
                    if got == want {
                        return true;
                    }
                    if std::time::Instant::now() > deadline {
                        return false;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        assert!(
            within(vec![a.id]).await,
            "a new subscription matches within a second"
        );

        let mut paused = a.clone();
        paused.paused = true;
        paused.enabled = false;
        paused.revision = 2;
        store.replace(&paused, 1).await.expect("pause");
        assert!(
            within(vec![]).await,
            "a paused subscription stops matching within a second"
        );

        let mut resumed = paused.clone();
        resumed.paused = false;
        resumed.enabled = true;
        resumed.revision = 3;
        store.replace(&resumed, 2).await.expect("resume");
        assert!(within(vec![a.id]).await);
        stop.set();
        follower.await.expect("follower");
        assert!(
            !subs.catch_up(&*store).await.expect("catch up"),
            "nothing new: the index stays"
        );
    }

    /// A shard's copy (STYLE §11) answers from the snapshot it holds until a catch-up publishes
    /// a new one, then from that one: a change reaches every shard, and between changes no look
    /// takes the shared lock (the copy stays the very same snapshot).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn r_ma_3_a_shards_copy_of_the_subscriptions_follows_each_published_change() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = EmbeddedControlStore::open(&dir.path().join("control.redb")).expect("open");
        let shared = Arc::new(Subscriptions::default());
        let local = LocalSubscriptions::new(shared.clone());
        let first = subscription("t-local", "hook");
        store.create(&first).await.expect("create");
        assert!(
            local.get("t-local", first.id).is_none(),
            "not caught up yet"
        );
        shared.catch_up(&store).await.expect("catch up");
        assert_eq!(local.get("t-local", first.id).map(|s| s.id), Some(first.id));
        assert!(
            local.get("t-other", first.id).is_none(),
            "another tenant's id"
        );
        let held = local.copy.borrow().clone();
        assert!(
            !shared.catch_up(&store).await.expect("catch up"),
            "no change"
        );
        local.get("t-local", first.id);
        assert!(Arc::ptr_eq(&held, &local.copy.borrow()), "the same copy");

        let mut paused = first.clone();
        paused.enabled = false;
        paused.revision = 2;
        store.replace(&paused, 1).await.expect("replace");
        shared.catch_up(&store).await.expect("catch up");
        let seen = local.get("t-local", first.id).expect("known");
        assert!(!seen.enabled, "the change reached the shard's copy");
        assert!(
            held.get("t-local", first.id).is_some_and(|s| s.enabled),
            "old snapshot kept"
        );
    }
}
