//! Scenarios: what to produce, how fast, over which tenants. Checked-in scenarios live in
//! `loadtest/scenarios/*.toml` and are compiled in, so `--scenario steady` works from any
//! directory; `--scenario path/to/file.toml` reads another.

use serde::{Deserialize, Serialize};

/// How records reach the hub's durable inbox in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Produce every record first, then start the hub and time how fast it drains the topic.
    /// Measures the ingest ceiling; the raw consume rate of the same topic is the baseline.
    Backlog,
    /// Start the hub, then produce at `rate` for `duration_s` (with optional bursts) and follow
    /// the lag. Measures behaviour at a chosen load.
    Steady,
}

/// How records are spread over tenants.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum Skew {
    Uniform,
    /// Tenant `i` (from 1) is chosen with weight `1 / i^exponent`.
    Zipf {
        exponent: f64,
    },
    /// One tenant gets `share` of all records; the rest are uniform.
    Hot {
        share: f64,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    pub mode: Mode,
    /// Backlog: records to produce. Steady: an upper bound (the run stops at whichever of
    /// `records` and `duration_s` comes first).
    pub records: u64,
    /// Steady: records per second.
    #[serde(default)]
    pub rate: u64,
    /// Steady: seconds of production.
    #[serde(default)]
    pub duration_s: u64,
    /// Steady: every `burst_every_s` seconds, produce at `burst_rate` for `burst_len_s`.
    #[serde(default)]
    pub burst_rate: u64,
    #[serde(default)]
    pub burst_every_s: u64,
    #[serde(default)]
    pub burst_len_s: u64,
    pub partitions: i32,
    pub tenants: usize,
    pub skew: Skew,
    /// Shares of records (0..1) re-sent as duplicates, malformed, and system events.
    #[serde(default)]
    pub duplicate_share: f64,
    #[serde(default)]
    pub malformed_share: f64,
    #[serde(default)]
    pub system_share: f64,
    /// Size of each valid event's JSON payload.
    pub payload_bytes: usize,
    /// Deliver too: one webhook subscription per tenant and destination, to this tool's
    /// receivers. Absent: an ingest-only run.
    #[serde(default)]
    pub delivery: Option<DeliverySpec>,
}

/// The destinations of a delivery run.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeliverySpec {
    pub destinations: Vec<Destination>,
}

/// One receiver path and how it behaves.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Destination {
    pub name: String,
    #[serde(default)]
    pub latency_ms: u64,
    /// Share of requests answered with `status` (1.0: a destination that always fails).
    #[serde(default)]
    pub failure_rate: f64,
    #[serde(default = "default_status")]
    pub status: u16,
    /// Only the first N tenants subscribe to it (one slow destination among fast ones); absent:
    /// every tenant. Exactness is checked on destinations every tenant has and that answer 2xx.
    #[serde(default)]
    pub tenants: Option<usize>,
    /// Every tenant's subscription posts to one path: one destination for the hub, whose
    /// R-DI-3 caps (half the workers, an eighth of a lane's memory) hold all of them together.
    /// Absent: a path per tenant.
    #[serde(default)]
    pub shared: bool,
}

fn default_status() -> u16 {
    503
}

const BUILT_IN: &[(&str, &str)] = &[
    (
        "ingest-backlog",
        include_str!("../scenarios/ingest-backlog.toml"),
    ),
    ("steady", include_str!("../scenarios/steady.toml")),
    ("burst", include_str!("../scenarios/burst.toml")),
    (
        "deliver-backlog",
        include_str!("../scenarios/deliver-backlog.toml"),
    ),
    (
        "deliver-steady",
        include_str!("../scenarios/deliver-steady.toml"),
    ),
    (
        "many-tenants",
        include_str!("../scenarios/many-tenants.toml"),
    ),
    (
        "slow-destination",
        include_str!("../scenarios/slow-destination.toml"),
    ),
    (
        "failing-destination",
        include_str!("../scenarios/failing-destination.toml"),
    ),
    (
        "pending-million",
        include_str!("../scenarios/pending-million.toml"),
    ),
    ("hot-tenant", include_str!("../scenarios/hot-tenant.toml")),
    ("scale-out", include_str!("../scenarios/scale-out.toml")),
    (
        "pull-one-reader",
        include_str!("../scenarios/pull-one-reader.toml"),
    ),
    (
        "shared-destination",
        include_str!("../scenarios/shared-destination.toml"),
    ),
];

impl Scenario {
    /// A built-in scenario by name, or a TOML file by path.
    pub fn load(name_or_path: &str) -> anyhow::Result<Self> {
        let text = match BUILT_IN.iter().find(|(n, _)| *n == name_or_path) {
            Some((_, text)) => (*text).to_owned(),
            None => std::fs::read_to_string(name_or_path).map_err(|e| {
                let names: Vec<_> = BUILT_IN.iter().map(|(n, _)| *n).collect();
                anyhow::anyhow!(
                    "no scenario {name_or_path:?}: not built in ({}) and not a readable file ({e})",
                    names.join(", ")
                )
            })?,
        };
        let scenario: Scenario =
            toml::from_str(&text).map_err(|e| anyhow::anyhow!("scenario {name_or_path}: {e}"))?;
        scenario.validate()?;
        Ok(scenario)
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        let shares = self.duplicate_share + self.malformed_share + self.system_share;
        anyhow::ensure!(
            (0.0..1.0).contains(&shares),
            "duplicate + malformed + system shares must be below 1"
        );
        anyhow::ensure!(
            self.tenants > 0 && self.partitions > 0,
            "tenants and partitions ≥ 1"
        );
        anyhow::ensure!(self.records > 0, "records ≥ 1");
        if self.mode == Mode::Steady {
            anyhow::ensure!(
                self.rate > 0 && self.duration_s > 0,
                "steady needs rate and duration_s"
            );
        }
        if let Skew::Hot { share } = self.skew {
            anyhow::ensure!((0.0..=1.0).contains(&share), "hot share in 0..=1");
        }
        Ok(())
    }

    /// The target rate at `t_s` seconds into a steady run (bursts included).
    pub fn rate_at(&self, t_s: f64) -> u64 {
        if self.burst_every_s > 0 && self.burst_rate > 0 {
            let phase = t_s % self.burst_every_s as f64;
            if phase < self.burst_len_s as f64 {
                return self.burst_rate;
            }
        }
        self.rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_scenario_parses_and_validates() {
        for (name, _) in BUILT_IN {
            let s = Scenario::load(name).expect(name);
            assert_eq!(&s.name, name);
        }
    }

    #[test]
    fn bursts_raise_the_rate_for_their_length() {
        let s = Scenario::load("burst").expect("burst");
        assert_eq!(s.rate_at(0.5), s.burst_rate);
        assert_eq!(s.rate_at(s.burst_len_s as f64 + 0.5), s.rate);
    }

    #[test]
    fn an_unknown_scenario_names_the_built_in_ones() {
        let err = Scenario::load("nope").expect_err("unknown");
        assert!(err.to_string().contains("steady"), "{err}");
    }
}
