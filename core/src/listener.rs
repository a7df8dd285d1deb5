//! The HTTP listener of the engine and the control process (issue 16: connection limits): at
//! most `max_connections` open at once (beyond, a new connection is closed at once, not queued);
//! an HTTP/1 connection waiting for a request's headers — its first or, kept alive, its next —
//! is closed after `header_timeout` (slow headers and idle sockets alike); a request's body must
//! arrive whole within `body_timeout` (408 `request_timeout`) and within `max_body_bytes` (413);
//! HTTP/2 connections (gRPC) are pinged and closed when the peer stops answering. REST, GraphQL
//! (with its WebSocket upgrade) and gRPC share it.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::error::{ApiError, ErrorCode};

mod tls;
pub use tls::{ServerTls, TlsFiles};

/// How much a listener lets its clients hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenerLimits {
    /// Connections open at once. Env `STREAMING_HUB_HTTP_MAX_CONNECTIONS`. Default 1024.
    pub max_connections: usize,
    /// For a request's headers, and for an idle kept-alive HTTP/1 connection's next request.
    /// Env `STREAMING_HUB_HTTP_HEADER_TIMEOUT_MS`. Default 30 s.
    pub header_timeout: Duration,
    /// For a request's whole body. Env `STREAMING_HUB_HTTP_BODY_TIMEOUT_MS`. Default 30 s.
    pub body_timeout: Duration,
    /// The largest body any route takes (routes may set less).
    pub max_body_bytes: usize,
}

impl Default for ListenerLimits {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(30),
            max_body_bytes: 2 * 1024 * 1024,
        }
    }
}

impl ListenerLimits {
    /// The limits with the `STREAMING_HUB_HTTP_*` settings `get` returns applied.
    pub fn with_env(mut self, get: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let number = |key: &str| -> Result<Option<u64>, String> {
            get(key)
                .map(|v| {
                    v.trim()
                        .parse::<u64>()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or_else(|| format!("{key}={v:?} is not a positive whole number"))
                })
                .transpose()
        };
        if let Some(n) = number("STREAMING_HUB_HTTP_MAX_CONNECTIONS")? {
            self.max_connections = usize::try_from(n).map_err(|e| e.to_string())?;
        }
        if let Some(ms) = number("STREAMING_HUB_HTTP_HEADER_TIMEOUT_MS")? {
            self.header_timeout = Duration::from_millis(ms);
        }
        if let Some(ms) = number("STREAMING_HUB_HTTP_BODY_TIMEOUT_MS")? {
            self.body_timeout = Duration::from_millis(ms);
        }
        Ok(self)
    }
}

/// Connections refused because the listener was full, since start (for `/metrics`).
static REFUSED_CONNECTIONS: AtomicU64 = AtomicU64::new(0);

/// Connections a full listener closed at once, since the process started.
pub fn refused_connections() -> u64 {
    REFUSED_CONNECTIONS.load(Ordering::Relaxed)
}

