//! The database handle, reopened after a failed write.
//!
//! After a write fails — a full disk, a failing device — redb's in-memory state cannot be
//! trusted: it answers later transactions with `PreviousIo`, or, seen here on a full tmpfs, the
//! next writer trips an allocator assertion and poisons a lock every later call unwraps.
//! Without a reopen, a disk that fills for a minute would stop ingest and delivery until the
//! engine is restarted. So:
//!
//! - every call runs inside `run`, which catches a panic inside redb, and after any storage
//!   failure or panic [`recover`](DbHandle::recover)s: the handle is taken out (new calls wait
//!   on the lock for a moment), the calls still holding it finish (redb locks the file per open
//!   handle), it is dropped (its drop may panic on a poisoned lock; that is contained), and the
//!   file is opened again, which repairs it from its last committed transaction — nothing
//!   committed is lost, nothing uncommitted is kept;
//! - while the reopen fails (the disk is still full) every call answers `Unavailable` with
//!   why, and the next call tries again, at most once a second.
//!
//! The committer keeps the last write failure until a write lands, so readiness can say the
//! store cannot write even while it still answers reads.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use redb::Database;

use crate::store::StoreError;

/// Least time between two reopen attempts.
const REOPEN_EVERY: Duration = Duration::from_secs(1);
/// How long a reopen waits for the calls still holding the spent handle.
const CALLS_WITHIN: Duration = Duration::from_secs(5);

#[derive(Debug)]
pub(super) struct DbHandle {
    path: PathBuf,
    current: RwLock<Option<Arc<Database>>>,
    /// When a reopen was last tried, so a still-full disk is not hammered.
    tried: Mutex<Option<Instant>>,
    /// The failure that closed the handle, for the answers while it is closed.
    cause: Mutex<Option<String>>,
    /// Why the last write failed; cleared by the next write that lands.
    write_failure: Mutex<Option<String>>,
}

fn down(why: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(why.to_string())
}

impl DbHandle {
    pub(super) fn new(path: &Path, db: Database) -> Self {
        Self {
            path: path.to_owned(),
            current: RwLock::new(Some(Arc::new(db))),
            tried: Mutex::new(None),
            cause: Mutex::new(None),
            write_failure: Mutex::new(None),
        }
    }

    /// Runs `work` on the open database (reopening it first if an earlier reopen failed); a
    /// storage failure or a panic inside it spends the handle, which is reopened.
    pub(super) fn run<T>(
        &self,
        work: impl FnOnce(&Database) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let (used, answer) = {
            let db = self.get()?;
            (
                Arc::as_ptr(&db) as usize,
                catch_unwind(AssertUnwindSafe(|| work(&db))),
            )
        };
        // `db` is dropped: the reopen must not wait for this very call.
        match answer {
            Ok(Err(e @ StoreError::Unavailable(_))) => {
                self.recover(used, &e);
                Err(e)
            }
            Ok(answer) => answer,
            Err(panic) => {
                let e = down(format!("the embedded store failed: {}", panic_text(&panic)));
                self.recover(used, &e);
                Err(e)
            }
        }
    }

    fn get(&self) -> Result<Arc<Database>, StoreError> {
        if let Some(db) = self.current.read().map_err(down)?.as_ref() {
            return Ok(db.clone());
        }
        let mut slot = self.current.write().map_err(down)?;
        self.reopen(&mut slot)?;
        slot.clone().ok_or_else(|| down(self.why_closed()))
    }

    /// After a storage failure on the handle `used` (its address): closes it and opens the
    /// file again. Calls that failed on the same handle at the same time find it replaced and
    /// leave the new one alone. The lock is held throughout, so no call starts on a handle
    /// being closed, and none reopens the file while the spent handle still holds it.
    fn recover(&self, used: usize, failure: &StoreError) {
        let Ok(mut slot) = self.current.write() else {
            return;
        };
        let spent = slot
            .as_ref()
            .is_some_and(|db| Arc::as_ptr(db) as usize == used);
        if !spent {
            return;
        }
        tracing::warn!(error = %failure, "the embedded store failed; reopening its file");
        if let Ok(mut cause) = self.cause.lock() {
            *cause = Some(reason(failure));
        }
        if let Some(old) = slot.take() {
            release(old);
        }
        let _ = self.reopen(&mut slot);
    }

    /// Records how the last write ended (`None`: it landed).
    pub(super) fn note_write(&self, failure: Option<&StoreError>) {
        if let Ok(mut f) = self.write_failure.lock() {
            *f = failure.map(reason);
        }
    }

    /// Why writes fail now, if they do.
    pub(super) fn write_failure(&self) -> Option<String> {
        self.write_failure.lock().ok().and_then(|f| f.clone())
    }

    fn why_closed(&self) -> String {
        let cause = self
            .cause
            .lock()
            .ok()
            .and_then(|c| c.clone())
            .unwrap_or_else(|| "a storage failure".into());
        format!("the embedded store is closed after {cause}; reopening")
    }

    /// Opens the file again into `slot` unless it is open or was tried less than a second ago.
    fn reopen(&self, slot: &mut Option<Arc<Database>>) -> Result<(), StoreError> {
        if slot.is_some() {
            return Ok(());
        }
        {
            let mut tried = self.tried.lock().map_err(down)?;
            if tried.is_some_and(|t| t.elapsed() < REOPEN_EVERY) {
                return Err(down(self.why_closed()));
            }
            *tried = Some(Instant::now());
        }
        match catch_unwind(|| Database::create(&self.path)) {
            Ok(Ok(db)) => {
                tracing::warn!(path = %self.path.display(), "the embedded store is open again");
                *slot = Some(Arc::new(db));
                Ok(())
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "the embedded store could not be reopened yet");
                Err(down(format!("{}: {e}", self.why_closed())))
            }
            Err(panic) => Err(down(format!(
                "{}: {}",
                self.why_closed(),
                panic_text(&panic)
            ))),
        }
    }
}

