//! Configuration: one struct, validated at start, strict (unknown keys rejected), read from an
//! optional TOML file and then from `STREAMING_HUB_*` environment variables (which win).
//! Defaults are commented here, in one place.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// Which `Store` the hub runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    /// The embedded store under `data_dir`: one node, nothing else to run.
    Embedded,
    /// ScyllaDB (or any CQL server with lightweight transactions) at `cql_nodes`.
    Cql,
}

impl std::str::FromStr for StoreKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "embedded" => Ok(Self::Embedded),
            "cql" => Ok(Self::Cql),
            other => Err(format!(
                "unknown store {other:?} (expected embedded or cql)"
            )),
        }
    }
}

/// Everything the standalone hub reads at start.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HubConfig {
    /// Env `STREAMING_HUB_STORE`: `embedded` (default) or `cql`.
    pub store: StoreKind,
    /// CQL contact points, comma-separated. Env `STREAMING_HUB_CQL_NODES`. Default `127.0.0.1:9042`.
    pub cql_nodes: String,
    /// Credentials and TLS for the CQL cluster (issue 16), from the environment only (they hold
    /// a password): `STREAMING_HUB_CQL_USERNAME`, `STREAMING_HUB_CQL_PASSWORD`,
    /// `STREAMING_HUB_CQL_TLS_CA_FILE`.
    #[serde(skip)]
    pub cql_access: hub_core::cql::CqlAccess,
    /// CQL keyspace, created with `cql_replication` if missing. Env `STREAMING_HUB_CQL_KEYSPACE`.
    /// Default `streaming_hub`.
    pub cql_keyspace: String,
    /// Replication map for a new keyspace. Env `STREAMING_HUB_CQL_REPLICATION`.
    /// Default `{'class': 'NetworkTopologyStrategy', 'replication_factor': 1}`.
    pub cql_replication: String,
    /// On CQL, how long a Kafka partition's committed position may trail what is durable while
    /// its records keep coming, in ms: a batch moves the unit's offset (one Paxos round) and
    /// commits it to Kafka only when this long has passed since the unit's last move, and a
    /// shard moves what is left this long after at the latest. What trails is written, not
    /// lost: a crash replays it from the last commit, and dedup makes the replay a no-op. 0
    /// moves it with every batch (issue 17: a Paxos round per batch of ~2 events at a steady
    /// rate). The embedded store moves it with every batch at no cost. Env
    /// `STREAMING_HUB_CQL_UNIT_ADVANCE_MS`. Default 200.
    pub cql_unit_advance_ms: u32,
    /// On CQL, the least time between the starts of a shard's ingest passes, in ms: a batch
    /// costs a Paxos round per tenant for its dedup claims and one for its append, whatever its
    /// size, so at a steady rate a pass that waits for company pays fewer rounds per event, for
    /// up to this much latency. Over a backlog passes take longer than this and never wait. 0
    /// takes each pass as soon as the last is written. Env `STREAMING_HUB_CQL_INGEST_LINGER_MS`.
    /// Default 0.
    pub cql_ingest_linger_ms: u32,
    /// How long accepted events (and dead letters) are kept, in seconds (R-OP-5). Env
    /// `STREAMING_HUB_RETENTION_S`. Default 7 days.
    pub retention_s: u32,
    /// How long quarantine records and DLQ observations are kept, in seconds (R-OP-5). Env
    /// `STREAMING_HUB_FORENSICS_RETENTION_S`. Default 30 days.
    pub forensics_retention_s: u32,
    /// How often the embedded store removes what has outlived its window, in ms (the CQL store's
    /// rows expire by TTL). Env `STREAMING_HUB_RETENTION_PASS_MS`. Default 60000.
    pub retention_pass_ms: u64,
    /// Dedup window in seconds, at least the retention (R-IN-6). Env `STREAMING_HUB_DEDUP_WINDOW_S`.
    /// Default 7 days.
    pub dedup_window_s: u32,
    /// Where the embedded store keeps its data. Env `STREAMING_HUB_DATA_DIR`. Default `./.hub-data`.
    pub data_dir: PathBuf,
    /// How the embedded store keeps it: `log` (append-only segments in `<data_dir>/log`) or
    /// `redb` (one file, `<data_dir>/hub.redb`). Env `STREAMING_HUB_EMBEDDED_FORMAT`. Default:
    /// redb when the directory holds only a redb file (an earlier release's), else log.
    pub embedded_format: Option<crate::store::choice::EmbeddedFormat>,
    /// HTTP listen address (ingest, admin, metrics). Env `STREAMING_HUB_HTTP_ADDR`.
    /// Default `127.0.0.1:8080`: loopback, since `/admin` has no auth yet.
    pub http_addr: SocketAddr,
    /// Kafka bootstrap servers; Kafka ingest is off when unset. Env `STREAMING_HUB_KAFKA_BROKERS`.
    pub kafka_brokers: Option<String>,
    /// How the Kafka clients reach the brokers: security protocol, SASL, CA (issue 16). File
    /// table `[kafka_security]`; env `STREAMING_HUB_KAFKA_SECURITY_PROTOCOL`,
    /// `…_KAFKA_SASL_MECHANISM`, `…_KAFKA_SASL_USERNAME`, `…_KAFKA_SASL_PASSWORD`,
    /// `…_KAFKA_SSL_CA_FILE`. Default plaintext.
    pub kafka_security: crate::ingest::kafka_security::KafkaSecurity,
    /// Whether `POST /ingest/<source>` is served (R-SEC-4; always behind an `ingest` token).
    /// Env `STREAMING_HUB_HTTP_INGEST` (`true`/`false`). Default: on without Kafka, off with it.
    pub http_ingest: Option<bool>,
    /// Consumer group id. Env `STREAMING_HUB_KAFKA_GROUP`. Default `streaming-hub`.
    pub kafka_group: String,
    /// Metadata refresh, which bounds how fast a new topic is picked up.
    /// Env `STREAMING_HUB_KAFKA_METADATA_REFRESH_MS`. Default 10000.
    pub kafka_metadata_refresh_ms: u32,
    /// How much librdkafka may prefetch ahead of the shards, in KiB, **per partition** while
    /// each shard takes its own partitions (librdkafka bounds each partition's queue; for the
    /// one consumer queue when `kafka_partitions_on_shards` is off): memory the hub holds for
    /// records not yet judged, so an engine holding N partitions may hold N times this. Lower
    /// saves memory and costs ingest speed over a backlog (issue 17, 8 partitions: 2 MiB 185 k,
    /// 8 MiB 269–367 k records/s; a million-record backlog peaked at 512 MiB RSS with 4 MiB,
    /// 707 with 8, 1,088 with 64). Env `STREAMING_HUB_KAFKA_PREFETCH_KIB`. Default 8192.
    pub kafka_prefetch_kib: u32,
    /// The same bound in records (`queued.min.messages`), per partition like the bytes: a
    /// partition is fetched while its queue holds fewer records than this and fewer bytes than
    /// `kafka_prefetch_kib`. librdkafka counts only a record's payload against the bytes,
    /// while each queued record also holds an op of its own and keeps the whole fetch reply it
    /// came in allocated; with small records its default (100,000) let a million-record backlog
    /// hold ~250 MiB in librdkafka (issue 17: RSS peak 702 MiB; 20,000: 584–624, no slower).
    /// Each prefetched record costs ~850 bytes of RSS with the load test's 512-byte payloads:
    /// over a million pending jobs on 8 partitions, 20,000 peaked at 403–418 MiB and 5,000 at
    /// 307–322, for ingest ~9 % slower (150 k against 165 k records/s; forty-third session).
    /// Env `STREAMING_HUB_KAFKA_PREFETCH_RECORDS`. Default 5000.
    pub kafka_prefetch_records: u32,
    /// How long the broker may hold a fetch to gather more records (`fetch.wait.max.ms`, with
    /// `fetch.min.bytes` at [`crate::ingest::kafka::FETCH_GATHER_BYTES`]): at a low rate records
    /// then reach the shards in groups that share a wake-up of the consumer and the shard, one
    /// ingest write and its `fdatasync`, and each record waits up to this long more; at a rate
    /// that fills the bytes sooner, or over a backlog, a fetch is not held (yet a backlog's
    /// ingest measured faster with 10 ms, and its deliveries slower: the reports README).
    /// At 500 events/s (issue 17, fiftieth session, three alternated rounds): 0 → 436 µs of hub
    /// CPU per event, p50 1–2 ms; 5 → 393 µs, p50 5 ms; 10 → 302 µs, p50 8 ms, p99 15–17 ms
    /// (context switches per event 8.2 → 5.9 → 4.0, `fdatasync` 1.0 → 0.7 → 0.5). 0 (the
    /// default): a fetch comes back with the first record. At most 1,000. Env
    /// `STREAMING_HUB_KAFKA_FETCH_WAIT_MS`.
    pub kafka_fetch_wait_ms: u32,
    /// Consumer-group session timeout: how long a crashed engine's partitions wait before another
    /// member takes them. Env `STREAMING_HUB_KAFKA_SESSION_TIMEOUT_MS`. Default 45000.
    pub kafka_session_timeout_ms: u32,
    /// Static membership: this engine's `group.instance.id` (unique per engine, the same across
    /// its restarts), so a restart gets its partitions back without waiting out the session
    /// timeout. A stopped engine's partitions then wait that timeout before moving. Env
    /// `STREAMING_HUB_KAFKA_INSTANCE_ID`. Unset: dynamic membership.
    pub kafka_instance_id: Option<String>,
    /// The sources whose `lerian.streaming.<source>` topics (and `.dlq` topics) this engine
    /// consumes: `*` for every one, or a comma-separated list, so separate deployments can
    /// serve separate sources. Env `STREAMING_HUB_KAFKA_SOURCES`. Default `*`.
    pub kafka_sources: crate::ingest::kafka_topics::SourceSelection,
    /// Engine shards; 0 = one per online CPU. Env `STREAMING_HUB_SHARDS`.
    pub shards: usize,
    /// Records per shard queue before the partition is paused. Env `STREAMING_HUB_SHARD_QUEUE`.
    pub shard_queue: usize,
    /// Most records persisted per shard pass. Env `STREAMING_HUB_MAX_BATCH`. Default 2000.
    pub max_batch: usize,
    /// Longest a busy shard runs its tasks before it reaps finished I/O and wake-ups from other
    /// threads (`runtime::SHARD_PREEMPT`). Env `STREAMING_HUB_SHARD_PREEMPT_US`. Default 5000.
    pub shard_preempt_us: u64,
    /// Largest record value accepted. Env `STREAMING_HUB_MAX_VALUE_BYTES`. Default 1 MiB.
    pub max_value_bytes: usize,
    /// Largest context attribute value accepted. Env `STREAMING_HUB_MAX_HEADER_BYTES`. Default 4096.
    pub max_header_bytes: usize,
    /// Concurrent delivery attempts per shard (R-DI-2). Env `STREAMING_HUB_DELIVERY_WORKERS`.
    /// Default 8.
    pub delivery_workers: u32,
    /// Webhook attempts run on the shards' own HTTP client (issue 17: no hop to tokio);
    /// `false` sends them through the tokio client like every other kind. Env
    /// `STREAMING_HUB_WEBHOOKS_ON_SHARDS`. Default true.
    pub webhooks_on_shards: bool,
    /// Each shard takes its own Kafka partitions' records from the client (issue 17: no thread
    /// hands every record over); `false` has the consumer thread route every record to its
    /// shard. Env `STREAMING_HUB_KAFKA_PARTITIONS_ON_SHARDS`. Default true.
    pub kafka_partitions_on_shards: bool,
    /// Started attempts without an outcome before a job is dead-lettered as poison (R-DI-8).
    /// Env `STREAMING_HUB_RECOVERY_LIMIT`. Default 5.
    pub recovery_limit: u32,
    /// Auto-disable of long-broken destinations (R-DI-10). Env
    /// `STREAMING_HUB_AUTODISABLE_ENABLED`. Default true.
    pub autodisable_enabled: bool,
    /// How long a failure streak must last before auto-disable (R-DI-10). Env
    /// `STREAMING_HUB_AUTODISABLE_WINDOW_MS`. Default 120 h.
    pub autodisable_window_ms: i64,
    /// How far apart a streak's first and last failure must be (R-DI-10: 12 h). Env
    /// `STREAMING_HUB_AUTODISABLE_MIN_SPREAD_MS`; lowered only for drills and tests.
    pub autodisable_min_spread_ms: i64,
    /// How long a destination's circuit breaker stays open before its half-open probe
    /// (R-DI-9). Env `STREAMING_HUB_BREAKER_COOL_DOWN_MS`. Default 30 s.
    pub breaker_cool_down_ms: i64,
    /// Whether the hub's own events (R-CP-5) are also published to `lerian.streaming.hub` when
    /// Kafka is configured. Env `STREAMING_HUB_PUBLISH_HUB_EVENTS`. Default true.
    pub publish_hub_events: bool,
    /// How often each shard's lane looks for jobs coming due (retries). Env
    /// `STREAMING_HUB_DELIVERY_POLL_MS`. Default 200; 10 to 2,000 (`MAX_DELIVERY_POLL_MS`):
    /// the page renews the lane's hold on a shared store (10 s), so a longer poll would let it
    /// lapse between pages.
    pub delivery_poll_ms: u64,
    /// Ingest back-pressure (issue 17): the delivery lag (how late the freshest attempts start,
    /// worst shard) at which ingest holds back — Kafka partitions paused, HTTP ingest answering
    /// 429 — until the lag is under half of it. 0 turns this bound off. Env
    /// `STREAMING_HUB_BACKPRESSURE_LAG_MS`. Default 5000.
    pub backpressure_lag_ms: i64,
    /// Jobs pending in the store at which ingest holds back (retries waiting for broken
    /// destinations count: set it above what they may reach). 0 turns this bound off. Env
    /// `STREAMING_HUB_BACKPRESSURE_PENDING_JOBS`. Default 0.
    pub backpressure_pending_jobs: u64,
    /// Longest ingest holds back at a time; then it goes on for a quarter of this before the
    /// bounds are looked at again, so one slow destination cannot stop ingest for good. Env
    /// `STREAMING_HUB_BACKPRESSURE_MAX_PAUSE_MS`. Default 5000.
    pub backpressure_max_pause_ms: i64,
    /// How long a stop (SIGTERM, SIGINT) waits for in-flight batches and attempts before the
    /// process exits anyway, with status 1: a store that stopped answering must not keep it alive.
    /// What was cut short is replayed on the next start, as after a crash. The Kafka consumer
    /// waits three quarters of it for the shards, so its last offset commit fits inside. Env
    /// `STREAMING_HUB_STOP_GRACE_MS`. Default 30000.
    pub stop_grace_ms: u64,
    /// How often the engine reads the control plane's revision log for subscription changes
    /// (R-MA-3; the safety net under push). Env `STREAMING_HUB_FOLLOW_MS`. Default 250.
    pub follow_ms: u64,
    /// A control process this engine runs beside (`hub-control serve`, e.g.
    /// `http://127.0.0.1:8081`): the engine keeps a long poll open on its `/internal/changes`
    /// and reads the revision log the moment a change is written there (R-TR-4). Env
    /// `STREAMING_HUB_CONTROL_URL`. Unset: polling alone.
    pub control_url: Option<String>,
    /// Connections the HTTP listener keeps open at once (issue 16). Env
    /// `STREAMING_HUB_HTTP_MAX_CONNECTIONS`. Default 1024.
    pub http_max_connections: usize,
    /// How long a connection may take to send a request's headers, and how long a kept-alive
    /// HTTP/1 connection may sit idle. Env `STREAMING_HUB_HTTP_HEADER_TIMEOUT_MS`. Default 30 s.
    pub http_header_timeout_ms: u64,
    /// How long a request's whole body may take (408 past it). Env
    /// `STREAMING_HUB_HTTP_BODY_TIMEOUT_MS`. Default 30 s.
    pub http_body_timeout_ms: u64,
    /// TLS on the HTTP listener: a PEM certificate chain, with `tls_key_file`, read again when
    /// either file changes or on SIGHUP. Env `STREAMING_HUB_TLS_CERT_FILE`. Unset: plain TCP.
    pub tls_cert_file: Option<PathBuf>,
    /// The certificate's PEM private key. Env `STREAMING_HUB_TLS_KEY_FILE`.
    pub tls_key_file: Option<PathBuf>,
}

