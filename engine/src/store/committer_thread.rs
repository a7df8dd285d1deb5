//! The one writer thread of an embedded store: takes the writes waiting at the moment (up to a
//! group) and hands them to `commit` together, so they share one sync to disk.
//!
//! Dropping the handle (with the last store clone) closes the queue and joins the thread, so
//! the store's files are closed when it is gone and can be reopened at once.

use std::sync::{mpsc, Mutex};

use super::StoreError;

/// Most writes merged into one group.
pub const GROUP: usize = 64;

pub struct CommitterThread<W> {
    name: &'static str,
    queue: Mutex<Option<mpsc::Sender<W>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl<W: Send + 'static> CommitterThread<W> {
    /// Starts thread `name`, which calls `commit` with each group until the handle is dropped.
    pub fn start(
        name: &'static str,
        mut commit: impl FnMut(Vec<W>) + Send + 'static,
    ) -> Result<Self, StoreError> {
        let (tx, rx) = mpsc::channel::<W>();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    let mut group = vec![first];
                    while group.len() < GROUP {
                        match rx.try_recv() {
                            Ok(work) => group.push(work),
                            Err(_) => break,
                        }
                    }
                    commit(group);
                }
            })
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        Ok(Self {
            name,
            queue: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
        })
    }

    pub fn submit(&self, work: W) -> Result<(), StoreError> {
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
