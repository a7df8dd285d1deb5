//! The run's report: JSON for machines, Markdown with SVG plots for people. Every figure sits next
//! to the physical limit measured in the same run.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

use serde::Serialize;

use crate::hub::StoreChoice;
use crate::kafka::ProducedCounts;
use crate::machine::Machine;
use crate::scenario::{Mode, Scenario};
use crate::svg::{line_chart, Series};

/// One observation of the run, every `SAMPLE_MS`.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sample {
    pub t_s: f64,
    /// Records acknowledged by Kafka so far.
    pub produced: u64,
    /// Records whose offsets the hub committed (durable in its store).
    pub durable: u64,
    pub rss_kib: u64,
    /// Unique (subscription, event) deliveries the receivers accepted so far.
    pub delivered: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Baseline {
    pub raw_consume_records: u64,
    pub raw_consume_seconds: f64,
    pub raw_consume_rate: f64,
    /// HTTP target: the raw loopback POST rate (32 keep-alive clients), the limit for HTTP ingest.
    pub raw_post_rate: Option<f64>,
    /// Steady webhook runs: the floor probe at the same rate (`floor.rs`).
    pub floor: Option<crate::floor::FloorFigures>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PhaseShare {
    pub phase: String,
    pub batches: u64,
    pub seconds: f64,
    /// Mean milliseconds per batch in this phase.
    pub mean_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct HubFigures {
    /// Records made durable per second while the hub was draining (first to last commit).
    pub durable_rate: f64,
    pub durable_seconds: f64,
    /// From process start to its first commit (group join included).
    pub startup_seconds: f64,
    pub max_lag_records: u64,
    /// Steady runs: from the end of production to zero lag.
    pub drain_after_production_seconds: Option<f64>,
    pub rss_kib_end: u64,
    pub rss_kib_peak: u64,
    /// CPU the measured hub processes used over the whole run (user + system), in seconds.
    pub cpu_seconds: Option<f64>,
    /// Steady runs: the CPU over the paced phase alone (the hub's start, the scenario's set-up
    /// and the warm-up excluded).
    pub paced_cpu: Option<PacedCpu>,
    /// Each engine (one unless `--engines`).
    pub engines: Vec<crate::hub::EngineFigures>,
    pub counters: BTreeMap<String, u64>,
    pub store_phases: Vec<PhaseShare>,
    /// A CQL store's requests by statement (empty on the embedded store).
    pub cql_requests: Vec<crate::cql_requests::StatementShare>,
    /// A perf profile of the measured phase (`--profile`).
    pub profile: Option<crate::profile::ProfileFigures>,
}

/// The hub's CPU while the steady rate was produced, and the valid events produced meanwhile.
#[derive(Debug, Clone, Serialize)]
pub struct PacedCpu {
    pub seconds: f64,
    pub events: u64,
}

/// What the destinations saw of a delivery run, next to the physical limit of the same sink.
#[derive(Debug, Clone, Serialize)]
pub struct DeliveryFigures {
    pub subscriptions: usize,
    /// Unique (subscription, event) deliveries expected at the destinations that answer 2xx.
    pub expected: u64,
    pub unique_delivered: u64,
    /// Every request the receivers got (retries to failing destinations included).
    pub requests: u64,
    pub bad_signatures: u64,
    /// Unique deliveries per second, from the first to the last.
    pub rate: f64,
    pub seconds: f64,
    /// End to end, producer send → webhook arrival: p50, p90, p99, p99.9, max (ms).
    pub latency_ms: Option<[f64; 5]>,
    /// What the physical limit below is: for webhooks a plain keep-alive client POSTing to the
    /// same receiver (32 clients, same body size, 5 s); for the other sinks the same client
    /// against the same service (`sinks.rs`), measured after the hub stopped.
    pub limit: String,
    /// The physical limit, per second (the field keeps its first name for older reports).
    pub raw_post_rate: f64,
    /// Pull only: one reader re-reading the whole log with `after` and `limit=1000` once the
    /// run is delivered, events per second.
    pub reread_rate: Option<f64>,
    /// Steady runs fed from Kafka: the latency of Kafka alone over the paced phase, the floor
    /// of `latency_ms` (`broker_latency.rs`).
    pub broker_latency: Option<crate::broker_latency::BrokerLatency>,
    /// Jobs still pending in the hub at the end (retries of failing destinations).
    pub pending_jobs_end: u64,
    /// (percentile, ms) of end-to-end latency.
    pub latency_curve: Vec<(f64, f64)>,
    /// Per tenant, most deliveries first: (tenant, deliveries, p50 ms, p99 ms, max ms).
    pub per_tenant: Vec<(String, u64, f64, f64, f64)>,
    /// (unix second, worst latency in ms) of the events sent in each second.
    pub worst_by_sent_second: Vec<(i64, f64)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub what: String,
    pub expected: u64,
    pub actual: u64,
    pub ok: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub scenario: Scenario,
    pub target: crate::run::Target,
    /// The sink of a delivery run's subscriptions.
    pub sink: Option<crate::sinks::SinkChoice>,
    pub store: StoreChoice,
    pub command: String,
    /// The load producer's `linger.ms` (Kafka target): part of every latency measured.
    pub producer_linger_ms: u64,
    pub commit: String,
    pub machine: Machine,
    /// Whether the load's threads ran under `SCHED_BATCH`, unable to preempt the hub (`sched.rs`).
    pub load_stood_aside: bool,
    pub started_at: String,
    pub topic: String,
    pub produced: ProducedCounts,
    pub produce_seconds: f64,
    pub produce_rate: f64,
    pub baseline: Baseline,
    pub hub: HubFigures,
    pub delivery: Option<DeliveryFigures>,
    pub checks: Vec<Check>,
    pub timeline: Vec<Sample>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }

    /// The hub's CPU per event in µs: over the paced phase of a steady run, else over the whole
    /// run per delivered event.
    fn hub_cpu_per_event_us(&self) -> Option<f64> {
        if let Some(p) = &self.hub.paced_cpu {
            return Some(p.seconds * 1e6 / p.events.max(1) as f64);
        }
        let per = match &self.delivery {
            Some(d) => d.unique_delivered,
            None => self.produced.total,
        };
        Some(self.hub.cpu_seconds? * 1e6 / per.max(1) as f64)
    }

    pub fn ratio_to_raw(&self) -> f64 {
        if self.baseline.raw_consume_rate > 0.0 {
            self.hub.durable_rate / self.baseline.raw_consume_rate
        } else {
            0.0
        }
    }

    /// Writes `report.json`, `report.md`, `throughput.svg` and `lag.svg` into `dir`.
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("report.json"), serde_json::to_string_pretty(self)?)?;
        std::fs::write(dir.join("throughput.svg"), self.throughput_chart())?;
        std::fs::write(dir.join("lag.svg"), self.lag_chart())?;
        if let Some(d) = &self.delivery {
            std::fs::write(dir.join("latency.svg"), self.latency_chart(d))?;
            std::fs::write(dir.join("tenants.svg"), self.tenant_chart(d))?;
        }
        std::fs::write(dir.join("report.md"), self.markdown())?;
        Ok(())
    }

    /// Rates between consecutive samples, smoothed over one second.
    fn rates(&self, pick: impl Fn(&Sample) -> u64) -> Vec<(f64, f64)> {
        let window = (1000 / crate::run::SAMPLE_MS).max(1) as usize;
        self.timeline
            .windows(window + 1)
            .map(|w| {
                let (a, b) = (w[0], w[window]);
                let dt = (b.t_s - a.t_s).max(1e-9);
                (b.t_s, (pick(&b).saturating_sub(pick(&a))) as f64 / dt)
            })
            .collect()
    }

    fn throughput_chart(&self) -> String {
        let mut series = vec![Series {
            name: "hub: records made durable per second",
            points: self.rates(|s| s.durable),
        }];
        if self.delivery.is_some() {
            series.push(Series {
                name: "hub: unique webhook deliveries per second",
                points: self.rates(|s| s.delivered),
            });
        }
        if self.scenario.mode == Mode::Steady {
            series.push(Series {
                name: "load: records produced per second",
                points: self.rates(|s| s.produced),
            });
        }
        let raw = self.baseline.raw_consume_rate;
        let last = self.timeline.last().map_or(1.0, |s| s.t_s);
        series.push(Series {
            name: "raw rdkafka consume rate (same topic, same run)",
            points: vec![(0.0, raw), (last, raw)],
        });
        line_chart(
            &format!(
                "{} on {:?}: throughput over time",
                self.scenario.name, self.store
            ),
            "seconds since the hub started",
            "records per second",
            &series,
        )
    }

    fn latency_chart(&self, d: &DeliveryFigures) -> String {
        line_chart(
            &format!(
                "{} on {:?}: end-to-end latency distribution (producer send → webhook)",
                self.scenario.name, self.store
            ),
            "percentile",
            "milliseconds",
            &[Series {
                name: "latency at percentile",
                points: d.latency_curve.clone(),
            }],
        )
    }

    fn tenant_chart(&self, d: &DeliveryFigures) -> String {
        let rank = |pick: fn(&(String, u64, f64, f64, f64)) -> f64| {
            d.per_tenant
                .iter()
                .enumerate()
                .map(|(i, t)| ((i + 1) as f64, pick(t)))
                .collect()
        };
        line_chart(
            &format!(
                "{} on {:?}: latency per tenant (ranked by deliveries)",
                self.scenario.name, self.store
            ),
            "tenant rank (1 = most deliveries)",
            "milliseconds",
            &[
                Series {
                    name: "p50",
                    points: rank(|t| t.2),
                },
                Series {
                    name: "p99",
                    points: rank(|t| t.3),
                },
            ],
        )
    }

    fn lag_chart(&self) -> String {
        let points = self
            .timeline
            .iter()
            .map(|s| (s.t_s, s.produced.saturating_sub(s.durable) as f64))
            .collect();
        line_chart(
            &format!(
                "{} on {:?}: lag (produced, not yet durable)",
                self.scenario.name, self.store
            ),
            "seconds since the hub started",
            "records",
            &[Series {
                name: "lag",
                points,
            }],
        )
    }

    pub fn markdown(&self) -> String {
        let mut md = String::new();
        let s = &self.scenario;
        let _ = writeln!(
            md,
            "# Load test: `{}` on the {:?} store\n",
            s.name, self.store
        );
        let _ = writeln!(md, "{}\n", s.description);
        let _ = writeln!(md, "- Command: `{}`", self.command);
        if let Some(sink) = self.sink {
            let _ = writeln!(
                md,
                "- Sink: `{}` (one subscription per tenant and destination of the scenario)",
                sink.label()
            );
        }
        let _ = writeln!(md, "- Commit: `{}`", self.commit);
        let _ = writeln!(
            md,
            "- Machine: {} × {}, {} GiB, Linux {}",
            self.machine.cpus, self.machine.cpu_model, self.machine.memory_gib, self.machine.kernel
        );
        let _ = writeln!(
            md,
            "- The load's threads (receivers, producers, clients): {}",
            if self.load_stood_aside {
                "`SCHED_BATCH`, so a woken one waits for the hub to park or for the scheduler's tick instead of preempting it (they stand in for other machines)"
            } else {
                "the normal policy: a woken one may preempt the hub on its core"
            }
        );
        let _ = writeln!(
            md,
            "- Started: {} · topic `{}` ({} partitions)\n",
            self.started_at, self.topic, s.partitions
        );
        let _ = writeln!(md, "## Headline\n");
        let _ = writeln!(md, "| figure | value |\n|---|---|");
        let path = match self.target {
            crate::run::Target::Kafka => "Kafka",
            crate::run::Target::Http => "HTTP ingest",
        };
        let _ = writeln!(
            md,
            "| hub: {path} → durable inbox | **{:.0} records/s** over {:.1} s |",
            self.hub.durable_rate, self.hub.durable_seconds
        );
        match self.baseline.raw_post_rate {
            Some(rate) => {
                let _ = writeln!(
                    md,
                    "| raw loopback HTTP POST rate (physical limit for HTTP ingest) | {rate:.0} POSTs/s |"
                );
            }
            None => {
                let _ = writeln!(
                    md,
                    "| raw rdkafka consume of the same topic (physical limit) | {:.0} records/s over {:.1} s |",
                    self.baseline.raw_consume_rate, self.baseline.raw_consume_seconds
                );
            }
        }
        match s.mode {
            Mode::Backlog => {
                let _ = writeln!(md, "| hub ÷ raw | {:.2} |", self.ratio_to_raw());
            }
            Mode::Steady => {
                let _ = writeln!(
                    md,
                    "| hub ÷ offered load | {:.2} (a steady run offers less than the hub's ceiling; see the backlog scenario for that) |",
                    self.hub.durable_rate / self.produce_rate.max(1e-9)
                );
            }
        }
        let _ = writeln!(
            md,
            "| load produced | {} records in {:.1} s ({:.0}/s) |",
            self.produced.total, self.produce_seconds, self.produce_rate
        );
        if self.produced.throttled > 0 {
            let _ = writeln!(
                md,
                "| ingest held back (HTTP 429, sent again after `Retry-After`) | {} answers |",
                self.produced.throttled
            );
        }
        let _ = writeln!(md, "| max lag | {} records |", self.hub.max_lag_records);
        if let Some(d) = self.hub.drain_after_production_seconds {
            let _ = writeln!(md, "| lag back to zero after production ended | {d:.2} s |");
        }
        let _ = writeln!(
            md,
            "| hub start → first commit | {:.1} s |",
            self.hub.startup_seconds
        );
        let _ = writeln!(
            md,
            "| hub RSS at end / peak | {:.1} MiB / {:.1} MiB |",
            self.hub.rss_kib_end as f64 / 1024.0,
            self.hub.rss_kib_peak as f64 / 1024.0
        );
        if let Some(cpu) = self.hub.cpu_seconds {
            let (per, what) = match &self.delivery {
                // Nothing delivered (pending-million): per ingested record instead.
                Some(d) if d.unique_delivered > 0 => {
                    (d.unique_delivered, "delivered event (ingest included)")
                }
                _ => (self.produced.total, "record"),
            };
            let _ = writeln!(
                md,
                "| hub CPU (user + system, whole run) | {cpu:.1} s · **{:.0} µs per {what}** |",
                cpu * 1e6 / per.max(1) as f64
            );
        }
        if let Some(paced) = &self.hub.paced_cpu {
            let _ = writeln!(
                md,
                "| hub CPU over the paced phase (start and set-up excluded) | {:.1} s · **{:.0} µs per valid event produced** |",
                paced.seconds,
                paced.seconds * 1e6 / paced.events.max(1) as f64
            );
        }
        if let Some(f) = &self.baseline.floor {
            floor_row(
                &mut md,
                f,
                self.hub_cpu_per_event_us(),
                self.hub.durable_rate,
            );
        }
        if self.hub.engines.len() > 1 {
            engines_rows(&mut md, &self.hub.engines);
        }
        if let Some(d) = &self.delivery {
            let _ = writeln!(
                md,
                "| hub: {} → {} | **{:.0} deliveries/s** over {:.1} s ({} of {} expected, {} subscriptions) |",
                match self.target {
                    crate::run::Target::Kafka => "Kafka",
                    crate::run::Target::Http => "HTTP ingest",
                },
                self.sink.map_or("webhook", crate::sinks::SinkChoice::label),
                d.rate, d.seconds, d.unique_delivered, d.expected, d.subscriptions
            );
            let _ = writeln!(
                md,
                "| physical limit: {} | {:.0}/s |",
                if d.limit.is_empty() {
                    "raw loopback POST rate to the same receiver"
                } else {
                    &d.limit
                },
                d.raw_post_rate
            );
            let _ = writeln!(
                md,
                "| deliveries ÷ physical limit | {:.2} |",
                d.rate / d.raw_post_rate.max(1e-9)
            );
            if let Some(r) = d.reread_rate {
                let _ = writeln!(
                    md,
                    "| one reader re-reading the filled log (`after`, `limit=1000`) | {r:.0} events/s ({:.2} of the raw scan) |",
                    r / d.raw_post_rate.max(1e-9)
                );
            }
            if let Some([p50, p90, p99, p999, max]) = d.latency_ms {
                let linger = match self.target {
                    crate::run::Target::Kafka => format!(
                        "; the producer waits up to {} ms to fill a batch",
                        self.producer_linger_ms
                    ),
                    crate::run::Target::Http => String::new(),
                };
                let _ = writeln!(
                    md,
                    "| end-to-end latency (producer send → arrival at the destination{linger}) | p50 {p50:.1} ms · p90 {p90:.1} ms · p99 {p99:.1} ms · p99.9 {p999:.1} ms · max {max:.1} ms |"
                );
            }
            if let Some(slow) = slow_seconds(&d.worst_by_sent_second, None, SLOW_HEADING) {
                let _ = writeln!(md, "{slow}");
            }
            if let Some(b) = &d.broker_latency {
                broker_rows(&mut md, b, d.worst_by_sent_second.first().map(|w| w.0));
            }
            let _ = writeln!(
                md,
                "| requests or messages seen (retries included) / bad signatures | {} / {} |",
                d.requests, d.bad_signatures
            );
            let _ = writeln!(md, "| jobs pending at the end | {} |", d.pending_jobs_end);
        }
        let _ = writeln!(md, "\n![throughput](throughput.svg)\n\n![lag](lag.svg)\n");
        if let Some(d) = &self.delivery {
            let _ = writeln!(
                md,
                "![latency](latency.svg)\n\n![latency per tenant](tenants.svg)\n\n\
                 ### Latency per tenant (the ten with most deliveries)\n\n\
                 | tenant | deliveries | p50 ms | p99 ms | max ms |\n|---|---|---|---|---|"
            );
            for (t, n, p50, p99, max) in d.per_tenant.iter().take(10) {
                let _ = writeln!(md, "| {t} | {n} | {p50:.1} | {p99:.1} | {max:.1} |");
            }
            let _ = writeln!(md);
        }
        let _ = writeln!(
            md,
            "## Exactness\n\n| check | expected | hub | |\n|---|---|---|---|"
        );
        for c in &self.checks {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} |",
                c.what,
                c.expected,
                c.actual,
                if c.ok { "ok" } else { "**MISMATCH**" }
            );
        }
        let _ = writeln!(md, "\n## Where the store's write time goes\n");
        let _ = writeln!(
            md,
            "| phase | batches | total s | mean ms per batch |\n|---|---|---|---|"
        );
        for p in &self.hub.store_phases {
            let _ = writeln!(
                md,
                "| {} | {} | {:.2} | {:.2} |",
                p.phase, p.batches, p.seconds, p.mean_ms
            );
        }
        let _ = writeln!(
            md,
            "\nPhases of one partition batch run one after another; batches of different partitions \
             (and shards) overlap, so totals can exceed the wall time.\n"
        );
        md.push_str(&crate::cql_requests::section(
            &self.hub.cql_requests,
            &self.hub.counters,
        ));
        if let Some(p) = &self.hub.profile {
            // Per event: at the offered rate of a steady run, at the delivery rate of a backlog.
            let events_per_s = match (&self.scenario.mode, &self.delivery) {
                (crate::scenario::Mode::Steady, _) => Some(self.scenario.rate as f64),
                (_, Some(d)) => Some(d.rate),
                _ => Some(self.hub.durable_rate),
            };
            md.push_str(&crate::profile::section(p, events_per_s));
        }
        let _ = writeln!(
            md,
            "## Produced\n\n| valid | duplicates | malformed | system | total |\n|---|---|---|---|---|\n| {} | {} | {} | {} | {} |",
            self.produced.valid, self.produced.duplicates, self.produced.malformed, self.produced.system, self.produced.total
        );
        md
    }
}