impl Default for HubConfig {
    fn default() -> Self {
        Self {
            store: StoreKind::Embedded,
            cql_nodes: "127.0.0.1:9042".into(),
            cql_access: hub_core::cql::CqlAccess::default(),
            cql_keyspace: "streaming_hub".into(),
            cql_replication: "{'class': 'NetworkTopologyStrategy', 'replication_factor': 1}".into(),
            cql_unit_advance_ms: 200,
            cql_ingest_linger_ms: 0,
            retention_s: 7 * 86_400,
            dedup_window_s: 7 * 86_400,
            forensics_retention_s: 30 * 86_400,
            retention_pass_ms: crate::store::expiry::EVERY.as_millis() as u64,
            data_dir: PathBuf::from(".hub-data"),
            embedded_format: None,
            http_addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            kafka_brokers: None,
            http_ingest: None,
            kafka_security: Default::default(),
            kafka_group: "streaming-hub".into(),
            kafka_instance_id: None,
            kafka_sources: Default::default(),
            kafka_metadata_refresh_ms: 10_000,
            kafka_prefetch_kib: 8 << 10,
            kafka_prefetch_records: 5_000,
            kafka_fetch_wait_ms: 0,
            kafka_session_timeout_ms: 45_000,
            shards: 0,
            shard_queue: 8192,
            max_batch: 2000,
            shard_preempt_us: crate::runtime::SHARD_PREEMPT.as_micros() as u64,
            max_value_bytes: 1 << 20,
            max_header_bytes: 4096,
            delivery_workers: 8,
            webhooks_on_shards: true,
            kafka_partitions_on_shards: true,
            recovery_limit: 5,
            autodisable_enabled: true,
            autodisable_window_ms: crate::delivery::autodisable::DEFAULT_WINDOW_MS,
            autodisable_min_spread_ms: crate::delivery::autodisable::MIN_SPREAD_MS,
            breaker_cool_down_ms: crate::delivery::breaker::BreakerConfig::default().cool_down_ms,
            publish_hub_events: true,
            delivery_poll_ms: 200,
            backpressure_lag_ms: 5_000,
            backpressure_pending_jobs: 0,
            backpressure_max_pause_ms: 5_000,
            stop_grace_ms: 30_000,
            follow_ms: 250,
            control_url: None,
            http_max_connections: 1024,
            http_header_timeout_ms: 30_000,
            http_body_timeout_ms: 30_000,
            tls_cert_file: None,
            tls_key_file: None,
        }
    }
}

