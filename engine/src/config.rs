//! Configuration: one struct, validated at start, strict (unknown keys rejected), read from an
//! optional TOML file and then from `STREAMING_HUB_*` environment variables (which win).
//! Defaults are commented here, in one place.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

/// Everything the standalone hub reads at start.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HubConfig {
    /// Where the embedded store keeps its file. Env `STREAMING_HUB_DATA_DIR`. Default `./.hub-data`.
    pub data_dir: PathBuf,
    /// HTTP listen address (ingest, admin, metrics). Env `STREAMING_HUB_HTTP_ADDR`.
    /// Default `127.0.0.1:8080`: loopback, since `/admin` has no auth yet.
    pub http_addr: SocketAddr,
    /// Kafka bootstrap servers; Kafka ingest is off when unset. Env `STREAMING_HUB_KAFKA_BROKERS`.
    pub kafka_brokers: Option<String>,
    /// Consumer group id. Env `STREAMING_HUB_KAFKA_GROUP`. Default `streaming-hub`.
    pub kafka_group: String,
    /// Metadata refresh, which bounds how fast a new topic is picked up.
    /// Env `STREAMING_HUB_KAFKA_METADATA_REFRESH_MS`. Default 10000.
    pub kafka_metadata_refresh_ms: u32,
    /// Consumer-group session timeout: how long a crashed engine's partitions wait before another
    /// member takes them. Env `STREAMING_HUB_KAFKA_SESSION_TIMEOUT_MS`. Default 45000.
    pub kafka_session_timeout_ms: u32,
    /// Engine shards; 0 = one per online CPU. Env `STREAMING_HUB_SHARDS`.
    pub shards: usize,
    /// Records per shard queue before the partition is paused. Env `STREAMING_HUB_SHARD_QUEUE`.
    pub shard_queue: usize,
    /// Most records persisted per shard pass. Env `STREAMING_HUB_MAX_BATCH`. Default 2000.
    pub max_batch: usize,
    /// Largest record value accepted. Env `STREAMING_HUB_MAX_VALUE_BYTES`. Default 1 MiB.
    pub max_value_bytes: usize,
    /// Largest context attribute value accepted. Env `STREAMING_HUB_MAX_HEADER_BYTES`. Default 4096.
    pub max_header_bytes: usize,
}

impl Default for HubConfig {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from(".hub-data"),
            http_addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            kafka_brokers: None,
            kafka_group: "streaming-hub".into(),
            kafka_metadata_refresh_ms: 10_000,
            kafka_session_timeout_ms: 45_000,
            shards: 0,
            shard_queue: 8192,
            max_batch: 2000,
            max_value_bytes: 1 << 20,
            max_header_bytes: 4096,
        }
    }
}

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
        if let Some((_, v)) = env("DATA_DIR") {
            self.data_dir = v.into();
        }
        if let Some((k, v)) = env("HTTP_ADDR") {
            self.http_addr = parse(&k, v)?;
        }
        if let Some((_, v)) = env("KAFKA_BROKERS") {
            self.kafka_brokers = (!v.is_empty()).then_some(v);
        }
        if let Some((_, v)) = env("KAFKA_GROUP") {
            self.kafka_group = v;
        }
        if let Some((k, v)) = env("KAFKA_METADATA_REFRESH_MS") {
            self.kafka_metadata_refresh_ms = parse(&k, v)?;
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
        if let Some((k, v)) = env("MAX_VALUE_BYTES") {
            self.max_value_bytes = parse(&k, v)?;
        }
        if let Some((k, v)) = env("MAX_HEADER_BYTES") {
            self.max_header_bytes = parse(&k, v)?;
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.shard_queue == 0 || self.max_batch == 0 {
            return Err(ConfigError::Invalid(
                "shard_queue and max_batch must be at least 1".into(),
            ));
        }
        if self.max_value_bytes == 0 || self.max_header_bytes == 0 {
            return Err(ConfigError::Invalid(
                "max_value_bytes and max_header_bytes must be at least 1".into(),
            ));
        }
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
        let err = c
            .apply_env(|k| (k == "STREAMING_HUB_HTTP_ADDR").then(|| "nope".to_owned()))
            .expect_err("bad address refused");
        assert!(
            err.to_string().contains("STREAMING_HUB_HTTP_ADDR=nope"),
            "{err}"
        );
    }

    #[test]
    fn r_op_3_unknown_keys_in_the_file_are_rejected() {
        let err = toml::from_str::<HubConfig>("shards = 2\nshardz = 3\n")
            .expect_err("unknown key refused");
        assert!(err.to_string().contains("shardz"), "{err}");
    }
}
