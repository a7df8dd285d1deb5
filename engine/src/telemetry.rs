//! Metric names in one place (STYLE §9) and their Prometheus text rendering.

use std::fmt::Write;

use crate::verdict::{QuarantineReason, VerdictSnapshot};

/// Records per verdict (`accepted`, `dropped_system`, `deduplicated`).
pub const INGEST_VERDICTS: &str = "streaming_hub_ingest_verdicts_total";
/// Quarantined records per reason code.
pub const INGEST_QUARANTINED: &str = "streaming_hub_ingest_quarantined_total";

/// Renders the summed ingest counters in the Prometheus text format.
pub fn render_ingest(s: &VerdictSnapshot) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP {INGEST_VERDICTS} Ingested records per verdict."
    );
    let _ = writeln!(out, "# TYPE {INGEST_VERDICTS} counter");
    for (verdict, n) in [
        ("accepted", s.accepted),
        ("deduplicated", s.deduplicated),
        ("dropped_system", s.dropped_system),
    ] {
        let _ = writeln!(out, "{INGEST_VERDICTS}{{verdict=\"{verdict}\"}} {n}");
    }
    let _ = writeln!(
        out,
        "# HELP {INGEST_QUARANTINED} Quarantined records per reason."
    );
    let _ = writeln!(out, "# TYPE {INGEST_QUARANTINED} counter");
    for (code, n) in QuarantineReason::CODES.iter().zip(s.quarantined) {
        let _ = writeln!(out, "{INGEST_QUARANTINED}{{reason=\"{code}\"}} {n}");
    }
    out
}