/// With several engines: each one's share of the work and its CPU per delivered event.
fn engines_rows(md: &mut String, engines: &[crate::hub::EngineFigures]) {
    use std::fmt::Write as _;
    let delivered: u64 = engines.iter().map(|e| e.delivered).sum();
    for (i, e) in engines.iter().enumerate() {
        let share = e.delivered as f64 * 100.0 / delivered.max(1) as f64;
        let cpu = e.cpu_seconds.map_or_else(
            || "—".to_owned(),
            |c| {
                format!(
                    "{c:.1} s · {:.0} µs per delivered event",
                    c * 1e6 / e.delivered.max(1) as f64
                )
            },
        );
        let _ = writeln!(
            md,
            "| engine {} | judged {} records · delivered {} ({share:.0} %) · CPU {cpu} · RSS peak {:.0} MiB |",
            i + 1,
            e.ingested,
            e.delivered,
            e.rss_kib_peak as f64 / 1024.0
        );
    }
}

/// The heading of the hub's slow seconds (see [`slow_seconds`]).
const SLOW_HEADING: &str =
    "seconds of sending whose events waited over 100 ms (from the first send; worst first)";

/// The latency over 100 ms this run had: a row naming the seconds of sending (counted from
/// `origin`, else from the first) whose events waited longest, worst first. A tail spread over
/// the run is load; one that comes in a few seconds, or every few seconds, is a stall.
fn slow_seconds(worst: &[(i64, f64)], origin: Option<i64>, heading: &str) -> Option<String> {
    const SLOW_MS: f64 = 100.0;
    let first = origin.or_else(|| worst.first().map(|w| w.0))?;
    let mut slow: Vec<(i64, f64)> = worst
        .iter()
        .filter(|(_, ms)| *ms > SLOW_MS)
        .map(|(s, ms)| (s - first, *ms))
        .collect();
    if slow.is_empty() {
        return None;
    }
    let count = slow.len();
    slow.sort_by(|a, b| b.1.total_cmp(&a.1));
    let named: Vec<String> = slow
        .iter()
        .take(8)
        .map(|(s, ms)| format!("{s} s: {ms:.0} ms"))
        .collect();
    Some(format!(
        "| {heading} | {count} of {}: {} |",
        worst.len(),
        named.join(" · ")
    ))
}

