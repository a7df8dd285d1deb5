//! The log's files: numbered segments in one directory, appended at the newest one's end and
//! dropped whole from the oldest.
//!
//! Each append is one frame written at the end and, unless its writes may wait for it, one
//! `fdatasync`; a frame appended without one is synced by the next that has one, by a roll, or
//! when the log closes (`unsynced_since`, `log::committer`). Readers read records with
//! positioned reads (`pread`) through a shared handle, so a segment dropped while a read is
//! under way stays readable until that read ends.
//!
//! The active segment is prepared ahead of its appends: zeros are written and synced 256 KiB at
//! a time past its end (`Preparation`), so an append overwrites blocks the file already holds
//! and its `fdatasync` flushes data alone — no size or extent change for the journal to commit
//! with every frame (issue 17: about a third less CPU and wall time per sync here). The
//! committer prepares between groups, after answering one, and without the log's lock, so no
//! write waits for it unless it comes meanwhile and no read waits for it at all; a mebibyte at a
//! time took 7 ms (up to 49) here, 256 KiB 1.7 ms.
//! A frame never has length 0, so replay reads the zeros as the end of the log.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use super::record::{frames, Loc, Record};
use crate::store::unavailable;
use crate::store::StoreError;

/// A segment is rolled over once it holds this much (the default; tests use less).
pub const SEGMENT_BYTES: u64 = 64 << 20;

/// How far past its end the active segment is prepared at a time.
const PREPARE_BYTES: u64 = 256 << 10;

#[derive(Debug)]
pub(super) struct Segments {
    dir: PathBuf,
    files: BTreeMap<u32, Arc<File>>,
    /// The newest segment, the one appended to, and how much of it holds good frames.
    active: u32,
    active_len: u64,
    /// How much of the active segment the file holds, synced: zeros past `active_len`.
    prepared: u64,
    /// When the first frame of the active segment not yet synced was appended.
    unsynced_since: Option<Instant>,
    /// Held (an advisory lock on `LOCK`) while the log is open: one process writes a log.
    _lock: File,
}

fn segment_path(dir: &Path, n: u32) -> PathBuf {
    dir.join(format!("{n:010}.log"))
}

