//! `disk-full:S` (embedded store): the hub's data directory is a size-limited tmpfs. Before the
//! backlog is ingested a filler file takes every free byte but a little headroom, so the store
//! runs out of space while it ingests (delivery steps reuse the pages the store freed, so a disk
//! that fills later in a run may never refuse a write). The hub must say so (`/ready` answers 503
//! naming the store), commit no position that is not durable, and, once the filler is deleted
//! S seconds later, resume by itself. The common checks (nothing lost, every offset committed,
//! quarantine exact) show the rest.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::{ready_says_down, wait_until, Ctx, Injection};

/// A tmpfs mounted on a directory for one run; unmounted when dropped.
pub struct Tmpfs {
    at: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `mib` MiB on `at` (root only: the run says so if the mount is refused).
    pub fn mount(at: &Path, mib: u64) -> anyhow::Result<Self> {
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(at)
            .status()?;
        anyhow::ensure!(
            status.success(),
            "disk-full needs a size-limited tmpfs: `mount -t tmpfs` on {} was refused (run as root)",
            at.display()
        );
        Ok(Self { at: at.to_owned() })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazy: a hub that still holds a file must not keep the mount alive.
        let _ = Command::new("umount").arg("-l").arg(&self.at).status();
    }
}

/// Room for the run's store with a wide margin: the filler takes whatever is left.
pub fn tmpfs_mib(records: u64) -> u64 {
    512 + records * 16 / 1024
}

/// Room left for the store when the disk is filled: a few hundred events, so the store runs out
/// early in the backlog.
const HEADROOM: u64 = 2 << 20;

/// Fills the file system under `data_dir` but [`HEADROOM`] bytes (a file `filler`); answers the
/// bytes it holds.
pub fn fill(data_dir: &Path) -> anyhow::Result<u64> {
    let path = data_dir.join("filler");
    let mut file = std::fs::File::create(&path)?;
    let mut written = 0u64;
    for chunk in [8 << 20, 64 << 10, 4 << 10, 1] {
        let block = vec![0xA5u8; chunk];
        loop {
            match file.write(&block) {
                Ok(0) => break,
                Ok(n) => written += n as u64,
                Err(e) if e.raw_os_error() == Some(28) => break, // ENOSPC
                Err(e) => return Err(e.into()),
            }
        }
    }
    let kept = written.saturating_sub(HEADROOM);
    file.set_len(kept)?;
    Ok(kept)
}

/// The one injection: the disk was filled before the hub started; wait until `/ready` says the
/// store is down, hold `seconds`, delete the filler, wait for the hub to move again.
pub async fn disk_full(
    ctx: &Ctx<'_>,
    hub_url: &str,
    data_dir: &Path,
    seconds: u64,
) -> anyhow::Result<Vec<Injection>> {
    let said_within = Instant::now();
    let mut said_why = false;
    while !said_why && said_within.elapsed() < Duration::from_secs(60) {
        said_why = ready_says_down(hub_url, "store").await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (delivered_at, committed_at) = (ctx.delivered(), ctx.follower.committed());
    let at_s = ctx.t0.elapsed().as_secs_f64();
    eprintln!(
        "[faults] store out of space at {at_s:.1} s ({committed_at} of {} positions committed); \
         freeing it in {seconds} s",
        ctx.produced
    );
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let (during, committed_during) = (
        ctx.delivered() - delivered_at,
        ctx.follower.committed().saturating_sub(committed_at),
    );
    std::fs::remove_file(data_dir.join("filler"))?;
    let freed = Instant::now();
    let (delivered_up, committed_up) = (ctx.delivered(), ctx.follower.committed());
    wait_until(
        || {
            (ctx.delivered() > delivered_up || ctx.delivered() >= ctx.expected)
                && (ctx.follower.committed() > committed_up
                    || ctx.follower.committed() >= ctx.produced)
        },
        || ctx.delivered() + ctx.follower.committed(),
        "recovery after the disk was freed",
    )
    .await?;
    let failed = (!said_why)
        .then(|| "/ready never answered 503 naming the store while the disk was full".to_owned());
    Ok(vec![Injection {
        n: 1,
        at_s,
        delivered_at,
        recovered_after_s: freed.elapsed().as_secs_f64(),
        duplicates: 0,
        note: format!(
            "out of space with {committed_at} of {} positions committed; while full {during} \
             delivered and {committed_during} more committed",
            ctx.produced
        ),
        killed_at: None,
        failed,
    }])
}
