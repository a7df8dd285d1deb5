//! What the destinations of a run saw, whatever the sink: unique (destination, event)
//! deliveries, requests, deliveries per tenant, and the end-to-end latency from the producer's
//! send (written into every payload as `"sent_ms":<unix ms>`) to arrival, in HDR histograms.
//! Webhook receivers, queue consumers and pull readers all record here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use hdrhistogram::Histogram;

/// The counts.
#[derive(Debug, Default)]
pub struct Seen {
    pub deliveries: u64,
    pub bad_signatures: u64,
    /// `(destination, event id)` delivered, pings left out, with when it first arrived.
    pub unique_events: UniqueEvents,
    /// Every delivery of a pair already delivered: (its first arrival, this one). A fault run
    /// tells from these which fault caused each repeat.
    pub repeats: Vec<(std::time::Instant, std::time::Instant)>,
    pub per_tenant: HashMap<String, u64>,
}

/// `(destination, event id)` pairs with their first arrival, in shards. A growing map moves
/// everything it holds at once when it grows, and every receiver waits on the tally's lock
/// meanwhile: one map of half a million pairs stopped them all for up to 260 ms at a time, which
/// was the whole p99 of a 20,000/s run (issue 17). A shard grows 1/64 of that.
#[derive(Debug)]
pub struct UniqueEvents {
    shards: Vec<HashMap<(String, String), std::time::Instant>>,
    hasher: std::collections::hash_map::RandomState,
}

const UNIQUE_SHARDS: usize = 64;

impl Default for UniqueEvents {
    fn default() -> Self {
        Self {
            shards: (0..UNIQUE_SHARDS).map(|_| HashMap::new()).collect(),
            hasher: Default::default(),
        }
    }
}

impl UniqueEvents {
    pub fn len(&self) -> usize {
        self.shards.iter().map(HashMap::len).sum()
    }

    pub fn keys(&self) -> impl Iterator<Item = &(String, String)> {
        self.shards.iter().flat_map(HashMap::keys)
    }

    /// Records `event` arriving at `destination` at `now`: `None` the first time, else when it
    /// first arrived.
    pub fn arrived(
        &mut self,
        destination: &str,
        event: &str,
        now: std::time::Instant,
    ) -> Option<std::time::Instant> {
        use std::hash::BuildHasher;
        let shard = (self.hasher.hash_one((destination, event)) % UNIQUE_SHARDS as u64) as usize;
        match self.shards[shard].entry((destination.to_owned(), event.to_owned())) {
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(now);
                None
            }
            std::collections::hash_map::Entry::Occupied(o) => Some(*o.get()),
        }
    }
}

/// Shared by every recorder of a run; cheap to clone.
#[derive(Clone)]
pub struct Tally {
    /// Unique deliveries, for the progress sampler.
    delivered: Arc<AtomicU64>,
    seen: Arc<Mutex<Seen>>,
    latencies: Arc<Mutex<Latencies>>,
    tenant_latency_us: Arc<Mutex<HashMap<String, Histogram<u64>>>>,
}