/// Kafka alone over the paced phase: its latency, and its own slow seconds counted from the
/// hub's first (`origin`), so that a second slow in both is read as the broker's or the
/// machine's, not the hub's.
fn broker_rows(md: &mut String, b: &crate::broker_latency::BrokerLatency, origin: Option<i64>) {
    let [p50, p90, p99, p999, max] = b.latency_ms;
    let _ = writeln!(
        md,
        "| Kafka alone, same run (a plain consumer of the topic over the paced phase: producer send → consumed; the floor of the latency above, {} records) | p50 {p50:.1} ms · p90 {p90:.1} ms · p99 {p99:.1} ms · p99.9 {p999:.1} ms · max {max:.1} ms |",
        b.records
    );
    let heading =
        "seconds of sending whose records waited over 100 ms in Kafka alone (counted as above)";
    if let Some(slow) = slow_seconds(&b.worst_by_sent_second, origin, heading) {
        let _ = writeln!(md, "{slow}");
    }
}

/// The floor probe's row: its rate and CPU per record, split by where it went, and the hub's CPU
/// per event (`hub_us`: over the paced phase, or over the whole backlog run) over it; for
/// ingest's floor, the hub's durable rate against the floor's.
fn floor_row(
    md: &mut String,
    f: &crate::floor::FloorFigures,
    hub_us: Option<f64>,
    hub_durable_rate: f64,
) {
    let per = |s: f64| f.per_record_us(s);
    let floor_rate = f.records as f64 / f.seconds.max(1e-9);
    let when = match f.rate {
        0 if f.pipelined() => "of the backlog, syncs overlapping the consuming".to_owned(),
        0 => "of the backlog, a sync per group of up to 1,000".to_owned(),
        r => format!("at {r}/s, a sync per record"),
    };
    let work = match (f.posted, f.pipelined()) {
        (true, _) => "consume, append + `fdatasync`, keep-alive POST per record",
        (false, true) => {
            "consume and append on one thread, `fdatasync` of what is appended on another"
        }
        (false, false) => "consume, append + `fdatasync`",
    };
    // A delivery floor is read by its POSTs and CPU; ingest's by its rate too.
    let mut tail = match f.posted {
        true => format!(" · POST and answer {:.0}", per(f.post_seconds)),
        false => format!(
            " · the hub's durable rate is **{:.2}** of this",
            hub_durable_rate / floor_rate.max(1e-9)
        ),
    };
    if let Some(hub) = hub_us {
        tail += &format!(
            " · the hub's CPU per event is **{:.1}×** this",
            hub / per(f.cpu_seconds).max(1e-9)
        );
    }
    let _ = writeln!(
        md,
        "| the floor {when} (one process, same run: {work}) | {} records in {:.1} s ({floor_rate:.0}/s) · **{:.0} µs per record**: librdkafka's threads {:.0} · taking the record {:.0} · append + sync {:.0}{tail} |",
        f.records,
        f.seconds,
        per(f.cpu_seconds),
        per(f.kafka_threads_seconds),
        per(f.taking_seconds),
        per(f.sync_seconds),
    );
}

#[cfg(test)]
mod tests {
    use super::{slow_seconds, SLOW_HEADING};

    #[test]
    fn slow_seconds_are_counted_from_the_first_send_worst_first() {
        let worst = [(100, 20.0), (101, 250.0), (102, 30.0), (108, 600.0)];
        let row = slow_seconds(&worst, None, SLOW_HEADING).expect("two slow seconds");
        assert!(row.contains("2 of 4: 8 s: 600 ms · 1 s: 250 ms"), "{row}");
        assert_eq!(slow_seconds(&[(5, 99.0)], None, SLOW_HEADING), None);
        assert_eq!(slow_seconds(&[], None, SLOW_HEADING), None);
    }

    #[test]
    fn kafka_alone_counts_its_slow_seconds_from_the_hubs_first_send() {
        let worst = [(103, 180.0), (104, 20.0)];
        let row = slow_seconds(&worst, Some(100), "in Kafka").expect("one slow second");
        assert!(row.contains("1 of 2: 3 s: 180 ms"), "{row}");
    }
}
