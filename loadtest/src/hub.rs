//! The hub under test: started as a child process on the chosen store, on loopback, and read
//! through `/metrics` and `/proc`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Which store the hub runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreChoice {
    Embedded,
    Cql,
}

/// The keyspace of a hub under test on CQL.
pub const CQL_KEYSPACE: &str = "streaming_hub_loadtest";

/// Drops the load test's keyspace, so a run on CQL starts from nothing: what an earlier run
/// left there (pending-million's million jobs, a crashed run's leases) was adopted by the next
/// run's engine as stray lanes, and at 1,100 events/s one such run measured p99 13.6 s against
/// 54 ms in a fresh keyspace. The hub creates the schema again as it starts.
pub async fn fresh_keyspace(node: &str) -> anyhow::Result<()> {
    let session = scylla::client::session_builder::SessionBuilder::new()
        .known_node(node)
        .build()
        .await?;
    session
        .query_unpaged(format!("DROP KEYSPACE IF EXISTS {CQL_KEYSPACE}"), ())
        .await?;
    Ok(())
}

#[derive(Clone, Copy)]
pub struct HubSpec<'a> {
    pub bin: &'a Path,
    pub store: StoreChoice,
    pub kafka: &'a str,
    pub cql: &'a str,
    pub group: &'a str,
    pub data_dir: &'a Path,
    pub port: u16,
    pub env: &'a [(String, String)],
}

pub struct Hub {
    child: Child,
    pub url: String,
}

/// The hub binary next to this one (both come from the same `cargo build --release`).
pub fn default_bin() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join("streaming-hub")))
        .unwrap_or_else(|| PathBuf::from("streaming-hub"))
}

impl Hub {
    pub fn start(spec: &HubSpec<'_>) -> anyhow::Result<Self> {
        let mut cmd = Command::new(spec.bin);
        crate::sched::as_a_peer(&mut cmd);
        cmd.env("STREAMING_HUB_DATA_DIR", spec.data_dir)
            .env(
                "STREAMING_HUB_HTTP_ADDR",
                format!("127.0.0.1:{}", spec.port),
            )
            .env("STREAMING_HUB_KAFKA_BROKERS", spec.kafka)
            .env("STREAMING_HUB_KAFKA_GROUP", spec.group)
            .env("STREAMING_HUB_KAFKA_METADATA_REFRESH_MS", "1000")
            .env("STREAMING_HUB_LOG", "warn")
            // The receivers are this tool's, on loopback.
            .env("STREAMING_HUB_ALLOW_PRIVATE_HOSTS", "127.0.0.1")
            // The hub's own events (one `destination.verified` per subscription) would come back
            // through its consumer and into the verdict counters the run checks exactly.
            .env("STREAMING_HUB_PUBLISH_HUB_EVENTS", "false")
            // `--target http` posts to HTTP ingest, off by default beside Kafka (R-SEC-4).
            .env("STREAMING_HUB_HTTP_INGEST", "true")
            .stdout(Stdio::null());
        // `LOADTEST_HUB_LOG_DIR`: each hub's log (at `info`) in `hub-<port>.log` there, for a
        // run that went wrong.
        if let Some(dir) = std::env::var_os("LOADTEST_HUB_LOG_DIR") {
            std::fs::create_dir_all(&dir)?;
            let log =
                std::fs::File::create(Path::new(&dir).join(format!("hub-{}.log", spec.port)))?;
            cmd.env("STREAMING_HUB_LOG", "info").stdout(log);
        }
        cmd.envs(spec.env.iter().map(|(k, v)| (k, v)));
        if spec.store == StoreChoice::Cql {
            cmd.env("STREAMING_HUB_STORE", "cql")
                .env("STREAMING_HUB_CQL_NODES", spec.cql)
                .env("STREAMING_HUB_CQL_KEYSPACE", CQL_KEYSPACE);
        }
        let child = cmd.spawn().map_err(|e| {
            anyhow::anyhow!(
                "cannot start the hub at {}: {e} (build it: cargo build --release -p streaming-hub)",
                spec.bin.display()
            )
        })?;
        Ok(Self {
            child,
            url: format!("http://127.0.0.1:{}", spec.port),
        })
    }

    pub async fn wait_ready(&mut self, limit: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait()? {
                anyhow::bail!("the hub exited during start: {status}");
            }
            if reqwest::get(format!("{}/ready", self.url))
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        anyhow::bail!("the hub was not ready within {limit:?}")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Every integer sample of `/metrics`, by series name with labels.
    pub async fn metrics(&self) -> anyhow::Result<BTreeMap<String, u64>> {
        let text = reqwest::get(format!("{}/metrics", self.url))
            .await?
            .text()
            .await?;
        Ok(text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (k, v) = l.rsplit_once(' ')?;
                Some((k.to_owned(), v.parse().ok()?))
            })
            .collect())
    }

    /// SIGKILL and wait: a crash, nothing drained.
    pub fn kill_9(mut self) -> anyhow::Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }

    /// SIGTERM and wait (the hub drains and commits on the way out).
    pub fn stop(mut self) -> anyhow::Result<()> {
        Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()?;
        self.child.wait()?;
        Ok(())
    }
}