/// What an error says, without the `store unavailable:` every wrapper adds.
fn reason(e: &StoreError) -> String {
    match e {
        StoreError::Unavailable(why) => why.clone(),
        other => other.to_string(),
    }
}

/// Drops a spent handle once the calls holding it are done (each holds a clone for one call),
/// so the file lock is free for the reopen. A call that outlives the wait keeps the lock, and
/// the reopen fails until it is gone. redb's drop may panic on a lock a failed call poisoned;
/// the file is closed all the same.
fn release(db: Arc<Database>) {
    let started = Instant::now();
    // Only ever on the committer thread or a blocking-pool thread, never a shard or a worker.
    while Arc::strong_count(&db) > 1 && started.elapsed() < CALLS_WITHIN {
        std::thread::park_timeout(Duration::from_millis(5));
    }
    if catch_unwind(AssertUnwindSafe(|| drop(db))).is_err() {
        tracing::warn!("the spent embedded store handle panicked as it closed");
    }
}

fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

#[cfg(test)]
mod tests {
    use std::process::Command;
    use std::sync::Arc;

    use crate::store::conformance::event;
    use crate::store::embedded::EmbeddedStore;
    use crate::store::{Fence, IngestBatch, Store, UnitId};

    /// A tmpfs of `mib` MiB on `at`, unmounted when dropped (mounting needs root, as CI runs).
    struct Tmpfs(std::path::PathBuf);

    impl Tmpfs {
        fn mount(at: &std::path::Path, mib: u64) -> Self {
            let mounted = Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
                .arg(at)
                .status()
                .is_ok_and(|s| s.success());
            assert!(
                mounted,
                "this test needs root: `mount -t tmpfs` was refused"
            );
            Self(at.to_owned())
        }
    }

    impl Drop for Tmpfs {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }

    /// Fills the file system under `dir` but `headroom` bytes.
    fn fill(dir: &std::path::Path, headroom: u64) {
        use std::io::Write;
        let mut file = std::fs::File::create(dir.join("filler")).expect("filler");
        let block = vec![1u8; 64 << 10];
        let mut written = 0u64;
        while let Ok(n) = file.write(&block) {
            if n == 0 {
                break;
            }
            written += n as u64;
        }
        file.set_len(written.saturating_sub(headroom))
            .expect("room made");
    }

    async fn write_one(
        store: &EmbeddedStore,
        unit: &UnitId,
        fence: Fence,
        n: i64,
    ) -> Result<(), String> {
        let mut e = event("t-full", "x.created");
        e.payload = vec![b'x'; 32 << 10];
        let batch = IngestBatch {
            events: vec![e],
            next_offset: Some(n + 1),
            ..Default::default()
        };
        store
            .write_batch(unit, fence, Arc::new(batch))
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }

    /// Issue 19's full disk, R-IN-7: a write that finds no space fails whole and says why; the
    /// store keeps saying so (for readiness) while the disk is full; once space is freed the
    /// store reopens its file by itself, keeps every write it acknowledged, and takes new ones.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn r_in_7_a_full_disk_fails_writes_whole_and_the_store_resumes_when_space_is_freed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let _tmpfs = Tmpfs::mount(dir.path(), 16);
        let store = EmbeddedStore::open(&dir.path().join("hub.redb")).expect("open");
        let unit = UnitId::new("lerian.streaming.full", 0);
        let (fence, _) = store.claim_unit(&unit).await.expect("claim");
        write_one(&store, &unit, fence, 0)
            .await
            .expect("room at first");
        fill(dir.path(), 256 << 10);

        let mut acknowledged = 1;
        let failure = loop {
            match write_one(&store, &unit, fence, acknowledged).await {
                Ok(()) => acknowledged += 1,
                Err(e) => break e,
            }
            assert!(acknowledged < 1000, "the disk never filled");
        };
        assert!(failure.contains("No space left"), "says why: {failure}");
        let reported = store
            .write_failure()
            .expect("the failure is kept for readiness");
        assert!(reported.contains("No space left"), "{reported}");
        assert!(
            write_one(&store, &unit, fence, acknowledged).await.is_err(),
            "still full, still refused"
        );

        std::fs::remove_file(dir.path().join("filler")).expect("space freed");
        let mut resumed = false;
        for _ in 0..50 {
            if write_one(&store, &unit, fence, acknowledged).await.is_ok() {
                resumed = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        assert!(resumed, "writes resume once space is freed");
        assert_eq!(store.write_failure(), None, "and readiness is clear again");
        let stored = store.read_events("t-full", 0, 1000).await.expect("read");
        let seqs: Vec<u64> = stored.iter().map(|e| e.seq).collect();
        let expected: Vec<u64> = (1..=acknowledged as u64 + 1).collect();
        assert_eq!(
            seqs, expected,
            "every acknowledged write kept, nothing half-written"
        );
        assert_eq!(
            store.unit_offset(&unit).await.expect("offset"),
            Some(acknowledged + 1),
            "the position is the last durable one"
        );
    }
}