/// The producer's send time in a payload (`"sent_ms":<unix ms>` near its start).
pub fn sent_ms(body: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(body.get(..body.len().min(96))?).ok()?;
    let rest = &text[text.find("\"sent_ms\":")? + 10..];
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// Producer send → arrival latencies, and the worst of the events sent in each second (when a
/// tail happened, not only how long it was): what the receivers and Kafka alone
/// (`broker_latency.rs`) both record.
pub struct Latencies {
    us: Histogram<u64>,
    /// Unix second of sending → worst latency (µs).
    worst: std::collections::BTreeMap<i64, u64>,
}

impl Latencies {
    pub fn new() -> anyhow::Result<Self> {
        Ok(Self {
            us: Histogram::new_with_bounds(1, 3_600_000_000, 3)?,
            worst: std::collections::BTreeMap::new(),
        })
    }

    /// An event sent at `sent_ms` (unix ms) that arrived at `now_ms` (clocks of one machine).
    pub fn record(&mut self, sent_ms: i64, now_ms: i64) {
        let us = u64::try_from((now_ms - sent_ms).max(0) * 1000).unwrap_or(0);
        self.us.saturating_record(us);
        let second = self.worst.entry(sent_ms.div_euclid(1000)).or_default();
        *second = (*second).max(us);
    }

    pub fn len(&self) -> u64 {
        self.us.len()
    }

    /// p50, p90, p99, p99.9 and max, in ms.
    pub fn summary_ms(&self) -> Option<[f64; 5]> {
        if self.us.is_empty() {
            return None;
        }
        let q = |p: f64| self.us.value_at_quantile(p) as f64 / 1000.0;
        Some([
            q(0.5),
            q(0.9),
            q(0.99),
            q(0.999),
            self.us.max() as f64 / 1000.0,
        ])
    }

    /// (percentile, ms) from p0 to p99.99, denser in the tail.
    pub fn curve_ms(&self) -> Vec<(f64, f64)> {
        if self.us.is_empty() {
            return Vec::new();
        }
        let mut points: Vec<f64> = (0..=90).map(f64::from).collect();
        points.extend((1..=9).map(|i| 90.0 + f64::from(i)));
        points.extend([99.5, 99.9, 99.95, 99.99]);
        points
            .into_iter()
            .map(|p| (p, self.us.value_at_quantile(p / 100.0) as f64 / 1000.0))
            .collect()
    }

    /// The worst latency (ms) of the events sent in each second, by unix second.
    pub fn worst_by_sent_second(&self) -> Vec<(i64, f64)> {
        self.worst
            .iter()
            .map(|(s, us)| (*s, *us as f64 / 1000.0))
            .collect()
    }
}

impl Tally {
    pub fn new() -> anyhow::Result<Self> {
        Ok(Self {
            delivered: Arc::default(),
            seen: Arc::default(),
            latencies: Arc::new(Mutex::new(Latencies::new()?)),
            tenant_latency_us: Arc::default(),
        })
    }

    /// A request that was not a success (a failure answered, a bad signature).
    pub fn record_failure(&self, bad_signature: bool) {
        if let Ok(mut seen) = self.seen.lock() {
            seen.deliveries += 1;
            seen.bad_signatures += u64::from(bad_signature);
        }
    }

    /// A successful delivery of `event` to `destination` for `tenant`, sent at `sent_ms`.
    pub fn record(&self, destination: &str, event: &str, tenant: &str, sent_ms: Option<i64>) {
        if let Ok(mut seen) = self.seen.lock() {
            seen.deliveries += 1;
            let now = std::time::Instant::now();
            match seen.unique_events.arrived(destination, event, now) {
                None => {
                    self.delivered.fetch_add(1, Ordering::Relaxed);
                }
                Some(first) => seen.repeats.push((first, now)),
            }
            *seen.per_tenant.entry(tenant.to_owned()).or_default() += 1;
        }
        let Some(sent) = sent_ms else { return };
        let now = crate::machine::unix_ms();
        let us = u64::try_from((now - sent).max(0) * 1000).unwrap_or(0);
        if let Ok(mut latencies) = self.latencies.lock() {
            latencies.record(sent, now);
        }
        if let Ok(mut per) = self.tenant_latency_us.lock() {
            if !per.contains_key(tenant) {
                if let Ok(fresh) = Histogram::new_with_bounds(1, 3_600_000_000, 2) {
                    per.insert(tenant.to_owned(), fresh);
                }
            }
            if let Some(hist) = per.get_mut(tenant) {
                let _ = hist.record(us);
            }
        }
    }

    /// The count of unique successful deliveries, shared with the progress sampler.
    pub fn delivered_counter(&self) -> Arc<AtomicU64> {
        self.delivered.clone()
    }

    pub fn seen<T>(&self, read: impl FnOnce(&Seen) -> T) -> Option<T> {
        self.seen.lock().ok().map(|s| read(&s))
    }

    /// p50, p90, p99, p99.9 and max of end-to-end latency, in ms.
    pub fn latency_ms(&self) -> Option<[f64; 5]> {
        self.latencies.lock().ok()?.summary_ms()
    }

    /// The latency distribution: (percentile, ms) from p0 to p99.99, denser in the tail.
    pub fn latency_curve(&self) -> Vec<(f64, f64)> {
        self.latencies
            .lock()
            .map(|l| l.curve_ms())
            .unwrap_or_default()
    }

    /// The worst latency (ms) of the events sent in each second, by unix second.
    pub fn worst_by_sent_second(&self) -> Vec<(i64, f64)> {
        self.latencies
            .lock()
            .map(|l| l.worst_by_sent_second())
            .unwrap_or_default()
    }

    /// Per tenant: (tenant, deliveries, p50 ms, p99 ms, max ms), most deliveries first.
    pub fn tenant_latency(&self) -> Vec<(String, u64, f64, f64, f64)> {
        let Ok(per) = self.tenant_latency_us.lock() else {
            return Vec::new();
        };
        let ms = |v: u64| v as f64 / 1000.0;
        let mut out: Vec<_> = per
            .iter()
            .map(|(t, h)| {
                (
                    t.clone(),
                    h.len(),
                    ms(h.value_at_quantile(0.5)),
                    ms(h.value_at_quantile(0.99)),
                    ms(h.max()),
                )
            })
            .collect();
        out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pair is unique once, whichever shard holds it; a repeat says when the first came.
    #[test]
    fn unique_deliveries_are_counted_once_across_shards() {
        let mut seen = UniqueEvents::default();
        let first = std::time::Instant::now();
        for i in 0..1_000 {
            assert!(seen
                .arrived("/hook/a-t1", &format!("e{i}"), first)
                .is_none());
        }
        assert!(
            seen.arrived("/hook/b-t1", "e1", first).is_none(),
            "another destination"
        );
        let later = first + std::time::Duration::from_millis(5);
        assert_eq!(seen.arrived("/hook/a-t1", "e7", later), Some(first));
        assert_eq!(seen.len(), 1_001);
        assert_eq!(seen.keys().count(), 1_001);
        assert!(seen.shards.iter().filter(|s| !s.is_empty()).count() > UNIQUE_SHARDS / 2);
    }
}