/// A run that fails part-way must not leave its hub running: it would hold the run's group and,
/// on CQL, the shared keyspace's lanes, and a later run would meet it there.
impl Drop for Hub {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Resident and peak resident memory of a process, in KiB, from `/proc/<pid>/status`.
pub fn rss_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// CPU time the process has used so far (user + system), in seconds, from `/proc/<pid>/stat`.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start at its closing parenthesis;
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after it.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / clock_ticks_per_second())
}

/// `getconf CLK_TCK` (100 on Linux unless configured otherwise).
fn clock_ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// A free loopback port for a hub to listen on, below the kernel's ephemeral range
/// (`hub_core::loopback`: a port from `bind(:0)` may be given to another engine's outgoing
/// connection before the hub binds it).
pub fn free_port() -> anyhow::Result<u16> {
    hub_core::loopback::free_port()
        .ok_or_else(|| anyhow::anyhow!("no free loopback port below the ephemeral range"))
}

/// The engines under test: one, or with `--engines N` several of one consumer group on one CQL
/// keyspace and one data directory (their keys and token secret), as a scaled-out deployment
/// runs them (issue 18).
pub struct Hubs {
    pub engines: Vec<Hub>,
}

/// What one engine of a run did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EngineFigures {
    pub cpu_seconds: Option<f64>,
    pub rss_kib_peak: u64,
    /// Its `streaming_hub_delivery_outcomes_total{outcome="delivered"}`.
    pub delivered: u64,
    /// Its `streaming_hub_ingest_verdicts_total` of every verdict: what it judged.
    pub ingested: u64,
}

impl Hubs {
    /// Starts `n` engines: the first on `spec.port`, the others on free ports.
    pub fn start(spec: &HubSpec<'_>, n: usize) -> anyhow::Result<Self> {
        anyhow::ensure!(
            n == 1 || spec.store == StoreChoice::Cql,
            "several engines share a CQL keyspace: --engines > 1 needs --store cql"
        );
        let mut engines = vec![Hub::start(spec)?];
        for _ in 1..n {
            engines.push(Hub::start(&HubSpec {
                port: free_port()?,
                ..*spec
            })?);
        }
        Ok(Self { engines })
    }

    pub async fn wait_ready(&mut self, limit: Duration) -> anyhow::Result<()> {
        for engine in &mut self.engines {
            engine.wait_ready(limit).await?;
        }
        Ok(())
    }

    /// The first engine: where subscriptions are made and HTTP ingest is posted.
    pub fn first(&self) -> &Hub {
        &self.engines[0]
    }

    pub fn pids(&self) -> Vec<u32> {
        self.engines.iter().map(Hub::pid).collect()
    }

    /// Every engine's `/metrics`, and their sum (counters add up; gauges of the shared store,
    /// such as pending jobs, are read from the first engine alone).
    pub async fn metrics(
        &self,
    ) -> anyhow::Result<(BTreeMap<String, u64>, Vec<BTreeMap<String, u64>>)> {
        let mut each = Vec::new();
        for engine in &self.engines {
            each.push(engine.metrics().await?);
        }
        let mut sum = each.first().cloned().unwrap_or_default();
        for other in each.iter().skip(1) {
            for (k, v) in other {
                if !k.starts_with("streaming_hub_delivery_pending_jobs") {
                    *sum.entry(k.clone()).or_default() += v;
                }
            }
        }
        Ok((sum, each))
    }

    /// Each engine's figures, from its `/metrics` (`each`, in order) and `/proc`.
    pub fn figures(&self, each: &[BTreeMap<String, u64>]) -> Vec<EngineFigures> {
        self.engines
            .iter()
            .zip(each)
            .map(|(engine, metrics)| EngineFigures {
                cpu_seconds: cpu_seconds(engine.pid()),
                rss_kib_peak: rss_kib(engine.pid()).map_or(0, |(_, peak)| peak),
                delivered: metrics
                    .get("streaming_hub_delivery_outcomes_total{outcome=\"delivered\"}")
                    .copied()
                    .unwrap_or(0),
                ingested: metrics
                    .iter()
                    .filter(|(k, _)| k.starts_with("streaming_hub_ingest_verdicts_total"))
                    .map(|(_, v)| v)
                    .sum(),
            })
            .collect()
    }

    pub fn stop(self) -> anyhow::Result<()> {
        for engine in self.engines {
            engine.stop()?;
        }
        Ok(())
    }
}