/// The longest delivery poll: a fifth of a lane's hold on a shared store (10 s), which its pages
/// renew.
pub const MAX_DELIVERY_POLL_MS: u64 = 2_000;

/// The longest the broker may hold a fetch for more records: past a second the wait is no
/// batching window any more but a stall at a low rate.
pub const MAX_KAFKA_FETCH_WAIT_MS: u32 = 1_000;

/// A configuration problem, named precisely enough to fix.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file is not valid TOML for this struct (unknown keys included).
    #[error("invalid config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    /// An environment variable could not be parsed.
    #[error("invalid {var}={value}: {message}")]
    Env {
        var: String,
        value: String,
        message: String,
    },
    /// A value is out of range.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

impl HubConfig {
    /// Reads `file` (if any), then the environment, then validates.
    pub fn load(file: Option<&std::path::Path>) -> Result<Self, ConfigError> {
        let mut config = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.into(),
                    source,
                })?;
                toml::from_str(&text).map_err(|e| ConfigError::Parse {
                    path: path.into(),
                    message: e.to_string(),
                })?
            }
            None => HubConfig::default(),
        };
        config.apply_env(|k| std::env::var(k).ok())?;
        config.validate()?;
        Ok(config)
    }

    /// Applies `STREAMING_HUB_*` overrides from `get` (injected for tests).
    pub fn apply_env(&mut self, get: impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        fn parse<T: std::str::FromStr>(var: &str, value: String) -> Result<T, ConfigError>
        where
            T::Err: std::fmt::Display,
        {
            value.parse().map_err(|e: T::Err| ConfigError::Env {
                var: var.into(),
                message: e.to_string(),
                value,
            })
        }
        let env = |name: &str| {
            get(&format!("STREAMING_HUB_{name}")).map(|v| (format!("STREAMING_HUB_{name}"), v))
        };
        if let Some((k, v)) = env("STORE") {
            self.store = parse(&k, v)?;
        }
        self.cql_access = hub_core::cql::CqlAccess::from_env(&get).map_err(ConfigError::Invalid)?;
        if let Some((_, v)) = env("CQL_NODES") {
            self.cql_nodes = v;
        }
        if let Some((_, v)) = env("CQL_KEYSPACE") {
            self.cql_keyspace = v;
        }
        if let Some((_, v)) = env("CQL_REPLICATION") {
            self.cql_replication = v;
        }
        if let Some((k, v)) = env("CQL_UNIT_ADVANCE_MS") {
            self.cql_unit_advance_ms = parse(&k, v)?;
        }
        if let Some((k, v)) = env("CQL_INGEST_LINGER_MS") {
            self.cql_ingest_linger_ms = parse(&k, v)?;
        }
        if let Some((k, v)) = env("RETENTION_S") {
            self.retention_s = parse(&k, v)?;
        }
        if let Some((k, v)) = env("DEDUP_WINDOW_S") {
            self.dedup_window_s = parse(&k, v)?;
        }
        if let Some((k, v)) = env("FORENSICS_RETENTION_S") {
            self.forensics_retention_s = parse(&k, v)?;
        }
        if let Some((k, v)) = env("RETENTION_PASS_MS") {
            self.retention_pass_ms = parse(&k, v)?;
        }
        if let Some((_, v)) = env("DATA_DIR") {
            self.data_dir = v.into();
        }
        if let Some((k, v)) = env("EMBEDDED_FORMAT") {
            self.embedded_format = Some(parse(&k, v)?);
        }
        if let Some((k, v)) = env("HTTP_ADDR") {
            self.http_addr = parse(&k, v)?;
        }
        if let Some((_, v)) = env("KAFKA_BROKERS") {
            self.kafka_brokers = (!v.is_empty()).then_some(v);
        }
        for (name, field) in [
            ("KAFKA_SECURITY_PROTOCOL", &mut self.kafka_security.protocol),
            (
                "KAFKA_SASL_MECHANISM",
                &mut self.kafka_security.sasl_mechanism,
            ),
            (
                "KAFKA_SASL_USERNAME",
                &mut self.kafka_security.sasl_username,
            ),
            (
                "KAFKA_SASL_PASSWORD",
                &mut self.kafka_security.sasl_password,
            ),
            ("KAFKA_SSL_CA_FILE", &mut self.kafka_security.ssl_ca_file),
        ] {
            if let Some((_, v)) = env(name) {
                *field = (!v.is_empty()).then_some(v);
            }
        }
        if let Some((k, v)) = env("HTTP_INGEST") {
            self.http_ingest = Some(parse(&k, v)?);
        }
        if let Some((_, v)) = env("KAFKA_INSTANCE_ID") {
            self.kafka_instance_id = (!v.is_empty()).then_some(v);
        }
        if let Some((k, v)) = env("KAFKA_SOURCES") {
            self.kafka_sources = parse(&k, v)?;
        }
        if let Some((_, v)) = env("KAFKA_GROUP") {
            self.kafka_group = v;
        }
        if let Some((k, v)) = env("KAFKA_METADATA_REFRESH_MS") {
            self.kafka_metadata_refresh_ms = parse(&k, v)?;
        }
        if let Some((k, v)) = env("KAFKA_PREFETCH_KIB") {
            self.kafka_prefetch_kib = parse(&k, v)?;
        }
        if let Some((k, v)) = env("KAFKA_PREFETCH_RECORDS") {
            self.kafka_prefetch_records = parse(&k, v)?;
        }
        if let Some((k, v)) = env("KAFKA_FETCH_WAIT_MS") {
            self.kafka_fetch_wait_ms = parse(&k, v)?;
        }
        if let Some((k, v)) = env("KAFKA_SESSION_TIMEOUT_MS") {
            self.kafka_session_timeout_ms = parse(&k, v)?;
        }
        if let Some((k, v)) = env("SHARDS") {
            self.shards = parse(&k, v)?;
        }
        if let Some((k, v)) = env("SHARD_QUEUE") {
            self.shard_queue = parse(&k, v)?;
        }
        if let Some((k, v)) = env("MAX_BATCH") {
            self.max_batch = parse(&k, v)?;
        }
        if let Some((k, v)) = env("SHARD_PREEMPT_US") {
            self.shard_preempt_us = parse(&k, v)?;
        }
        if let Some((k, v)) = env("MAX_VALUE_BYTES") {
            self.max_value_bytes = parse(&k, v)?;
        }
        if let Some((k, v)) = env("MAX_HEADER_BYTES") {
            self.max_header_bytes = parse(&k, v)?;
        }
        if let Some((k, v)) = env("DELIVERY_WORKERS") {
            self.delivery_workers = parse(&k, v)?;
        }
        if let Some((k, v)) = env("WEBHOOKS_ON_SHARDS") {
            self.webhooks_on_shards = parse(&k, v)?;
        }
        if let Some((k, v)) = env("KAFKA_PARTITIONS_ON_SHARDS") {
            self.kafka_partitions_on_shards = parse(&k, v)?;
        }
        if let Some((k, v)) = env("RECOVERY_LIMIT") {
            self.recovery_limit = parse(&k, v)?;
        }
        if let Some((k, v)) = env("AUTODISABLE_ENABLED") {
            self.autodisable_enabled = parse(&k, v)?;
        }
        if let Some((k, v)) = env("AUTODISABLE_WINDOW_MS") {
            self.autodisable_window_ms = parse(&k, v)?;
        }
        if let Some((k, v)) = env("AUTODISABLE_MIN_SPREAD_MS") {
            self.autodisable_min_spread_ms = parse(&k, v)?;
        }
        if let Some((k, v)) = env("BREAKER_COOL_DOWN_MS") {
            self.breaker_cool_down_ms = parse(&k, v)?;
        }
        if let Some((k, v)) = env("PUBLISH_HUB_EVENTS") {
            self.publish_hub_events = parse(&k, v)?;
        }
        if let Some((k, v)) = env("DELIVERY_POLL_MS") {
            self.delivery_poll_ms = parse(&k, v)?;
        }
        if let Some((k, v)) = env("BACKPRESSURE_LAG_MS") {
            self.backpressure_lag_ms = parse(&k, v)?;
        }
        if let Some((k, v)) = env("BACKPRESSURE_PENDING_JOBS") {
            self.backpressure_pending_jobs = parse(&k, v)?;
        }
        if let Some((k, v)) = env("BACKPRESSURE_MAX_PAUSE_MS") {
            self.backpressure_max_pause_ms = parse(&k, v)?;
        }
        if let Some((k, v)) = env("STOP_GRACE_MS") {
            self.stop_grace_ms = parse(&k, v)?;
        }
        if let Some((k, v)) = env("FOLLOW_MS") {
            self.follow_ms = parse(&k, v)?;
        }
        if let Some((k, v)) = env("HTTP_MAX_CONNECTIONS") {
            self.http_max_connections = parse(&k, v)?;
        }
        if let Some((k, v)) = env("HTTP_HEADER_TIMEOUT_MS") {
            self.http_header_timeout_ms = parse(&k, v)?;
        }
        if let Some((k, v)) = env("HTTP_BODY_TIMEOUT_MS") {
            self.http_body_timeout_ms = parse(&k, v)?;
        }
        if let Some((_, v)) = env("TLS_CERT_FILE") {
            self.tls_cert_file = (!v.is_empty()).then(|| v.into());
        }
        if let Some((_, v)) = env("TLS_KEY_FILE") {
            self.tls_key_file = (!v.is_empty()).then(|| v.into());
        }
        if let Some((_, v)) = env("CONTROL_URL") {
            self.control_url = (!v.is_empty()).then(|| v.trim_end_matches('/').to_owned());
        }
        Ok(())
    }

    /// What the HTTP listener lets clients hold; bodies up to the ingest route's limit (twice
    /// the largest value, so an oversized one still reaches the verdict) or 2 MiB.
    pub fn listener_limits(&self) -> hub_core::listener::ListenerLimits {
        hub_core::listener::ListenerLimits {
            max_connections: self.http_max_connections.max(1),
            header_timeout: Duration::from_millis(self.http_header_timeout_ms.max(1)),
            body_timeout: Duration::from_millis(self.http_body_timeout_ms.max(1)),
            max_body_bytes: self.max_value_bytes.saturating_mul(2).max(2 * 1024 * 1024),
        }
    }

    /// The listener's TLS, read from the configured files and followed for changes; `None` for
    /// plain TCP. Both files or neither.
    pub fn listener_tls(
        &self,
    ) -> anyhow::Result<Option<std::sync::Arc<hub_core::listener::ServerTls>>> {
        let files = match (&self.tls_cert_file, &self.tls_key_file) {
            (None, None) => return Ok(None),
            (Some(cert), Some(key)) => hub_core::listener::TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
            },
            _ => anyhow::bail!(
                "TLS needs both STREAMING_HUB_TLS_CERT_FILE and STREAMING_HUB_TLS_KEY_FILE"
            ),
        };
        let tls = hub_core::listener::ServerTls::load(files).map_err(anyhow::Error::msg)?;
        tls.clone().watch(Duration::from_secs(5));
        Ok(Some(tls))
    }

    /// Whether HTTP ingest is served: as set, else only when Kafka is not configured (R-SEC-4).
    pub fn http_ingest_on(&self) -> bool {
        self.http_ingest.unwrap_or(self.kafka_brokers.is_none())
    }

    /// The windows the stores keep rows for (R-OP-5).
    pub fn retention(&self) -> crate::store::Retention {
        crate::store::Retention {
            events_s: self.retention_s,
            dedup_s: self.dedup_window_s,
            forensics_s: self.forensics_retention_s,
        }
    }

    /// The CQL contact points, trimmed, empty entries dropped.
    pub fn cql_node_list(&self) -> Vec<String> {
        self.cql_nodes
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// The ingest back-pressure bounds (issue 17).
    #[must_use]
    pub fn backpressure(&self) -> crate::delivery::backpressure::Bounds {
        crate::delivery::backpressure::Bounds {
            lag_ms: self.backpressure_lag_ms,
            pending_jobs: self.backpressure_pending_jobs,
            max_pause_ms: self.backpressure_max_pause_ms,
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if !(10..=MAX_DELIVERY_POLL_MS).contains(&self.delivery_poll_ms) {
            return Err(ConfigError::Invalid(format!(
                "delivery_poll_ms must be 10 to {MAX_DELIVERY_POLL_MS}: a page renews the lane's \
                 hold on a shared store (10 s)"
            )));
        }
        if self.shard_queue == 0 || self.max_batch == 0 {
            return Err(ConfigError::Invalid(
                "shard_queue and max_batch must be at least 1".into(),
            ));
        }
        if !(100..=1_000_000).contains(&self.shard_preempt_us) {
            return Err(ConfigError::Invalid(
                "shard_preempt_us must be 100 to 1000000 (0.1 ms to 1 s)".into(),
            ));
        }
        if self.kafka_fetch_wait_ms > MAX_KAFKA_FETCH_WAIT_MS {
            return Err(ConfigError::Invalid(format!(
                "kafka_fetch_wait_ms must be at most {MAX_KAFKA_FETCH_WAIT_MS}: a longer hold \
                 delays every record at a low rate and saves no more wake-ups"
            )));
        }
        if self.max_value_bytes == 0 || self.max_header_bytes == 0 {
            return Err(ConfigError::Invalid(
                "max_value_bytes and max_header_bytes must be at least 1".into(),
            ));
        }
        if self.dedup_window_s < self.retention_s || self.retention_s == 0 {
            return Err(ConfigError::Invalid(
                "dedup_window_s must be at least retention_s, and retention_s above 0 (R-IN-6)"
                    .into(),
            ));
        }
        if self.forensics_retention_s == 0 || self.retention_pass_ms == 0 {
            return Err(ConfigError::Invalid(
                "forensics_retention_s and retention_pass_ms must be above 0 (R-OP-5)".into(),
            ));
        }
        if self.backpressure_lag_ms < 0 || self.backpressure_max_pause_ms <= 0 {
            return Err(ConfigError::Invalid(
                "backpressure_lag_ms must be 0 (off) or more, backpressure_max_pause_ms above 0"
                    .into(),
            ));
        }
        if self.store == StoreKind::Cql && self.cql_node_list().is_empty() {
            return Err(ConfigError::Invalid("store = cql needs cql_nodes".into()));
        }
        self.kafka_security
            .validate()
            .map_err(ConfigError::Invalid)?;
        if self.kafka_group.is_empty() {
            return Err(ConfigError::Invalid("kafka_group must not be empty".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_op_3_env_overrides_and_bad_values_are_named() {
        let mut c = HubConfig::default();
        c.apply_env(|k| (k == "STREAMING_HUB_SHARDS").then(|| "3".to_owned()))
            .expect("valid");
        assert_eq!(c.shards, 3);
        assert_eq!(c.kafka_prefetch_records, 5_000, "the default");
        c.apply_env(|k| (k == "STREAMING_HUB_KAFKA_PREFETCH_RECORDS").then(|| "20000".to_owned()))
            .expect("valid");
        assert_eq!(c.kafka_prefetch_records, 20_000);
        assert_eq!(
            c.kafka_fetch_wait_ms, 0,
            "the default: a fetch answers at once"
        );
        c.apply_env(|k| (k == "STREAMING_HUB_KAFKA_FETCH_WAIT_MS").then(|| "10".to_owned()))
            .expect("valid");
        assert_eq!(c.kafka_fetch_wait_ms, 10);
        assert_eq!((c.cql_unit_advance_ms, c.cql_ingest_linger_ms), (200, 0));
        c.apply_env(|k| match k {
            "STREAMING_HUB_CQL_UNIT_ADVANCE_MS" => Some("0".to_owned()),
            "STREAMING_HUB_CQL_INGEST_LINGER_MS" => Some("20".to_owned()),
            _ => None,
        })
        .expect("valid");
        assert_eq!((c.cql_unit_advance_ms, c.cql_ingest_linger_ms), (0, 20));
        let err = c
            .apply_env(|k| (k == "STREAMING_HUB_HTTP_ADDR").then(|| "nope".to_owned()))
            .expect_err("bad address refused");
        assert!(
            err.to_string().contains("STREAMING_HUB_HTTP_ADDR=nope"),
            "{err}"
        );
    }

    #[test]
    fn r_in_6_store_choice_and_dedup_window_are_checked() {
        let mut c = HubConfig::default();
        c.apply_env(|k| match k {
            "STREAMING_HUB_STORE" => Some("cql".to_owned()),
            "STREAMING_HUB_CQL_NODES" => Some(" 127.0.0.1:9042, ,127.0.0.2:9042".to_owned()),
            _ => None,
        })
        .expect("valid");
        assert_eq!(c.store, StoreKind::Cql);
        assert_eq!(c.cql_node_list(), vec!["127.0.0.1:9042", "127.0.0.2:9042"]);
        c.validate().expect("valid");
        let err = c
            .apply_env(|k| (k == "STREAMING_HUB_STORE").then(|| "mongo".to_owned()))
            .expect_err("unknown store refused");
        assert!(err.to_string().contains("mongo"), "{err}");
        c.dedup_window_s = c.retention_s - 1;
        assert!(
            c.validate().is_err(),
            "a dedup window shorter than retention is refused"
        );
    }

    #[test]
    fn r_op_3_a_delivery_poll_past_the_lane_hold_is_refused() {
        let mut c = HubConfig::default();
        c.validate().expect("the default poll");
        c.delivery_poll_ms = MAX_DELIVERY_POLL_MS + 1;
        let err = c.validate().expect_err("a poll the hold would lapse under");
        assert!(err.to_string().contains("delivery_poll_ms"), "{err}");
        c.delivery_poll_ms = 9;
        assert!(c.validate().is_err(), "a poll under 10 ms");
    }

    #[test]
    fn r_op_3_a_fetch_wait_past_a_second_is_refused() {
        let mut c = HubConfig {
            kafka_fetch_wait_ms: MAX_KAFKA_FETCH_WAIT_MS,
            ..HubConfig::default()
        };
        c.validate().expect("a second at most");
        c.kafka_fetch_wait_ms = MAX_KAFKA_FETCH_WAIT_MS + 1;
        let err = c.validate().expect_err("a hold that is a stall");
        assert!(err.to_string().contains("kafka_fetch_wait_ms"), "{err}");
    }

    #[test]
    fn r_op_3_unknown_keys_in_the_file_are_rejected() {
        let err = toml::from_str::<HubConfig>("shards = 2\nshardz = 3\n")
            .expect_err("unknown key refused");
        assert!(err.to_string().contains("shardz"), "{err}");
    }

    #[test]
    fn r_sec_4_http_ingest_is_on_alone_and_off_beside_kafka_unless_set() {
        let mut c = HubConfig::default();
        assert!(
            c.http_ingest_on(),
            "the standalone hub takes events over HTTP"
        );
        c.apply_env(|k| (k == "STREAMING_HUB_KAFKA_BROKERS").then(|| "127.0.0.1:9092".to_owned()))
            .expect("env");
        assert!(!c.http_ingest_on(), "beside Kafka, off by default");
        c.apply_env(|k| (k == "STREAMING_HUB_HTTP_INGEST").then(|| "true".to_owned()))
            .expect("env");
        assert!(c.http_ingest_on(), "turned on");
        let err = c
            .apply_env(|k| (k == "STREAMING_HUB_HTTP_INGEST").then(|| "yes please".to_owned()))
            .expect_err("not a boolean");
        assert!(
            err.to_string().contains("STREAMING_HUB_HTTP_INGEST"),
            "{err}"
        );
    }
}
