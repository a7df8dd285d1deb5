//! The embedded store on a full disk (issue 19): `hub_core::redb_handle` reopens it.

use hub_core::redb_handle::testing::{fill, Tmpfs};

use crate::store::conformance::write_big_event;
use crate::store::embedded::EmbeddedStore;
use crate::store::{EventLog, Ingest, StoreOps, UnitId};

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
    write_big_event(&store, &unit, fence, 0)
        .await
        .expect("room at first");
    fill(dir.path(), 256 << 10).expect("filled");

    let mut acknowledged = 1;
    let failure = loop {
        match write_big_event(&store, &unit, fence, acknowledged).await {
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
        write_big_event(&store, &unit, fence, acknowledged)
            .await
            .is_err(),
        "still full, still refused"
    );

    std::fs::remove_file(dir.path().join("filler")).expect("space freed");
    let mut resumed = false;
    for _ in 0..50 {
        if write_big_event(&store, &unit, fence, acknowledged)
            .await
            .is_ok()
        {
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
