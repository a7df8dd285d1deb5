//! A redb database handle, reopened after a failed write; the engine's store and the control
//! store both go through one.
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

/// What a store's error must say for the handle: which errors are storage failures (they spend
/// the handle), how to make one from words, and its words without the wrapper's prefix.
pub trait StorageFailure: std::fmt::Display + Sized {
    fn unavailable(why: String) -> Self;
    /// Whether this error came from the storage (and so may have spent the handle).
    fn is_storage_failure(&self) -> bool;
    /// The words an operator needs, without the `… unavailable:` every wrapper adds.
    fn reason(&self) -> String;
}

/// Least time between two reopen attempts.
const REOPEN_EVERY: Duration = Duration::from_secs(1);
/// How long a reopen waits for the calls still holding the spent handle.
const CALLS_WITHIN: Duration = Duration::from_secs(5);

#[derive(Debug)]
pub struct DbHandle {
    path: PathBuf,
    current: RwLock<Option<Arc<Database>>>,
    /// When a reopen was last tried, so a still-full disk is not hammered.
    tried: Mutex<Option<Instant>>,
    /// The failure that closed the handle, for the answers while it is closed.
    cause: Mutex<Option<String>>,
    /// Why the last write failed; cleared by the next write that lands.
    write_failure: Mutex<Option<String>>,
}

fn down<E: StorageFailure>(why: impl std::fmt::Display) -> E {
    E::unavailable(why.to_string())
}

impl DbHandle {
    pub fn new(path: &Path, db: Database) -> Self {
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
    pub fn run<T, E: StorageFailure>(
        &self,
        work: impl FnOnce(&Database) -> Result<T, E>,
    ) -> Result<T, E> {
        let (used, answer) = {
            let db = self.get()?;
            (
                Arc::as_ptr(&db) as usize,
                catch_unwind(AssertUnwindSafe(|| work(&db))),
            )
        };
        // `db` is dropped: the reopen must not wait for this very call.
        match answer {
            Ok(Err(e)) if e.is_storage_failure() => {
                self.recover(used, &e);
                Err(e)
            }
            Ok(answer) => answer,
            Err(panic) => {
                let e: E = down(format!("the embedded store failed: {}", panic_text(&panic)));
                self.recover(used, &e);
                Err(e)
            }
        }
    }

    fn get<E: StorageFailure>(&self) -> Result<Arc<Database>, E> {
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
    fn recover<E: StorageFailure>(&self, used: usize, failure: &E) {
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
            *cause = Some(failure.reason());
        }
        if let Some(old) = slot.take() {
            release(old);
        }
        let _ = self.reopen::<E>(&mut slot);
    }

    /// Records that a write landed: writes no longer fail.
    pub fn note_landed(&self) {
        if let Ok(mut f) = self.write_failure.lock() {
            *f = None;
        }
    }

    /// Records why a write failed, until one lands.
    pub fn note_failed(&self, failure: &impl StorageFailure) {
        if let Ok(mut f) = self.write_failure.lock() {
            *f = Some(failure.reason());
        }
    }

    /// Why writes fail now, if they do.
    pub fn write_failure(&self) -> Option<String> {
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
    fn reopen<E: StorageFailure>(&self, slot: &mut Option<Arc<Database>>) -> Result<(), E> {
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

/// Test support for stores on a full disk (both stores' tests use it; mounting needs root).
#[doc(hidden)]
pub mod testing {
    use std::io::Write;
    use std::path::{Path, PathBuf};
    use std::process::Command;

    /// A tmpfs of a given size on a directory, unmounted (lazily) when dropped.
    #[derive(Debug)]
    pub struct Tmpfs(PathBuf);

    impl Tmpfs {
        /// Panics with why when the mount is refused (a test that needs it cannot go on).
        #[allow(clippy::panic)]
        pub fn mount(at: &Path, mib: u64) -> Self {
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

    /// Fills the file system under `dir` but `headroom` bytes, with a file `filler`.
    pub fn fill(dir: &Path, headroom: u64) -> std::io::Result<()> {
        let mut file = std::fs::File::create(dir.join("filler"))?;
        let block = vec![1u8; 64 << 10];
        let mut written = 0u64;
        while let Ok(n) = file.write(&block) {
            if n == 0 {
                break;
            }
            written += n as u64;
        }
        file.set_len(written.saturating_sub(headroom))
    }
}
