//! The committed corpus of every fuzz target, replayed on every `cargo test` (issue 19): inputs
//! the fuzzer found interesting, and any crash it once found (kept under `corpus/` after the
//! fix), keep passing without the nightly toolchain.

use std::path::Path;

fn replay(target: &str, body: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    let mut inputs = 0;
    for entry in std::fs::read_dir(&dir).expect("the target's corpus") {
        let path = entry.expect("a corpus entry").path();
        body(&std::fs::read(&path).expect("a corpus input"));
        inputs += 1;
    }
    assert!(inputs > 0, "{} holds no input", dir.display());
}

#[test]
fn r_in_3_every_record_in_the_verdict_corpus_ends_in_a_verdict() {
    replay("fuzz_verdict", hub_fuzz::verdict);
}

#[test]
fn r_sec_2_every_endpoint_in_the_corpus_is_stored_or_refused_with_a_code() {
    replay("fuzz_endpoint", hub_fuzz::endpoint);
}

#[test]
fn r_cp_2_every_body_in_the_corpus_is_validated_without_a_panic() {
    replay("fuzz_subscription_body", hub_fuzz::subscription_body);
}

#[test]
fn r_cp_13_every_if_match_and_idempotency_key_in_the_corpus_is_read_or_refused() {
    replay("fuzz_request_headers", hub_fuzz::request_headers);
}

#[test]
fn r_di_13_every_answer_in_the_corpus_is_read_or_refused_without_a_panic() {
    replay("fuzz_webhook_answer", hub_fuzz::webhook_answer);
}

/// The corpus format means what it says: its seed named `accepted` is a valid event.
#[test]
fn r_in_3_the_verdict_corpus_reads_records_as_written() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/fuzz_verdict");
    let (source, record) = hub_fuzz::record_of(&std::fs::read(dir.join("accepted")).expect("seed"));
    let judged = hub_engine::ingest::judge_into(
        &mut hub_engine::store::IngestBatch::default(),
        record,
        &source,
        &hub_engine::verdict::VerdictLimits::default(),
        &hub_engine::verdict::VerdictCounters::default(),
        0,
    );
    assert!(
        matches!(judged, hub_engine::ingest::Judged::Accepted { .. }),
        "{judged:?}"
    );
}