impl Segments {
    /// Opens the segments in `dir`, creating the directory and a first segment when there are
    /// none.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir).map_err(unavailable)?;
        let lock = open_file(&dir.join("LOCK"))?;
        lock.try_lock().map_err(|e| {
            StoreError::Unavailable(format!(
                "the log in {} is open in another process ({e})",
                dir.display()
            ))
        })?;
        let mut files = BTreeMap::new();
        for entry in std::fs::read_dir(dir).map_err(unavailable)? {
            let path = entry.map_err(unavailable)?.path();
            let number = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".log"))
                .and_then(|n| n.parse::<u32>().ok());
            if let Some(n) = number {
                files.insert(n, Arc::new(open_file(&path)?));
            }
        }
        let mut segments = Self {
            dir: dir.to_owned(),
            files,
            active: 0,
            active_len: 0,
            prepared: 0,
            unsynced_since: None,
            _lock: lock,
        };
        match segments.files.keys().next_back().copied() {
            Some(newest) => {
                segments.active = newest;
                segments.active_len = segments.files[&newest]
                    .metadata()
                    .map_err(unavailable)?
                    .len();
                segments.prepared = segments.active_len;
            }
            None => segments.create(0)?,
        }
        Ok(segments)
    }

    fn create(&mut self, n: u32) -> Result<(), StoreError> {
        let file = open_file(&segment_path(&self.dir, n))?;
        sync_dir(&self.dir)?;
        self.files.insert(n, Arc::new(file));
        self.active = n;
        self.active_len = 0;
        self.prepared = 0;
        Ok(())
    }

    pub fn active(&self) -> u32 {
        self.active
    }

    pub fn active_len(&self) -> u64 {
        self.active_len
    }

    pub fn oldest(&self) -> u32 {
        self.files.keys().next().copied().unwrap_or(self.active)
    }

    /// Every segment's number, oldest first.
    pub fn numbers(&self) -> Vec<u32> {
        self.files.keys().copied().collect()
    }

    /// Starts a new segment; appends go there from now on, once the old one is synced (a frame
    /// of a later segment never lasts where an earlier one did not). The old one's prepared
    /// zeros go (replay would drop them anyway).
    pub fn roll(&mut self) -> Result<(), StoreError> {
        self.sync()?;
        let (old, frames_end) = (self.files[&self.active].clone(), self.active_len);
        self.create(self.active + 1)?;
        if let Err(e) = old.set_len(frames_end) {
            tracing::debug!(error = %e, "could not drop a rolled segment's prepared zeros");
        }
        Ok(())
    }

    /// Appends a frame to the active segment and, when `sync`, syncs it with every frame before
    /// it. On failure the segment is cut back to where it was, so a torn frame never sits before
    /// later ones.
    ///
    /// A frame longer than the room prepared is written past it as it is: preparing first would
    /// write and sync zeros the frame then overwrites (two syncs on the write's path; a
    /// 1,000-event batch took twice as long), while one sync that also moves the file's end
    /// costs only its journal commit. The commit thread prepares past it after the answers
    /// (`preparation`).
    pub fn append(&mut self, frame: &[u8], sync: bool) -> Result<(), StoreError> {
        let file = self.files[&self.active].clone();
        let end = self.active_len + frame.len() as u64;
        let written = file.write_all_at(frame, self.active_len).and_then(|()| {
            if sync {
                file.sync_data()
            } else {
                Ok(())
            }
        });
        match written {
            Ok(()) => {
                self.active_len = end;
                self.unsynced_since = match sync {
                    true => None,
                    false => self.unsynced_since.or_else(|| Some(Instant::now())),
                };
                // An append past the prepared room moved the file's end itself; the next
                // preparation starts there, never over this frame.
                self.prepared = self.prepared.max(end);
                Ok(())
            }
            Err(e) => {
                if let Err(cut) = file.set_len(self.active_len) {
                    tracing::warn!(error = %cut, "could not cut a failed append back");
                }
                self.prepared = self.active_len;
                Err(unavailable(e))
            }
        }
    }

    /// When the oldest frame appended without a sync was appended, if one waits for a sync.
    pub fn unsynced_since(&self) -> Option<Instant> {
        self.unsynced_since
    }

    /// Syncs the frames appended without a sync, if any.
    pub fn sync(&mut self) -> Result<(), StoreError> {
        if self.unsynced_since.is_some() {
            self.files[&self.active].sync_data().map_err(unavailable)?;
            self.unsynced_since = None;
        }
        Ok(())
    }

    /// The next stretch of the active segment to prepare, when less than half a stretch is
    /// left, unless the segment is full (`segment_bytes`: the next group rolls it).
    pub fn preparation(&self, segment_bytes: u64) -> Option<Preparation> {
        if !self.wants_preparation(segment_bytes) {
            return None;
        }
        let from = self.prepared.max(self.active_len);
        Some(Preparation {
            file: self.files[&self.active].clone(),
            from,
            to: (from / PREPARE_BYTES + 1) * PREPARE_BYTES,
        })
    }

    /// Whether the active segment has less than half a stretch prepared and room to grow.
    pub fn wants_preparation(&self, segment_bytes: u64) -> bool {
        let room = self.prepared.saturating_sub(self.active_len);
        room < PREPARE_BYTES / 2 && self.active_len < segment_bytes
    }

    /// Records how `preparation` went. Its sync was the active segment's, so the frames written
    /// without one are synced too. Without room (a full disk) the segment is cut back to its
    /// frames and appends go on unprepared, as they would have without this.
    pub fn prepared(&mut self, preparation: &Preparation, written: std::io::Result<()>) {
        match written {
            Ok(()) => {
                self.prepared = self.prepared.max(preparation.to);
                self.unsynced_since = None;
            }
            Err(e) => {
                tracing::debug!(error = %e, "could not prepare the log segment ahead");
                if let Err(cut) = preparation.file.set_len(self.active_len) {
                    tracing::warn!(error = %cut, "could not cut a failed preparation back");
                }
                self.prepared = self.active_len;
            }
        }
    }

    /// Removes the oldest segment (never the active one).
    pub fn drop_oldest(&mut self) -> Result<(), StoreError> {
        let oldest = self.oldest();
        if oldest == self.active {
            return Ok(());
        }
        std::fs::remove_file(segment_path(&self.dir, oldest)).map_err(unavailable)?;
        self.files.remove(&oldest);
        sync_dir(&self.dir)
    }

    /// A handle to read `loc` with, outside any lock.
    pub fn reader(&self, loc: Loc) -> Option<Arc<File>> {
        self.files.get(&loc.seg).cloned()
    }

    /// Replays every segment, oldest first, handing each record to `apply`. The active segment
    /// is cut back after its last whole frame (a crash may have torn it).
    pub fn replay(
        &mut self,
        mut apply: impl FnMut(Loc, &[u8]) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        for (&n, file) in &self.files {
            let len = file.metadata().map_err(unavailable)?.len();
            let mut bytes = vec![0; len as usize];
            file.read_exact_at(&mut bytes, 0).map_err(unavailable)?;
            let (records, end) = frames(n, &bytes);
            for (loc, record) in records {
                apply(loc, record)?;
            }
            // Zeros are what a `Preparation` wrote ahead; anything else is a frame torn by a crash.
            let torn = bytes[end as usize..].iter().any(|b| *b != 0);
            if torn {
                tracing::warn!(
                    segment = n,
                    kept = end,
                    dropped = len - end,
                    "log segment ends in a torn frame; dropped it"
                );
            }
            // The active segment keeps its prepared zeros for the appends to come; a torn
            // frame, or zeros an older segment kept past a crash, are cut back.
            let keep_zeros = n == self.active && !torn;
            if end < len && !keep_zeros {
                file.set_len(end).map_err(unavailable)?;
                file.sync_data().map_err(unavailable)?;
            }
            if n == self.active {
                self.active_len = end;
                self.prepared = if keep_zeros { len } else { end };
            }
        }
        Ok(())
    }
}

