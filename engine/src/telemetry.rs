//! Metric names in one place (STYLE §9) and their Prometheus text rendering.

use std::fmt::Write;

use crate::verdict::{QuarantineReason, VerdictSnapshot};

/// Records per outcome of ingest, each record counted once: `stored` (accepted and new),
/// `deduplicated` (accepted, already stored), `dropped_system`, `quarantined` (every reason).
pub const INGEST_VERDICTS: &str = "streaming_hub_ingest_verdicts_total";
/// Quarantined records per reason code.
pub const INGEST_QUARANTINED: &str = "streaming_hub_ingest_quarantined_total";

/// Renders the summed ingest counters in the Prometheus text format.
/// Store write time per phase, as counters a scrape can turn into rates and shares.
pub fn render_store_timings(phases: &[crate::store::timings::PhaseTotal]) -> String {
    let mut out = String::new();
    if phases.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "# HELP {STORE_PHASE_NANOS} Wall time spent in each phase of the store's batch writes."
    );
    let _ = writeln!(out, "# TYPE {STORE_PHASE_NANOS} counter");
    for p in phases {
        let _ = writeln!(
            out,
            "{STORE_PHASE_NANOS}{{phase=\"{}\"}} {}",
            p.phase, p.nanos
        );
    }
    let _ = writeln!(
        out,
        "# HELP {STORE_PHASE_COUNT} Batch writes that went through each phase."
    );
    let _ = writeln!(out, "# TYPE {STORE_PHASE_COUNT} counter");
    for p in phases {
        let _ = writeln!(
            out,
            "{STORE_PHASE_COUNT}{{phase=\"{}\"}} {}",
            p.phase, p.count
        );
    }
    out
}

const STORE_PHASE_NANOS: &str = "streaming_hub_store_write_phase_nanoseconds_total";
const STORE_PHASE_COUNT: &str = "streaming_hub_store_write_phase_total";

pub fn render_ingest(s: &VerdictSnapshot) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP {INGEST_VERDICTS} Ingested records per verdict."
    );
    let _ = writeln!(out, "# TYPE {INGEST_VERDICTS} counter");
    for (verdict, n) in [
        ("stored", s.accepted.saturating_sub(s.deduplicated)),
        ("deduplicated", s.deduplicated),
        ("dropped_system", s.dropped_system),
        ("quarantined", s.quarantined.iter().sum()),
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

/// Delivery outcomes per kind (`delivered`, `failed_attempt`, `dead_lettered`, `deferred`,
/// `cancelled`, `auto_disabled`).
pub const DELIVERY_OUTCOMES: &str = "streaming_hub_delivery_outcomes_total";
/// Jobs waiting in the store (due or not).
pub const DELIVERY_PENDING: &str = "streaming_hub_delivery_pending_jobs";

pub fn render_delivery(c: &crate::delivery::lane::DeliveryCounters) -> String {
    use std::sync::atomic::Ordering::Relaxed;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP {DELIVERY_OUTCOMES} Delivery outcomes per kind."
    );
    let _ = writeln!(out, "# TYPE {DELIVERY_OUTCOMES} counter");
    for (kind, n) in [
        ("delivered", &c.delivered),
        ("failed_attempt", &c.failed_attempts),
        ("dead_lettered", &c.dead_lettered),
        ("deferred", &c.deferred),
        ("cancelled", &c.cancelled),
        ("auto_disabled", &c.auto_disabled),
    ] {
        let _ = writeln!(
            out,
            "{DELIVERY_OUTCOMES}{{outcome=\"{kind}\"}} {}",
            n.load(Relaxed)
        );
    }
    out
}

/// Store calls that failed and are retried, per stage (`ingest_batch`, `delivery_page`,
/// `delivery_step`): nothing is lost while the store is away, but nothing moves either, and the
/// log's warnings are not a number an alert can watch.
pub const STORE_FAILURES: &str = "streaming_hub_store_failures_total";

/// The stages a store failure is counted under.
#[derive(Debug, Clone, Copy)]
pub enum FailedStage {
    IngestBatch,
    DeliveryPage,
    DeliveryStep,
}

impl FailedStage {
    const ALL: [FailedStage; 3] = [Self::IngestBatch, Self::DeliveryPage, Self::DeliveryStep];

    fn label(self) -> &'static str {
        match self {
            Self::IngestBatch => "ingest_batch",
            Self::DeliveryPage => "delivery_page",
            Self::DeliveryStep => "delivery_step",
        }
    }
}

/// Process-wide: every shard and lane counts into it, and there is one store per process.
static STORE_FAILED: [std::sync::atomic::AtomicU64; 3] =
    [const { std::sync::atomic::AtomicU64::new(0) }; 3];

/// Counts one failed store call of `stage`.
pub fn store_failed(stage: FailedStage) {
    STORE_FAILED[stage as usize].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

pub fn render_store_failures() -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP {STORE_FAILURES} Store calls that failed (and are retried) per stage."
    );
    let _ = writeln!(out, "# TYPE {STORE_FAILURES} counter");
    for stage in FailedStage::ALL {
        let n = STORE_FAILED[stage as usize].load(std::sync::atomic::Ordering::Relaxed);
        let _ = writeln!(out, "{STORE_FAILURES}{{stage=\"{}\"}} {n}", stage.label());
    }
    out
}

pub fn render_pending(pending: u64) -> String {
    format!(
        "# HELP {DELIVERY_PENDING} Jobs waiting in the store.\n# TYPE {DELIVERY_PENDING} gauge\n{DELIVERY_PENDING} {pending}\n"
    )
}

/// Whether each component of readiness answered (R-OP-4): 1 up, 0 down.
pub const COMPONENT_UP: &str = "streaming_hub_component_up";

pub fn render_components(components: &[crate::readiness::Component]) -> String {
    let mut out = format!(
        "# HELP {COMPONENT_UP} Whether a component of readiness is up (1) or down (0).\n# TYPE {COMPONENT_UP} gauge\n"
    );
    for c in components {
        out.push_str(&format!(
            "{COMPONENT_UP}{{component=\"{}\"}} {}\n",
            c.name,
            u8::from(c.is_up())
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count_of(text: &str, stage: &str) -> u64 {
        let prefix = format!("{STORE_FAILURES}{{stage=\"{stage}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|n| n.parse().ok())
            .expect("the stage's line")
    }

    #[test]
    fn store_failures_are_counted_per_stage() {
        let before = render_store_failures();
        store_failed(FailedStage::DeliveryStep);
        store_failed(FailedStage::DeliveryStep);
        let after = render_store_failures();
        // Other tests of this process may count too: at least ours.
        assert!(
            count_of(&after, "delivery_step") >= count_of(&before, "delivery_step") + 2,
            "{after}"
        );
        for stage in ["ingest_batch", "delivery_page"] {
            count_of(&after, stage);
        }
    }
}
