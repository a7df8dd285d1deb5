//! Partitions whose committed position stands still while records wait, said once in the log
//! with what librdkafka knows of them (its fetch state, where it fetches next, what it handed the
//! hub), read from the statistics every `statistics.interval.ms`.
//!
//! A position can stand still for good reasons (delivery back-pressure holds ingest, a store
//! that does not answer), so this only says it, at info, once per stall: when a partition's lag
//! stops moving, an operator's first question is whether the client stopped fetching it, the hub
//! stopped taking it, or the store stopped making it durable, and these fields tell which.

use std::collections::HashMap;
use std::sync::Mutex;

/// How long a partition's committed position may stand still, records waiting, before it is said.
pub const STALL_AFTER_MS: i64 = 60_000;

/// A partition's committed position and since when it has stood there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Standing {
    committed: i64,
    since_ms: i64,
    said: bool,
}

/// Whether to say the partition now, and what to remember of it: said once a stall lasts
/// `STALL_AFTER_MS` with records waiting, and again only after the position moved.
fn judge(before: Option<Standing>, committed: i64, lag: i64, now_ms: i64) -> (Standing, bool) {
    let standing = match before {
        Some(s) if s.committed == committed => s,
        _ => Standing {
            committed,
            since_ms: now_ms,
            said: false,
        },
    };
    let stalled = lag > 0 && now_ms - standing.since_ms >= STALL_AFTER_MS && !standing.said;
    (
        Standing {
            said: standing.said || stalled,
            ..standing
        },
        stalled,
    )
}

/// The ingest consumer's partitions as the last statistics left them.
#[derive(Debug, Default)]
pub struct StallWatch {
    seen: Mutex<HashMap<(String, i32), Standing>>,
}

impl StallWatch {
    /// Reads one statistics report; says each partition whose stall just passed the bound.
    pub fn observe(&self, stats: &rdkafka::Statistics, now_ms: i64) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        // Only the partitions of this report are kept: one revoked since is forgotten.
        let mut now_seen = HashMap::with_capacity(seen.len());
        for (topic, t) in &stats.topics {
            for (&partition, p) in t.partitions.iter().filter(|(n, _)| **n >= 0) {
                let key = (topic.clone(), partition);
                let (standing, say) = judge(
                    seen.get(&key).copied(),
                    p.committed_offset,
                    p.consumer_lag,
                    now_ms,
                );
                if say {
                    tracing::info!(
                        topic,
                        partition,
                        committed = p.committed_offset,
                        lag = p.consumer_lag,
                        fetch_state = %p.fetch_state,
                        next_fetch = p.next_offset,
                        handed_to_hub = p.app_offset,
                        queued = p.fetchq_cnt,
                        stood_s = STALL_AFTER_MS / 1000,
                        "partition's committed position stands still while records wait"
                    );
                }
                now_seen.insert(key, standing);
            }
        }
        *seen = now_seen;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_op_4_a_standing_position_with_records_waiting_is_said_once_per_stall() {
        let (s, say) = judge(None, 100, 50, 0);
        assert!(!say, "just seen");
        let (s, say) = judge(Some(s), 100, 50, STALL_AFTER_MS - 1);
        assert!(!say, "not long enough");
        let (s, say) = judge(Some(s), 100, 50, STALL_AFTER_MS);
        assert!(say, "stood the bound with records waiting");
        let (s, say) = judge(Some(s), 100, 50, 3 * STALL_AFTER_MS);
        assert!(!say, "said once per stall");
        let (s, say) = judge(Some(s), 120, 30, 3 * STALL_AFTER_MS);
        assert!(!say && !s.said, "a moved position starts over");
        let (_, say) = judge(Some(s), 120, 30, 4 * STALL_AFTER_MS);
        assert!(say, "a new stall is said again");
        let (_, say) = judge(None, 100, 0, 0);
        let (_, say_idle) = judge(
            Some(Standing {
                committed: 100,
                since_ms: 0,
                said: false,
            }),
            100,
            0,
            2 * STALL_AFTER_MS,
        );
        assert!(
            !say && !say_idle,
            "an idle partition with nothing waiting is not a stall"
        );
    }
}
