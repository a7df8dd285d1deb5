//! HTTP/1.1 on a shard (issue 17): hyper's client connections over glommio's TCP, kept alive in a
//! pool per origin that belongs to the shard, so a webhook attempt runs where its job lives with
//! no hop to tokio. What to send and how to judge the answer is the webhook sink's
//! (`hub_core::sink::webhook`); this is only the transport.
//!
//! `https` runs rustls over the same streams (futures-rustls), trusting the system's roots as the
//! tokio client does (`rustls-native-certs`, which honours `SSL_CERT_FILE`).

mod io;

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;

use self::io::ShardIo;
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
    #[error("HTTP handshake: {0}")]
    Http(hyper::Error),
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
    sender: SendRequest<Full<Bytes>>,
    /// Taken from the pool (it may have been closed by the peer while idle).
    pub reused: bool,
}

/// What came back: the status and at most `cap` bytes of the body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
}

/// A kept connection and since when it idles.
type Idle = (SendRequest<Full<Bytes>>, Instant);

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
        while let Some((sender, since)) = kept.pop() {
            if now.duration_since(since) < IDLE_FOR && sender.is_ready() {
                return Some(Connection {
                    sender,
                    reused: true,
                });
            }
        }
        // An emptied origin keeps its entry for the connection that comes back; `sweep` drops
        // the ones no connection came back to.
        None
    }

    /// Drops connections idle past `IDLE_FOR` or closed by their peer, and origins left with
    /// none, at most once per `SWEEP_EVERY`: an origin no request asks for again would keep them
    /// for good otherwise.
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
            kept.retain(|(sender, since)| {
                now.duration_since(*since) < IDLE_FOR && sender.is_ready()
            });
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
        if !connection.sender.is_ready() {
            return;
        }
        let now = Instant::now();
        self.sweep(now);
        let mut idle = self.idle.borrow_mut();
        match idle.get_mut(origin) {
            Some(kept) if kept.len() < IDLE_PER_ORIGIN => kept.push((connection.sender, now)),
            Some(_full) => {}
            None => {
                idle.insert(origin.clone(), vec![(connection.sender, now)]);
            }
        }
    }

    /// Sends `request` on `connection` and reads at most `cap` bytes of the answer's body. A
    /// connection whose answer was read whole goes back to the pool of `origin`.
    pub async fn send(
        &self,
        origin: &Origin,
        mut connection: Connection,
        request: hyper::Request<Full<Bytes>>,
        cap: usize,
    ) -> Result<Answer, hyper::Error> {
        let response = connection.sender.send_request(request).await?;
        let status = response.status().as_u16();
        let mut body = response.into_body();
        let mut kept = Vec::new();
        let whole = loop {
            if kept.len() >= cap {
                break hyper::body::Body::is_end_stream(&body);
            }
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        let room = cap - kept.len();
                        kept.extend_from_slice(&data[..data.len().min(room)]);
                    }
                }
                Some(Err(_)) => break false,
                None => break true,
            }
        };
        // An answer left half read would be the next request's; such a connection is closed.
        if whole {
            self.put_idle(origin, connection);
        }
        Ok(Answer { status, body: kept })
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
                    return handshake(stream).await;
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
                return handshake(stream).await;
            }
            Err(e) => last = std::io::Error::from(e),
        }
    }
    Err(ConnectFailed::Tcp(last))
}

async fn handshake<S>(stream: S) -> Result<Connection, ConnectFailed>
where
    S: futures::io::AsyncRead + futures::io::AsyncWrite + Unpin + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(ShardIo::new(stream))
        .await
        .map_err(ConnectFailed::Http)?;
    // The connection's own task reads and writes the socket; it ends when the socket closes or
    // the last sender is dropped.
    glommio::spawn_local(async move {
        let _ = connection.await;
    })
    .detach();
    Ok(Connection {
        sender,
        reused: false,
    })
}