/// Serves `app` on `listener` within `limits` until `shutdown` resolves, then lets open
/// connections finish their requests (the caller bounds how long it waits).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ListenerLimits,
    tls: Option<Arc<ServerTls>>,
    shutdown: impl Future<Output = ()> + Send,
) {
    let app = app.layer(axum::middleware::from_fn_with_state(
        limits,
        read_body_in_time,
    ));
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let mut connections = auto::Builder::new(TokioExecutor::new());
    connections
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    connections
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Duration::from_secs(20))
        .keep_alive_timeout(Duration::from_secs(20));
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors or a connection reset before accept: wait, then go on.
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            REFUSED_CONNECTIONS.fetch_add(1, Ordering::Relaxed);
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let (connections, watcher) = (connections.clone(), graceful.watcher());
        let tls = tls.clone();
        tokio::spawn(async move {
            // The protocol is told from the first bytes, before HTTP/1's header timer runs: a
            // socket that sends nothing at all is closed here.
            let mut first = [0u8; 1];
            let spoke = tokio::time::timeout(limits.header_timeout, stream.peek(&mut first));
            if !matches!(spoke.await, Ok(Ok(n)) if n > 0) {
                return;
            }
            match tls {
                None => serve_connection(&connections, stream, service, watcher).await,
                Some(tls) => {
                    let handshake = tokio_rustls::TlsAcceptor::from(tls.config()).accept(stream);
                    // A handshake is bounded like headers are; a failed one is the client's.
                    if let Ok(Ok(stream)) =
                        tokio::time::timeout(limits.header_timeout, handshake).await
                    {
                        serve_connection(&connections, stream, service, watcher).await;
                    }
                }
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// Serves HTTP (either version, with upgrades) on one connection until it ends.
async fn serve_connection<I>(
    connections: &auto::Builder<TokioExecutor>,
    io: I,
    service: TowerToHyperService<Router>,
    watcher: hyper_util::server::graceful::Watcher,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let connection = connections
        .serve_connection_with_upgrades(TokioIo::new(io), service)
        .into_owned();
    // A timed-out or reset connection is the client's business, not an error of ours.
    let _ = watcher.watch(connection).await;
}

/// Reads the request's body whole within the body timeout and size limit before any route sees
/// it: a client sending a byte a second cannot hold a handler (and its connection) for long.
async fn read_body_in_time(
    axum::extract::State(limits): axum::extract::State<ListenerLimits>,
    request: Request,
    next: axum::middleware::Next,
) -> Response {
    let (parts, body) = request.into_parts();
    let read = read_capped(body, limits.max_body_bytes);
    let bytes = match tokio::time::timeout(limits.body_timeout, read).await {
        Ok(Ok(Some(bytes))) => bytes,
        Ok(Ok(None)) => {
            return ApiError::new(
                ErrorCode::PayloadTooLarge,
                format!("the body exceeds {} bytes", limits.max_body_bytes),
            )
            .into_response()
        }
        Ok(Err(_)) => {
            return ApiError::bad_request("the request's body could not be read").into_response()
        }
        Err(_) => {
            return ApiError::new(
                ErrorCode::RequestTimeout,
                format!(
                    "the request's body did not arrive within {} ms",
                    limits.body_timeout.as_millis()
                ),
            )
            .into_response()
        }
    };
    next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
        .await
}

/// How much of a body past the limit is read and thrown away before the 413 is sent.
const DRAIN_AT_MOST: usize = 8 * 1024 * 1024;

/// Reads a body of at most `max` bytes; `None` when it is longer. A longer body is read on (and
/// dropped) up to `DRAIN_AT_MOST` more, so the client finishes sending and reads the 413: a
/// server that closes a connection with input unread resets it, and the client may then lose the
/// answer (seen in CI as a connection error instead of 413).
async fn read_capped(
    body: axum::body::Body,
    max: usize,
) -> Result<Option<bytes::Bytes>, axum::Error> {
    use futures::StreamExt;
    let mut stream = body.into_data_stream();
    let mut kept = bytes::BytesMut::new();
    let mut seen = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        seen = seen.saturating_add(chunk.len());
        if seen <= max {
            kept.extend_from_slice(&chunk);
        } else if seen > max.saturating_add(DRAIN_AT_MOST) {
            return Ok(None);
        } else if !kept.is_empty() {
            kept = bytes::BytesMut::new();
        }
    }
    Ok((seen <= max).then(|| kept.freeze()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listener_settings_are_read_and_bad_ones_refused() {
        let limits = ListenerLimits::default()
            .with_env(|k| match k {
                "STREAMING_HUB_HTTP_MAX_CONNECTIONS" => Some("64".into()),
                "STREAMING_HUB_HTTP_HEADER_TIMEOUT_MS" => Some("1500".into()),
                _ => None,
            })
            .expect("limits");
        assert_eq!(limits.max_connections, 64);
        assert_eq!(limits.header_timeout, Duration::from_millis(1500));
        assert_eq!(limits.body_timeout, Duration::from_secs(30));
        let bad = ListenerLimits::default()
            .with_env(|k| (k == "STREAMING_HUB_HTTP_BODY_TIMEOUT_MS").then(|| "0".into()))
            .expect_err("zero");
        assert!(bad.contains("STREAMING_HUB_HTTP_BODY_TIMEOUT_MS"), "{bad}");
    }

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    /// A listener on a loopback port serving `GET /` and `POST /echo` within `limits`.
    async fn listening(limits: ListenerLimits) -> std::net::SocketAddr {
        let app = Router::new()
            .route("/", axum::routing::get(|| async { "ok" }))
            .route(
                "/echo",
                axum::routing::post(|body: String| async move { body }),
            );
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(serve(listener, app, limits, None, std::future::pending()));
        addr
    }

    /// Whether the server closes `stream` within `within` (reading whatever it sends first).
    async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
        let mut buf = [0u8; 4096];
        tokio::time::timeout(within, async {
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await
        .is_ok()
    }

    async fn get(stream: &mut TcpStream) -> String {
        stream
            .write_all(b"GET / HTTP/1.1\r\nhost: hub\r\n\r\n")
            .await
            .expect("write");
        let mut buf = vec![0u8; 4096];
        let n = stream.read(&mut buf).await.expect("read");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    fn limits(max_connections: usize, header_ms: u64, body_ms: u64) -> ListenerLimits {
        ListenerLimits {
            max_connections,
            header_timeout: Duration::from_millis(header_ms),
            body_timeout: Duration::from_millis(body_ms),
            max_body_bytes: 1024,
        }
    }

    /// Issue 16 (R-OP-3): slow headers and idle kept-alive connections are closed after the
    /// header timeout, whatever the client does.
    #[tokio::test]
    async fn r_op_3_slow_headers_and_idle_connections_are_closed() {
        let addr = listening(limits(16, 300, 5_000)).await;
        let mut idle = TcpStream::connect(addr).await.expect("connect");
        assert!(
            closed_within(&mut idle, Duration::from_secs(3)).await,
            "a silent socket"
        );

        let mut slow = TcpStream::connect(addr).await.expect("connect");
        for byte in b"GET / HTTP/1.1\r\nhost: h" {
            if slow.write_all(&[*byte]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            closed_within(&mut slow, Duration::from_secs(3)).await,
            "slow headers"
        );

        let mut kept = TcpStream::connect(addr).await.expect("connect");
        assert!(get(&mut kept).await.starts_with("HTTP/1.1 200"));
        assert!(
            closed_within(&mut kept, Duration::from_secs(3)).await,
            "idle after a request"
        );
    }

    /// Issue 16 (R-OP-3): a body that trickles in is cut at the body timeout with 408
    /// `request_timeout`; one over the size limit is 413.
    #[tokio::test]
    async fn r_op_3_a_slow_body_is_408_and_a_large_one_413() {
        let addr = listening(limits(16, 5_000, 300)).await;
        let mut slow = TcpStream::connect(addr).await.expect("connect");
        slow.write_all(b"POST /echo HTTP/1.1\r\nhost: h\r\ncontent-length: 40\r\n\r\n")
            .await
            .expect("headers");
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        for _ in 0..40 {
            let _ = slow.write_all(b"x").await;
            if let Ok(Ok(n)) =
                tokio::time::timeout(Duration::from_millis(100), slow.read(&mut buf)).await
            {
                answer.extend_from_slice(&buf[..n]);
                break;
            }
        }
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("request_timeout"), "{answer}");

        let mut large = TcpStream::connect(addr).await.expect("connect");
        let body = "y".repeat(2048);
        let request = format!(
            "POST /echo HTTP/1.1\r\nhost: h\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        large.write_all(request.as_bytes()).await.expect("write");
        let n = large.read(&mut buf).await.expect("read");
        let answer = String::from_utf8_lossy(&buf[..n]);
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
        assert!(answer.contains("payload_too_large"), "{answer}");
    }

    /// Issue 16 (R-OP-3): past the cap a new connection is closed at once; the open ones still
    /// work, and a freed slot takes a new connection.
    #[tokio::test]
    async fn r_op_3_connections_past_the_cap_are_closed_at_once() {
        let addr = listening(limits(2, 5_000, 5_000)).await;
        let mut first = TcpStream::connect(addr).await.expect("connect");
        let mut second = TcpStream::connect(addr).await.expect("connect");
        assert!(get(&mut first).await.starts_with("HTTP/1.1 200"));
        let before = refused_connections();
        let mut third = TcpStream::connect(addr).await.expect("connect");
        assert!(
            closed_within(&mut third, Duration::from_secs(1)).await,
            "over the cap"
        );
        assert!(refused_connections() > before);
        assert!(get(&mut second).await.starts_with("HTTP/1.1 200"));
        drop(first);
        let mut fourth = None;
        for _ in 0..50 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let mut s = TcpStream::connect(addr).await.expect("connect");
            let _ = s.write_all(b"GET / HTTP/1.1\r\nhost: hub\r\n\r\n").await;
            let mut buf = [0u8; 64];
            if matches!(s.read(&mut buf).await, Ok(n) if n > 0) {
                fourth = Some(String::from_utf8_lossy(&buf).into_owned());
                break;
            }
        }
        assert!(
            fourth.is_some_and(|a| a.starts_with("HTTP/1.1 200")),
            "a freed slot is used"
        );
    }

    /// A self-signed certificate for 127.0.0.1 (openssl), written as `cert.pem` and `key.pem`.
    fn self_signed(dir: &std::path::Path, name: &str) -> (TlsFiles, Vec<u8>) {
        let files = TlsFiles {
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        };
        // An end-entity certificate (not a CA: rustls refuses a CA as a server's identity).
        let config = dir.join("openssl.cnf");
        let extensions = "basicConstraints=critical,CA:FALSE\nsubjectAltName=IP:127.0.0.1\n\
                          keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n";
        let text = format!(
            "[req]\ndistinguished_name=dn\nx509_extensions=ext\nprompt=no\n\
             [dn]\nCN={name}\n[ext]\n{extensions}"
        );
        std::fs::write(&config, text).expect("openssl config");
        let made = std::process::Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec"])
            .args([
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-days",
                "1",
            ])
            .arg("-config")
            .arg(&config)
            .arg("-keyout")
            .arg(&files.key)
            .arg("-out")
            .arg(&files.cert)
            .output()
            .expect("openssl runs");
        assert!(
            made.status.success(),
            "{}",
            String::from_utf8_lossy(&made.stderr)
        );
        let pem = std::fs::read(&files.cert).expect("cert");
        (files, pem)
    }

    async fn get_over_tls(addr: std::net::SocketAddr, trusted: &[u8]) -> Result<String, String> {
        let client = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(trusted).expect("pem"))
            .build()
            .expect("client");
        let r = client
            .get(format!("https://{addr}/"))
            .send()
            .await
            .map_err(|e| format!("{e:?}"))?;
        r.text().await.map_err(|e| e.to_string())
    }

    /// Issue 16 (R-OP-3): TLS on the listener from PEM files; a renewed certificate written
    /// over them is served to new connections without a restart, and a broken one is refused
    /// while the one in use stays.
    #[tokio::test]
    async fn r_op_3_tls_is_served_from_files_and_a_renewed_certificate_is_picked_up() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (files, first) = self_signed(dir.path(), "first");
        let tls = ServerTls::load(files.clone()).expect("tls");
        tls.clone().watch(Duration::from_millis(100));
        let app = Router::new().route("/", axum::routing::get(|| async { "ok" }));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let limits = limits(16, 5_000, 5_000);
        tokio::spawn(serve(
            listener,
            app,
            limits,
            Some(tls.clone()),
            std::future::pending(),
        ));
        assert_eq!(get_over_tls(addr, &first).await.as_deref(), Ok("ok"));
        let mut plain = TcpStream::connect(addr).await.expect("connect");
        assert!(
            !get(&mut plain).await.starts_with("HTTP/1.1 200"),
            "no plain HTTP"
        );

        // Renewed: new connections get the new certificate.
        tokio::time::sleep(Duration::from_millis(1100)).await; // a new modification time
        let (_, second) = self_signed(dir.path(), "second");
        let mut renewed = false;
        for _ in 0..50 {
            if get_over_tls(addr, &second).await.is_ok() {
                renewed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(renewed, "the renewed certificate is served");
        assert!(
            get_over_tls(addr, &first).await.is_err(),
            "the old one is gone"
        );

        // A broken certificate is refused; the renewed one stays in use.
        std::fs::write(&files.cert, "not a certificate").expect("write");
        assert!(tls.reload().is_err());
        assert_eq!(get_over_tls(addr, &second).await.as_deref(), Ok("ok"));
    }
}
