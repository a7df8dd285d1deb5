//! The one writer thread of an embedded store: takes the writes waiting at the moment (up to a
//! group) and hands them to `commit` together, so they share one sync to disk.
//!
//! `commit` may ask to be called again by a time even if no write comes (with an empty group):
//! the log store syncs then what it wrote without a sync (`log::committer`).
//!
//! Dropping the handle (with the last store clone) closes the queue and joins the thread, so
//! the store's files are closed when it is gone and can be reopened at once.

use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use super::StoreError;

/// Most writes merged into one group.
pub const GROUP: usize = 64;

/// Longest a riding write waits for another write to carry it before it goes alone.
pub const RIDE_AT_MOST: Duration = Duration::from_millis(5);

/// A write, and whether it may wait for the next group (`submit_riding`).
enum Queued<W> {
    Now(W),
    Riding(W),
}

pub struct CommitterThread<W> {
    name: &'static str,
    queue: Mutex<Option<mpsc::Sender<Queued<W>>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl<W: Send + 'static> CommitterThread<W> {
    /// Starts thread `name`, which calls `commit` with each group until the handle is dropped.
    /// What `commit` returns is when to call it again, with no writes if none came by then.
    pub fn start(
        name: &'static str,
        mut commit: impl FnMut(Vec<W>) -> Option<Instant> + Send + 'static,
    ) -> Result<Self, StoreError> {
        let (tx, rx) = mpsc::channel::<Queued<W>>();
        let thread = crate::runtime::spawn_beside_shards(name, move || {
            let mut riders = Riders::default();
            let mut wake = None;
            while let Some(mut group) = riders.next(&rx, wake) {
                while group.len() < GROUP {
                    match rx.try_recv() {
                        Ok(Queued::Now(work) | Queued::Riding(work)) => group.push(work),
                        Err(_) => break,
                    }
                }
                wake = commit(group);
            }
        })
        .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        Ok(Self {
            name,
            queue: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Queues `work` for the next group, which starts at once.
    pub fn submit(&self, work: W) -> Result<(), StoreError> {
        self.send(Queued::Now(work))
    }

    /// Queues `work` to ride the next group another write starts, or to go alone after
    /// [`RIDE_AT_MOST`]: a write nobody waits on urgently (a lane's outcomes) shares a sync
    /// instead of paying one (issue 17).
    pub fn submit_riding(&self, work: W) -> Result<(), StoreError> {
        self.send(Queued::Riding(work))
    }

    fn send(&self, work: Queued<W>) -> Result<(), StoreError> {
        let stopped =
            || StoreError::Unavailable(format!("the store's {} thread stopped", self.name));
        let queue = self.queue.lock().map_err(|_| stopped())?;
        queue
            .as_ref()
            .ok_or_else(stopped)?
            .send(work)
            .map_err(|_| stopped())
    }
}

/// Riding writes waiting for a group, and until when they wait.
struct Riders<W> {
    waiting: Vec<W>,
    until: Option<Instant>,
}

impl<W> Default for Riders<W> {
    fn default() -> Self {
        Self {
            waiting: Vec::new(),
            until: None,
        }
    }
}

impl<W> Riders<W> {
    /// The start of the next group, in the order the writes came: the riders waiting and the
    /// next write that may not wait, or the riders alone once they waited long enough (or the
    /// queue closed), or whatever waits (perhaps nothing) at `wake`. `None` once the queue is
    /// closed and nothing waits.
    fn next(&mut self, rx: &mpsc::Receiver<Queued<W>>, wake: Option<Instant>) -> Option<Vec<W>> {
        loop {
            let until = match (self.until, wake) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let received = match until {
                None => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
                Some(until) => rx.recv_timeout(until.saturating_duration_since(Instant::now())),
            };
            match received {
                Ok(Queued::Now(work)) => {
                    self.waiting.push(work);
                    return Some(self.take());
                }
                Ok(Queued::Riding(work)) => {
                    self.until
                        .get_or_insert_with(|| Instant::now() + RIDE_AT_MOST);
                    self.waiting.push(work);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => return Some(self.take()),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return (!self.waiting.is_empty()).then(|| self.take());
                }
            }
        }
    }

    fn take(&mut self) -> Vec<W> {
        self.until = None;
        std::mem::take(&mut self.waiting)
    }
}

impl<W> Drop for CommitterThread<W> {
    fn drop(&mut self) {
        if let Ok(mut q) = self.queue.lock() {
            q.take();
        }
        if let Some(t) = self.thread.lock().ok().and_then(|mut t| t.take()) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `submit` against a committer that records its groups, then the groups.
    fn groups(submit: impl FnOnce(&CommitterThread<u32>)) -> Vec<Vec<u32>> {
        let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
        let kept = seen.clone();
        let committer = CommitterThread::start("test-commit", move |group| {
            kept.lock().expect("lock").push(group);
            None
        })
        .expect("start");
        submit(&committer);
        drop(committer);
        let groups = seen.lock().expect("lock").clone();
        groups
    }

    #[test]
    fn r_di_2_a_riding_write_goes_with_the_next_write_in_the_order_they_came() {
        let got = groups(|c| {
            c.submit_riding(1).expect("ride");
            c.submit_riding(2).expect("ride");
            std::thread::park_timeout(Duration::from_millis(1));
            c.submit(3).expect("submit");
        });
        assert_eq!(got.concat(), vec![1, 2, 3]);
        assert_eq!(got.len(), 1, "one group, one sync: {got:?}");
    }

    #[test]
    fn r_di_2_a_riding_write_alone_goes_after_its_wait() {
        let started = Instant::now();
        let got = groups(|c| {
            c.submit_riding(7).expect("ride");
            // Past the wait, with the queue still open: the rider went on its own.
            std::thread::park_timeout(RIDE_AT_MOST * 20);
        });
        assert_eq!(got, vec![vec![7]]);
        assert!(started.elapsed() >= RIDE_AT_MOST);
    }

    #[test]
    fn r_di_1_a_commit_that_asks_to_come_back_is_called_with_no_writes_by_then() {
        let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
        let kept = seen.clone();
        let committer = CommitterThread::start("test-commit", move |group: Vec<u32>| {
            let mut seen = kept.lock().expect("lock");
            seen.push(group);
            // After the write, once: come back in 5 ms.
            (seen.len() == 1).then(|| Instant::now() + Duration::from_millis(5))
        })
        .expect("start");
        committer.submit(1).expect("submit");
        let deadline = Instant::now() + Duration::from_secs(2);
        while seen.lock().expect("lock").len() < 2 && Instant::now() < deadline {
            std::thread::park_timeout(Duration::from_millis(5));
        }
        drop(committer);
        let groups = seen.lock().expect("lock").clone();
        assert_eq!(groups, vec![vec![1], vec![]]);
    }

    #[test]
    fn r_di_2_riders_waiting_when_the_store_closes_are_still_written() {
        let got = groups(|c| c.submit_riding(9).expect("ride"));
        assert_eq!(got, vec![vec![9]]);
    }
}