/// A log closed in order loses nothing it wrote, synced or not.
impl Drop for Segments {
    fn drop(&mut self) {
        if let Err(e) = self.sync() {
            tracing::warn!(error = %e, "could not sync the log's last frames on close");
        }
    }
}

/// Reads and decodes the record at `loc`.
pub(super) fn read_record(file: &File, loc: Loc) -> Result<Record, StoreError> {
    let mut bytes = vec![0; loc.len as usize];
    file.read_exact_at(&mut bytes, loc.offset)
        .map_err(unavailable)?;
    Record::decode(&bytes)
}

/// Opens (or creates) one of the log's files for reading and writing, without access times
/// where the kernel allows it (issue 17: the active segment's writes move its modification
/// time, so under `relatime` nearly every read of a leased job's event also dirtied the inode
/// for its access time, a sixth of each `pread`'s kernel time). Only the file's owner may ask
/// for that; a log in a directory of another user's files opens as before.
fn open_file(path: &Path) -> Result<File, StoreError> {
    let open = |flags| {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .custom_flags(flags)
            .open(path)
    };
    match open(libc::O_NOATIME) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => open(0),
        opened => opened,
    }
    .map_err(unavailable)
}

/// Makes a created or removed file's name durable.
fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(unavailable)
}

/// Zeros to write and sync past the active segment's prepared end (`Segments::preparation`).
/// Written without the log's lock, so readers do not wait for it (about 2 ms for a stretch
/// here): only the commit thread rolls or prepares, and no lane appends its own step while it
/// does (`committer::append_here`), so nothing moves the segment meanwhile, and readers never
/// read past its frames.
pub(super) struct Preparation {
    file: Arc<File>,
    from: u64,
    to: u64,
}

impl Preparation {
    pub fn write(&self) -> std::io::Result<()> {
        let zeros = vec![0; (self.to - self.from) as usize];
        self.file.write_all_at(&zeros, self.from)?;
        self.file.sync_data()
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;

    /// The open flags of `file`, as `/proc/self/fdinfo` tells them (octal).
    fn open_flags(file: &File) -> i32 {
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", file.as_raw_fd()))
            .expect("fdinfo of an open file");
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .expect("a flags line");
        i32::from_str_radix(flags.trim(), 8).expect("octal flags")
    }

    #[test]
    fn r_di_4_a_segment_read_back_for_an_attempt_leaves_its_access_time_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let segments = Segments::open(dir.path()).expect("open");
        let at = Loc {
            seg: segments.active(),
            offset: 0,
            len: 0,
        };
        let active = segments.reader(at).expect("the active segment");
        assert_ne!(open_flags(&active) & libc::O_NOATIME, 0);
    }
}
