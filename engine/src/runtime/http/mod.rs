//! HTTP/1.1 on a shard (issue 17): connections over glommio's TCP, each request written and its
//! answer read by the attempt's own task (`wire.rs`), kept alive in a pool per origin that
//! belongs to the shard, so a webhook attempt runs where its job lives with no hop to tokio.
//! What to send and how to judge the answer is the webhook sink's (`hub_core::sink::webhook`);
//! this is only the transport.
//!
//! `https` runs rustls over the same streams (futures-rustls), trusting the system's roots as the
//! tokio client does (`rustls-native-certs`, which honours `SSL_CERT_FILE`).

mod wire;

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

#[cfg(feature = "fuzzing")]
pub use self::wire::read_answer;
use self::wire::Wire;
pub use self::wire::{Answer, Failed, Fields, Request};
use crate::fast_hash::FastMap;

/// How long an idle connection is kept for the next request to its origin.
const IDLE_FOR: Duration = Duration::from_secs(90);
/// Most idle connections kept per origin.
const IDLE_PER_ORIGIN: usize = 64;
/// How often the pool lets go of connections idle past `IDLE_FOR` to origins no request asks
/// for any more (each holds a socket and its task on the shard).
const SWEEP_EVERY: Duration = Duration::from_secs(10);

/// Where connections go: a host name (or address literal), port, and whether over TLS.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Origin {
    pub host: String,
    pub port: u16,
    pub tls: bool,
}

/// Why no connection was made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectFailed {
    #[error("{0}")]
    Tcp(std::io::Error),
    #[error("TLS handshake: {0}")]
    Tls(std::io::Error),
}

/// The TLS client of every shard: the system's roots (loaded once per process), HTTP/1.1;
/// `None` if rustls refused to build it (the shards then leave `https` to the tokio client).
pub fn system_tls() -> Option<Arc<rustls::ClientConfig>> {
    static CONFIG: OnceLock<Option<Arc<rustls::ClientConfig>>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            // Unreadable roots are skipped, as the tokio client skips them: an https attempt
            // then fails its handshake, classified, rather than the engine failing to start.
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                tracing::warn!(
                    "no system root certificates: https webhooks will fail their handshake"
                );
            }
            tls_trusting(roots)
                .inspect_err(|e| tracing::warn!(error = %e, "no TLS client on the shards"))
                .ok()
        })
        .clone()
}

/// A TLS client configuration trusting `roots`, speaking HTTP/1.1.
pub fn tls_trusting(
    roots: rustls::RootCertStore,
) -> Result<Arc<rustls::ClientConfig>, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A connection ready for one request at a time.
#[derive(Debug)]
pub struct Connection {
    wire: Wire,
    /// Taken from the pool (its peer may have closed it while it idled).
    pub reused: bool,
}

/// A kept connection and since when it idles.
type Idle = (Wire, Instant);

/// One shard's keep-alive pool. Not `Send`: it lives and is used on its shard only.
#[derive(Debug, Default)]
pub struct ShardHttp {
    /// Looked up twice per attempt (taken, kept again): a fast hash, and no key made unless
    /// the origin is new.
    idle: RefCell<FastMap<Origin, Vec<Idle>>>,
    /// When `sweep` last ran.
    swept_at: Cell<Option<Instant>>,
}

impl ShardHttp {
    /// An idle connection to `origin` still open, if the pool has one.
    pub fn take_idle(&self, origin: &Origin) -> Option<Connection> {
        let mut idle = self.idle.borrow_mut();
        let kept = idle.get_mut(origin)?;
        let now = Instant::now();
        // Whether the peer closed one while it idled shows when it is used: the attempt then
        // sends once more on a new connection (`ShardWebhooks::attempt`). Asking the socket
        // first would cost every attempt a syscall.
        while let Some((wire, since)) = kept.pop() {
            if now.duration_since(since) < IDLE_FOR {
                return Some(Connection { wire, reused: true });
            }
        }
        // An emptied origin keeps its entry for the connection that comes back; `sweep` drops
        // the ones no connection came back to.
        None
    }

    /// Drops connections idle past `IDLE_FOR`, and origins left with none, at most once per
    /// `SWEEP_EVERY`: an origin no request asks for again would keep them for good otherwise.
    pub(crate) fn sweep(&self, now: Instant) {
        if self
            .swept_at
            .get()
            .is_some_and(|at| now.duration_since(at) < SWEEP_EVERY)
        {
            return;
        }
        self.swept_at.set(Some(now));
        self.idle.borrow_mut().retain(|_, kept| {
            kept.retain(|(_, since)| now.duration_since(*since) < IDLE_FOR);
            !kept.is_empty()
        });
    }

    /// How many origins the pool keeps connections for (tests).
    #[cfg(any(test, feature = "conformance"))]
    pub fn origins_kept(&self) -> usize {
        self.idle.borrow().len()
    }

    /// Keeps `connection` for the next request to `origin`.
    fn put_idle(&self, origin: &Origin, connection: Connection) {
        let now = Instant::now();
        self.sweep(now);
        let mut idle = self.idle.borrow_mut();
        match idle.get_mut(origin) {
            Some(kept) if kept.len() < IDLE_PER_ORIGIN => kept.push((connection.wire, now)),
            Some(_full) => {}
            None => {
                idle.insert(origin.clone(), vec![(connection.wire, now)]);
            }
        }
    }

    /// Sends `request` on `connection` and reads at most `cap` bytes of the answer's body. A
    /// connection whose answer was read whole, with neither side asking to close, goes back to
    /// the pool of `origin`.
    pub async fn send(
        &self,
        origin: &Origin,
        mut connection: Connection,
        request: &Request<'_>,
        cap: usize,
    ) -> Result<Answer, Failed> {
        let (answer, keep) = connection.wire.exchange(request, cap).await?;
        if keep {
            self.put_idle(origin, connection);
        }
        Ok(answer)
    }
}

/// Opens a connection to the first of `addresses` that accepts, on the current shard; over TLS
/// (checked against `tls`'s roots for `host`) when `origin.tls`.
pub async fn connect(
    origin: &Origin,
    addresses: &[SocketAddr],
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> Result<Connection, ConnectFailed> {
    let mut last = std::io::Error::other("no address to connect to");
    for addr in addresses {
        match glommio::net::TcpStream::connect(*addr).await {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                let Some(tls) = tls.filter(|_| origin.tls) else {
                    if origin.tls {
                        let none = std::io::Error::other("no TLS client on this shard");
                        return Err(ConnectFailed::Tls(none));
                    }
                    return Ok(Connection::over(stream));
                };
                // An IPv6 literal comes bracketed from its URL; the name to check is bare.
                let bare = origin.host.trim_start_matches('[').trim_end_matches(']');
                let name = rustls_pki_types::ServerName::try_from(bare.to_owned())
                    .map_err(|e| ConnectFailed::Tls(std::io::Error::other(e)))?;
                let connector = futures_rustls::TlsConnector::from(tls.clone());
                let stream = connector
                    .connect(name, stream)
                    .await
                    .map_err(ConnectFailed::Tls)?;
                return Ok(Connection::over(stream));
            }
            Err(e) => last = std::io::Error::from(e),
        }
    }
    Err(ConnectFailed::Tcp(last))
}

impl Connection {
    fn over(stream: impl wire::Duplex + 'static) -> Self {
        Self {
            wire: Wire::new(Box::new(stream)),
            reused: false,
        }
    }
}
