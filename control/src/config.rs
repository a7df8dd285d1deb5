//! The control plane's configuration, from `STREAMING_HUB_*` variables, and the wiring of a
//! `Control` from it. A standalone hub needs no key material by hand: a missing JWT secret or
//! master key is generated once into the data directory (mode 0600) and reused.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::auth::{TokenVerifier, VerifyKey};
use crate::catalog::Catalog;
use crate::service::{Control, IdemSettings};
use crate::store::cql::CqlControlStore;
use crate::store::embedded::EmbeddedControlStore;
use crate::store::ControlStore;
use hub_core::destination::{DestinationPolicy, DnsResolver};
use hub_core::secrets::Keyring;

#[derive(Debug, Clone)]
pub struct ControlConfig {
    /// Env `STREAMING_HUB_JWT_ISSUER`. Default `access-manager`.
    pub issuer: String,
    /// Env `STREAMING_HUB_JWT_AUDIENCE`. Default `streaming-hub`.
    pub audience: String,
    /// Env `STREAMING_HUB_JWT_HS256_SECRET`; else a generated secret in the data directory.
    pub hs256_secret: Option<String>,
    /// Env `STREAMING_HUB_JWT_RS256_PUBLIC_KEY` (a PEM file): pins RS256 instead of HS256.
    pub rs256_public_key: Option<PathBuf>,
    /// Env `STREAMING_HUB_JWKS`: Access Manager's key set (RS256, by `kid`), a file path or an
    /// `http(s)://` URL; takes precedence over the single keys. Read at start (the hub does not
    /// start without it) and again every `STREAMING_HUB_JWKS_REFRESH_MS` (default 300000); a
    /// refresh that fails or reads a malformed document keeps the keys in use and says so.
    pub jwks: Option<String>,
    pub jwks_refresh_ms: u64,
    /// Env `STREAMING_HUB_ROTATION_OVERLAP_MS`: how long a rotated-out signing secret keeps
    /// signing. Default 24 h (R-CP-9); shortened only for drills and tests.
    pub rotation_overlap_ms: i64,
    /// Env `STREAMING_HUB_MASTER_KEYS` (`id:base64,…`, first current); else generated.
    pub master_keys: Option<String>,
    /// Env `STREAMING_HUB_ALLOW_PRIVATE_HOSTS`: comma-separated `host` (webhook) or `host:port`.
    pub allow_private_hosts: Vec<String>,
    /// Env `STREAMING_HUB_CATALOG`: the producer catalog file (TOML).
    pub catalog: Option<PathBuf>,
    /// Env `STREAMING_HUB_DNS_TIMEOUT_MS`. Default 2000.
    pub dns_timeout_ms: u64,
    /// Env `STREAMING_HUB_STORE`: `cql` keeps subscriptions in ScyllaDB (for `hub-control serve`
    /// beside engines); anything else, the embedded `control.redb`.
    pub cql: bool,
    /// Env `STREAMING_HUB_CQL_NODES` (comma-separated). Default `127.0.0.1:9042`.
    pub cql_nodes: Vec<String>,
    /// Env `STREAMING_HUB_CQL_KEYSPACE`. Default `streaming_hub`.
    pub cql_keyspace: String,
    /// Env `STREAMING_HUB_CQL_USERNAME`, `…_PASSWORD`, `…_TLS_CA_FILE`: credentials and TLS.
    pub cql_access: hub_core::cql::CqlAccess,
    /// Env `STREAMING_HUB_CQL_REPLICATION`, used when creating the keyspace.
    pub cql_replication: String,
    /// Env `STREAMING_HUB_AWS_ENDPOINT_URL`: every SQS and EventBridge call goes there instead of
    /// the region's AWS endpoint (an emulator, a VPC endpoint). An operator setting only: a
    /// tenant's endpoint names a region, account and queue or bus, never a host.
    pub aws_endpoint_url: Option<String>,
    /// The hub's AWS principal for delegated grants (R-CP-7): its keys from the standard
    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`, and its ARN (what
    /// tenants' trust policies name) from `STREAMING_HUB_AWS_PRINCIPAL_ARN`. Without both,
    /// `setup-artifacts` and `delegated-grant` answer 503 `delegated_grants_unconfigured`.
    pub aws_principal: Option<hub_core::sink::aws::OwnedKeys>,
    pub aws_principal_arn: Option<String>,
    /// Env `STREAMING_HUB_AWS_GRANT_TEMPLATE_URL`: where the delegated-grant CloudFormation
    /// template (`deploy/aws/delegated-grant.yaml`) is published, for the quick-create link.
    pub aws_grant_template_url: String,
    /// Env `STREAMING_HUB_PARTNERS_URL`: Access Manager's partner directory; set, the gateway
    /// relays partners' calls (R-CP-17), unset, every relayed call is refused. With
    /// `STREAMING_HUB_PARTNERS_TOKEN` (a bearer for it) and `STREAMING_HUB_PARTNERS_REFRESH_MS`
    /// (how often a partner's status is re-read; default 30000, stale after three).
    pub partners_url: Option<String>,
    pub partners_token: Option<String>,
    pub partners_refresh_ms: u64,
}

/// The shortest time between two key-set reads prompted by unknown `kid`s.
const UNKNOWN_KID_REFETCH_EVERY: Duration = Duration::from_secs(10);

/// Where Lerian publishes the delegated-grant template, unless the operator hosts their own.
pub const DEFAULT_GRANT_TEMPLATE_URL: &str =
    "https://lerian-streaming-hub.s3.amazonaws.com/delegated-grant/v1.yaml";

impl ControlConfig {
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> anyhow::Result<Self> {
        let var = |n: &str| get(&format!("STREAMING_HUB_{n}")).filter(|v| !v.is_empty());
        Ok(Self {
            issuer: var("JWT_ISSUER").unwrap_or_else(|| "access-manager".into()),
            audience: var("JWT_AUDIENCE").unwrap_or_else(|| "streaming-hub".into()),
            hs256_secret: var("JWT_HS256_SECRET"),
            rs256_public_key: var("JWT_RS256_PUBLIC_KEY").map(PathBuf::from),
            jwks: var("JWKS"),
            rotation_overlap_ms: var("ROTATION_OVERLAP_MS")
                .map(|v| v.parse().context("STREAMING_HUB_ROTATION_OVERLAP_MS"))
                .transpose()?
                .unwrap_or(hub_core::sink::webhook::secrets::OVERLAP_MS),
            jwks_refresh_ms: var("JWKS_REFRESH_MS")
                .map(|v| v.parse().context("STREAMING_HUB_JWKS_REFRESH_MS"))
                .transpose()?
                .unwrap_or(300_000),
            master_keys: var("MASTER_KEYS"),
            allow_private_hosts: var("ALLOW_PRIVATE_HOSTS")
                .map(|v| {
                    v.split(',')
                        .map(|h| h.trim().to_ascii_lowercase())
                        .filter(|h| !h.is_empty())
                        .collect()
                })
                .unwrap_or_default(),
            catalog: var("CATALOG").map(PathBuf::from),
            dns_timeout_ms: var("DNS_TIMEOUT_MS")
                .map(|v| v.parse().context("STREAMING_HUB_DNS_TIMEOUT_MS"))
                .transpose()?
                .unwrap_or(2000),
            cql: var("STORE").as_deref() == Some("cql"),
            cql_nodes: var("CQL_NODES")
                .unwrap_or_else(|| "127.0.0.1:9042".into())
                .split(',')
                .map(|n| n.trim().to_owned())
                .filter(|n| !n.is_empty())
                .collect(),
            cql_keyspace: var("CQL_KEYSPACE").unwrap_or_else(|| "streaming_hub".into()),
            cql_access: hub_core::cql::CqlAccess::from_env(&get).map_err(anyhow::Error::msg)?,
            cql_replication: var("CQL_REPLICATION").unwrap_or_else(|| {
                "{'class': 'NetworkTopologyStrategy', 'replication_factor': 1}".into()
            }),
            aws_endpoint_url: var("AWS_ENDPOINT_URL"),
            aws_principal: match (
                get("AWS_ACCESS_KEY_ID").filter(|v| !v.is_empty()),
                get("AWS_SECRET_ACCESS_KEY").filter(|v| !v.is_empty()),
            ) {
                (Some(access_key_id), Some(secret_access_key)) => {
                    Some(hub_core::sink::aws::OwnedKeys {
                        access_key_id,
                        secret_access_key,
                        session_token: get("AWS_SESSION_TOKEN").filter(|v| !v.is_empty()),
                    })
                }
                _ => None,
            },
            aws_principal_arn: var("AWS_PRINCIPAL_ARN"),
            partners_url: var("PARTNERS_URL"),
            partners_token: var("PARTNERS_TOKEN"),
            partners_refresh_ms: var("PARTNERS_REFRESH_MS")
                .map(|v| v.parse().context("STREAMING_HUB_PARTNERS_REFRESH_MS"))
                .transpose()?
                .unwrap_or(30_000),
            aws_grant_template_url: var("AWS_GRANT_TEMPLATE_URL")
                .unwrap_or_else(|| DEFAULT_GRANT_TEMPLATE_URL.into()),
        })
    }

    /// The HS256 secret: configured, or the one kept in `data_dir` (created on first use).
    pub fn hs256_secret(&self, data_dir: &Path) -> anyhow::Result<String> {
        match &self.hs256_secret {
            Some(s) => Ok(s.clone()),
            None => local_secret(&data_dir.join("jwt-hs256.secret"), || {
                Keyring::generate_spec("jwt")
                    .map(|s| s.replace("jwt:", ""))
                    .map_err(|e| anyhow::anyhow!("{e}"))
            }),
        }
    }

    pub fn verifier(&self, data_dir: &Path) -> anyhow::Result<TokenVerifier> {
        let key = match &self.rs256_public_key {
            Some(pem) => VerifyKey::Rs256Pem(
                std::fs::read(pem).with_context(|| format!("reading {}", pem.display()))?,
            ),
            None => VerifyKey::Hs256(self.hs256_secret(data_dir)?.into_bytes()),
        };
        TokenVerifier::new(&key, &self.issuer, &self.audience)
    }

    /// The verifier, following Access Manager's key set when one is configured (a refresh task
    /// on the current tokio runtime keeps it current).
    pub async fn token_verifier(&self, data_dir: &Path) -> anyhow::Result<TokenVerifier> {
        let Some(source) = self.jwks.clone() else {
            return self.verifier(data_dir);
        };
        let doc = fetch_jwks(&source)
            .await
            .with_context(|| format!("reading the key set {source}"))?;
        let verifier = TokenVerifier::new(&VerifyKey::Jwks(doc), &self.issuer, &self.audience)?;
        let refreshed = verifier.clone();
        let every = Duration::from_millis(self.jwks_refresh_ms.max(1000));
        tokio::spawn(async move {
            let mut last_asked = tokio::time::Instant::now()
                .checked_sub(UNKNOWN_KID_REFETCH_EVERY)
                .unwrap_or_else(tokio::time::Instant::now);
            loop {
                // Every `every`, and at once when a token names an unknown `kid` (at most every
                // ten seconds: tokens with made-up kids must not hammer Access Manager).
                tokio::select! {
                    () = tokio::time::sleep(every) => {}
                    () = refreshed.unknown_kid_seen() => {
                        let wait = UNKNOWN_KID_REFETCH_EVERY.saturating_sub(last_asked.elapsed());
                        tokio::time::sleep(wait).await;
                    }
                }
                last_asked = tokio::time::Instant::now();
                let outcome = match fetch_jwks(&source).await {
                    Ok(doc) => refreshed.refresh_jwks(&doc),
                    Err(e) => Err(e),
                };
                match outcome {
                    Ok(keys) => tracing::debug!(keys, "Access Manager key set refreshed"),
                    Err(e) => tracing::warn!(
                        error = %e,
                        "refreshing Access Manager's key set failed; the keys in use stay"
                    ),
                }
            }
        });
        Ok(verifier)
    }

    /// Builds the service on the configured control store (embedded in `data_dir`, or CQL).
    pub async fn build(
        &self,
        data_dir: &Path,
    ) -> anyhow::Result<(Arc<Control>, Arc<TokenVerifier>)> {
        let keys = match &self.master_keys {
            Some(k) => k.clone(),
            None => local_secret(&data_dir.join("master.keys"), || {
                Keyring::generate_spec("k1").map_err(|e| anyhow::anyhow!("{e}"))
            })?,
        };
        let keyring = Keyring::parse(&keys).map_err(|e| anyhow::anyhow!("{e}"))?;
        let idem = IdemSettings::default();
        let store: Arc<dyn ControlStore> = if self.cql {
            let retention_s = u32::try_from(idem.retention_ms / 1000).unwrap_or(u32::MAX);
            Arc::new(
                CqlControlStore::connect(
                    (&self.cql_nodes, &self.cql_access),
                    &self.cql_keyspace,
                    &self.cql_replication,
                    retention_s,
                )
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?,
            )
        } else {
            Arc::new(
                EmbeddedControlStore::open(&data_dir.join("control.redb"))
                    .map_err(|e| anyhow::anyhow!("{e}"))?,
            )
        };
        let policy = Arc::new(DestinationPolicy {
            allow: self.allow_private_hosts.iter().cloned().collect(),
        });
        let control = Control {
            store,
            keyring: Arc::new(keyring),
            sinks: hub_core::sink::Sinks::new(
                policy.clone(),
                hub_core::sink::aws::AwsSettings {
                    endpoint_url: self.aws_endpoint_url.clone(),
                    principal: self.aws_principal.clone(),
                    principal_arn: self.aws_principal_arn.clone(),
                    grant_template_url: self.aws_grant_template_url.clone(),
                },
            )
            .map_err(|e| anyhow::anyhow!("sink clients: {e}"))?,
            policy,
            resolver: Arc::new(
                DnsResolver::system(Duration::from_millis(self.dns_timeout_ms))
                    .map_err(|e| anyhow::anyhow!("the destination check's resolver: {e}"))?,
            ),
            catalog: Arc::new(Catalog::load(self.catalog.as_deref())),
            events: Arc::default(),
            local_index: Arc::default(),
            outcomes: Default::default(),
            reader: Arc::default(),
            rotation_overlap_ms: self.rotation_overlap_ms,
            idem,
            now_ms,
            partners: self.partner_directory()?,
            changes: tokio::sync::watch::channel(0).0,
        };
        Ok((
            Arc::new(control),
            Arc::new(self.token_verifier(data_dir).await?),
        ))
    }
}

impl ControlConfig {
    /// Access Manager's partner directory, refreshed in the background, when configured.
    fn partner_directory(
        &self,
    ) -> anyhow::Result<Option<Arc<hub_core::partners::PartnerDirectory>>> {
        let Some(url) = &self.partners_url else {
            return Ok(None);
        };
        let directory = Arc::new(
            hub_core::partners::PartnerDirectory::new(
                url,
                self.partners_token.clone(),
                Duration::from_millis(self.partners_refresh_ms.max(1000)),
            )
            .map_err(|e| anyhow::anyhow!("the partner directory's client: {e}"))?,
        );
        directory.spawn_refresh(now_ms);
        Ok(Some(directory))
    }
}

/// The wall clock in Unix ms: the hub's one clock read.
pub use hub_core::clock::now_ms;

/// Reads a secret file, or creates it (mode 0600) with `make`.
fn local_secret(
    path: &Path,
    make: impl FnOnce() -> anyhow::Result<String>,
) -> anyhow::Result<String> {
    if let Ok(s) = std::fs::read_to_string(path) {
        return Ok(s.trim().to_owned());
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let secret = make()?;
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(secret.as_bytes())?;
    Ok(secret)
}

/// The log filter of both binaries: `STREAMING_HUB_LOG` (default `info`), with lapin's own lines
/// off unless the filter names lapin: its I/O loop logs every broken broker connection as an
/// ERROR, while the RabbitMQ sink already classifies and counts each failed attempt.
pub fn log_filter() -> tracing_subscriber::EnvFilter {
    let wanted = std::env::var("STREAMING_HUB_LOG").unwrap_or_else(|_| "info".into());
    let spec = if wanted.contains("lapin") {
        wanted
    } else {
        format!("{wanted},lapin=off")
    };
    tracing_subscriber::EnvFilter::try_new(&spec)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,lapin=off"))
}

/// Where a process logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogTo {
    Stdout,
    Stderr,
}

/// Starts the process's logging: `STREAMING_HUB_LOG` is the filter, `STREAMING_HUB_LOG_FORMAT`
/// `json` (one JSON object a line, with the span fields: what a log collector reads) or `text`
/// (the default; coloured only on a terminal). An unknown format is refused at start.
pub fn init_logs(to: LogTo) -> anyhow::Result<()> {
    let format = std::env::var("STREAMING_HUB_LOG_FORMAT").unwrap_or_else(|_| "text".into());
    let builder = tracing_subscriber::fmt().with_env_filter(log_filter());
    let terminal = match to {
        LogTo::Stdout => std::io::IsTerminal::is_terminal(&std::io::stdout()),
        LogTo::Stderr => std::io::IsTerminal::is_terminal(&std::io::stderr()),
    };
    let installed = match (format.as_str(), to) {
        ("json", LogTo::Stdout) => builder.json().with_current_span(true).try_init(),
        ("json", LogTo::Stderr) => builder
            .json()
            .with_current_span(true)
            .with_writer(std::io::stderr)
            .try_init(),
        ("text", LogTo::Stdout) => builder.with_ansi(terminal).try_init(),
        ("text", LogTo::Stderr) => builder
            .with_ansi(terminal)
            .with_writer(std::io::stderr)
            .try_init(),
        (other, _) => anyhow::bail!("STREAMING_HUB_LOG_FORMAT is json or text, not {other:?}"),
    };
    installed.map_err(|e| anyhow::anyhow!("starting the logs: {e}"))
}

/// A JWKS document from a file or an `http(s)://` URL (10 s limit).
async fn fetch_jwks(source: &str) -> anyhow::Result<Vec<u8>> {
    if source.starts_with("http://") || source.starts_with("https://") {
        let response = reqwest::Client::new()
            .get(source)
            .timeout(Duration::from_secs(10))
            .send()
            .await?
            .error_for_status()?;
        Ok(response.bytes().await?.to_vec())
    } else {
        let path = source.to_owned();
        Ok(tokio::task::spawn_blocking(move || std::fs::read(path)).await??)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hub_core::auth::testing::jwks;
    use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};

    /// R-CP-1 (issue 15): a token signed with a key Access Manager has just added (a `kid` the
    /// hub's copy of the key set lacks) makes the hub re-read the set at once, not at the next
    /// five-minute refresh: the retry is accepted.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn r_cp_1_an_unknown_kid_makes_the_key_set_be_read_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("jwks.json");
        let (n1, k2, n2) = (
            include_str!("../../core/testdata/rsa-k1.n"),
            include_str!("../../core/testdata/rsa-k2.pem"),
            include_str!("../../core/testdata/rsa-k2.n"),
        );
        std::fs::write(&file, jwks(&[("k1", n1)])).expect("write");
        let path = file.display().to_string();
        let config = ControlConfig::from_env(|k| match k {
            "STREAMING_HUB_JWKS" => Some(path.clone()),
            "STREAMING_HUB_JWT_ISSUER" => Some("am".into()),
            "STREAMING_HUB_JWT_AUDIENCE" => Some("hub".into()),
            _ => None,
        })
        .expect("config");
        let verifier = config.token_verifier(dir.path()).await.expect("verifier");
        let now = u64::try_from(now_ms() / 1000).expect("now");
        let claims = serde_json::json!({"sub": "u", "iss": "am", "aud": "hub", "exp": now + 600,
            "tenant_id": "t-1"});
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some("k2".into());
        let key = EncodingKey::from_rsa_pem(k2.as_bytes()).expect("key");
        let token = format!("Bearer {}", encode(&header, &claims, &key).expect("sign"));
        // Access Manager publishes k2 and signs with it; the hub's copy still lacks it, so the
        // first such token is refused and asks for a re-read at once.
        std::fs::write(&file, jwks(&[("k1", n1), ("k2", n2)])).expect("write");
        let refused = verifier
            .verify(Some(&token))
            .expect_err("k2 is not in the hub's copy yet");
        assert_eq!(refused.status(), 401);

        let mut accepted = false;
        for _ in 0..50 {
            if verifier.verify(Some(&token)).is_ok() {
                accepted = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(accepted, "the key set was read again within five seconds");
    }
}
