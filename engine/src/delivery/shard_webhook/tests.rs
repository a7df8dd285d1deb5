//! The shard's webhook client against real sockets on loopback: a small blocking HTTP/1.1
//! server per test (a thread), the client on a glommio executor, names resolved through a
//! fixed resolver on a tokio runtime behind the bridge.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use hub_core::destination::{DestinationPolicy, ResolveError, Resolver};
use hub_core::sink::outcome::{ErrorClass, Outcome};
use hub_core::sink::webhook::{Attempt, WebhookClient, MAX_RESPONSE_BODY};

use super::ShardWebhooks;
use crate::runtime::TokioBridge;

/// Every name is this machine.
#[derive(Debug)]
struct Loopback;

#[async_trait::async_trait]
impl Resolver for Loopback {
    async fn resolve(&self, _: &str, _: u16) -> Result<Vec<IpAddr>, ResolveError> {
        Ok(vec![IpAddr::from([127, 0, 0, 1])])
    }
}

/// What a test server saw.
#[derive(Default)]
struct Seen {
    connections: AtomicUsize,
    requests: Mutex<Vec<String>>,
}

/// A connection as the test server reads and writes it: plain TCP or TLS over it.
trait Conn: Read + Write + Send {}
impl<T: Read + Write + Send> Conn for T {}

/// Serves on loopback until the test ends: each request read whole (head, then a
/// `content-length` body), recorded, and answered with what `answer` gives for its number
/// (`None`: keep the connection and never answer). `close` closes each connection after one
/// answer.
fn server(answer: fn(usize) -> Option<Vec<u8>>, close: bool) -> (SocketAddr, Arc<Seen>) {
    serving(answer, close, None)
}

/// The same, over TLS with `tls`'s certificate when given.
fn serving(
    answer: fn(usize) -> Option<Vec<u8>>,
    close: bool,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> (SocketAddr, Arc<Seen>) {
    serving_at("127.0.0.1:0", answer, close, tls)
}

/// The same, listening on `bind`.
fn serving_at(
    bind: &str,
    answer: fn(usize) -> Option<Vec<u8>>,
    close: bool,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> (SocketAddr, Arc<Seen>) {
    let listener = TcpListener::bind(bind).expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen = Arc::new(Seen::default());
    let shared = seen.clone();
    std::thread::spawn(move || {
        for socket in listener.incoming().flatten() {
            shared.connections.fetch_add(1, Ordering::SeqCst);
            let seen = shared.clone();
            let stream: Box<dyn Conn> = match &tls {
                Some(config) => {
                    let Ok(session) = rustls::ServerConnection::new(config.clone()) else {
                        continue;
                    };
                    Box::new(rustls::StreamOwned::new(session, socket))
                }
                None => Box::new(socket),
            };
            std::thread::spawn(move || converse(BufReader::new(stream), &seen, answer, close));
        }
    });
    (addr, seen)
}

/// One connection's requests and answers.
fn converse(
    mut reader: BufReader<Box<dyn Conn>>,
    seen: &Seen,
    answer: fn(usize) -> Option<Vec<u8>>,
    close: bool,
) {
    loop {
        let Some(head) = read_request(&mut reader) else {
            return;
        };
        let n = {
            let mut requests = seen.requests.lock().expect("lock");
            requests.push(head);
            requests.len()
        };
        let Some(response) = answer(n) else {
            let mut sink = Vec::new();
            let _ = reader.read_to_end(&mut sink);
            return;
        };
        let socket = reader.get_mut();
        if socket
            .write_all(&response)
            .and_then(|_| socket.flush())
            .is_err()
            || close
        {
            return;
        }
    }
}

/// A request's head (and its body appended), or `None` when the peer closed.
fn read_request(reader: &mut BufReader<Box<dyn Conn>>) -> Option<String> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let end = line == "\r\n";
        head.push_str(&line);
        if end {
            break;
        }
    }
    let length = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().to_owned())
        })
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    head.push_str(&String::from_utf8_lossy(&body));
    Some(head)
}

fn no_content(_: usize) -> Option<Vec<u8>> {
    Some(b"HTTP/1.1 204 No Content\r\n\r\n".to_vec())
}

fn attempt(endpoint: &str, timeout: Duration) -> Attempt<'_> {
    super::fixture::attempt(endpoint, Bytes::from_static(b"{\"amount\":1}"), timeout)
}

/// Runs `attempts` one after another on a glommio executor with a client whose policy allows
/// `allow`, and answers their outcomes.
fn on_a_shard(allow: &[&str], endpoints: Vec<String>, timeout: Duration) -> Vec<Outcome> {
    on_a_shard_trusting(allow, endpoints, timeout, rustls::RootCertStore::empty())
}

/// The same, the client's TLS trusting `roots`.
fn on_a_shard_trusting(
    allow: &[&str],
    endpoints: Vec<String>,
    timeout: Duration,
    roots: rustls::RootCertStore,
) -> Vec<Outcome> {
    let tls = crate::runtime::http::tls_trusting(roots).expect("tls");
    let tokio = crate::runtime::build_tokio_runtime(1).expect("tokio");
    let bridge = TokioBridge::new(tokio.handle().clone());
    let policy = DestinationPolicy {
        allow: allow.iter().map(|h| (*h).to_owned()).collect(),
    };
    let client =
        WebhookClient::with_resolver(Arc::new(policy), Arc::new(Loopback)).expect("client");
    crate::runtime::run_on_own_executor(move || async move {
        let webhooks = ShardWebhooks::trusting(client, bridge, Some(tls));
        let mut outcomes = Vec::new();
        for endpoint in &endpoints {
            outcomes.push(
                webhooks
                    .send(&attempt(endpoint, timeout), &super::fixture::keys())
                    .await,
            );
        }
        outcomes
    })
    .expect("the shard")
}

const SECOND: Duration = Duration::from_secs(5);

#[test]
fn r_di_5_a_signed_post_is_delivered_and_its_connection_kept_alive() {
    let (addr, seen) = server(no_content, false);
    let endpoint = format!("http://{addr}/hooks/in?x=1");
    let outcomes = on_a_shard(&["127.0.0.1"], vec![endpoint.clone(), endpoint], SECOND);
    for o in &outcomes {
        assert!(o.success, "{o:?}");
        assert_eq!(o.status_code, Some(204));
    }
    assert_eq!(
        seen.connections.load(Ordering::SeqCst),
        1,
        "the second attempt reused the first connection"
    );
    let requests = seen.requests.lock().expect("lock");
    let first = requests[0].to_ascii_lowercase();
    assert!(
        first.starts_with("post /hooks/in?x=1 http/1.1\r\n"),
        "{first}"
    );
    for header in [
        format!("host: {addr}"),
        "x-lerian-event-type: loan.approved".into(),
        "x-lerian-tenant-id: t-1".into(),
        "content-type: application/json".into(),
        "webhook-signature: v1,".into(),
        "x-lerian-signature:".into(),
    ] {
        assert!(first.contains(&header), "{header} in {first}");
    }
    assert!(
        first.ends_with("{\"amount\":1}"),
        "the body as sent: {first}"
    );
}

/// Connections kept for origins no attempt asks for again are let go once idle past their
/// time, and so are the origins' entries.
#[test]
fn r_di_5_idle_connections_to_origins_not_asked_again_are_let_go() {
    let (a, _) = server(no_content, false);
    let (b, _) = server(no_content, false);
    let tokio = crate::runtime::build_tokio_runtime(1).expect("tokio");
    let bridge = TokioBridge::new(tokio.handle().clone());
    let policy = DestinationPolicy {
        allow: ["127.0.0.1".to_owned()].into(),
    };
    let client =
        WebhookClient::with_resolver(Arc::new(policy), Arc::new(Loopback)).expect("client");
    let (kept, left) = crate::runtime::run_on_own_executor(move || async move {
        let webhooks = ShardWebhooks::trusting(client, bridge, None);
        for addr in [a, b] {
            let endpoint = format!("http://{addr}/in");
            let outcome =
                (webhooks.send(&attempt(&endpoint, SECOND), &super::fixture::keys())).await;
            assert!(outcome.success, "{outcome:?}");
        }
        let kept = webhooks.http.origins_kept();
        webhooks
            .http
            .sweep(std::time::Instant::now() + Duration::from_secs(91));
        (kept, webhooks.http.origins_kept())
    })
    .expect("the shard");
    assert_eq!(kept, 2, "one kept connection per origin");
    assert_eq!(left, 0, "none once idle past their time");
}

#[test]
fn r_di_13_a_connection_the_destination_closed_is_not_the_next_attempts_failure() {
    let (addr, seen) = server(no_content, true);
    let endpoint = format!("http://{addr}/hook");
    let outcomes = on_a_shard(
        &["127.0.0.1"],
        vec![endpoint.clone(), endpoint.clone(), endpoint],
        SECOND,
    );
    assert!(outcomes.iter().all(|o| o.success), "{outcomes:?}");
    assert_eq!(seen.connections.load(Ordering::SeqCst), 3);
}

#[test]
fn r_di_13_a_redirect_is_a_failure_and_a_large_body_is_read_only_up_to_the_cap() {
    fn redirect(_: usize) -> Option<Vec<u8>> {
        Some(b"HTTP/1.1 302 Found\r\nlocation: http://127.0.0.1:1/elsewhere\r\ncontent-length: 0\r\n\r\n".to_vec())
    }
    fn huge_failure(_: usize) -> Option<Vec<u8>> {
        let body = vec![b'x'; 10 * 1024 * 1024];
        let mut r = format!(
            "HTTP/1.1 500 Internal Server Error\r\ncontent-length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        r.extend_from_slice(&body);
        Some(r)
    }
    let (moved, _) = server(redirect, false);
    let (broken, _) = server(huge_failure, false);
    let outcomes = on_a_shard(
        &["127.0.0.1"],
        vec![
            format!("http://{moved}/hook"),
            format!("http://{broken}/hook"),
        ],
        SECOND,
    );
    assert_eq!(
        outcomes[0].error_class,
        Some(ErrorClass::Redirect),
        "{:?}",
        outcomes[0]
    );
    assert_eq!(
        outcomes[1].error_class,
        Some(ErrorClass::HttpStatus),
        "{:?}",
        outcomes[1]
    );
    assert_eq!(outcomes[1].status_code, Some(500));
    assert!(outcomes[1].detail.len() <= MAX_RESPONSE_BODY);
}

#[test]
fn r_di_13_a_destination_that_never_answers_times_out() {
    fn silent(_: usize) -> Option<Vec<u8>> {
        None
    }
    let (addr, _) = server(silent, false);
    let started = std::time::Instant::now();
    let outcomes = on_a_shard(
        &["127.0.0.1"],
        vec![format!("http://{addr}/hook")],
        Duration::from_millis(300),
    );
    assert_eq!(
        outcomes[0].error_class,
        Some(ErrorClass::Timeout),
        "{:?}",
        outcomes[0]
    );
    assert!(
        started.elapsed() < SECOND,
        "bounded by the attempt's timeout"
    );
}

#[test]
fn r_di_13_a_refused_connection_is_a_connection_failure() {
    let closed = TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    let outcomes = on_a_shard(
        &["127.0.0.1"],
        vec![format!("http://{closed}/hook")],
        SECOND,
    );
    assert_eq!(
        outcomes[0].error_class,
        Some(ErrorClass::ConnectionFailed),
        "{:?}",
        outcomes[0]
    );
}

/// Every attempt refused by R-SEC-2, and the server never connected to.
fn refused_unconnected(outcomes: &[Outcome], seen: &Seen) {
    for o in outcomes {
        assert_eq!(
            o.error_class,
            Some(ErrorClass::DestinationNotAllowed),
            "{o:?}"
        );
    }
    assert_eq!(
        seen.connections.load(Ordering::SeqCst),
        0,
        "never connected"
    );
}

#[test]
fn r_sec_2_loopback_is_refused_on_the_shard_by_address_and_by_name_without_the_allow_list() {
    let (addr, seen) = server(no_content, false);
    let by_address = format!("http://{addr}/hook");
    let by_name = format!("http://hooks.example:{}/hook", addr.port());
    let outcomes = on_a_shard(&[], vec![by_address, by_name.clone()], SECOND);
    refused_unconnected(&outcomes, &seen);
    // The name allow-listed: resolved (through the bridge), checked, connected.
    let allowed = on_a_shard(&["hooks.example"], vec![by_name], SECOND);
    assert!(allowed[0].success, "{:?}", allowed[0]);
    assert!(seen.requests.lock().expect("lock")[0]
        .to_ascii_lowercase()
        .contains(&format!("host: hooks.example:{}", addr.port())));
}

/// The shard keeps an endpoint it checked (issue 17), never a refusal as a pass: a refused
/// address literal is refused at every attempt, and each attempt to a kept endpoint still has
/// its own delivery id and signatures.
#[test]
fn r_sec_2_a_kept_endpoint_is_refused_at_every_attempt_and_signed_anew_when_allowed() {
    let (addr, seen) = server(no_content, false);
    let refused = format!("http://{addr}/hook");
    let outcomes = on_a_shard(&[], vec![refused.clone(), refused], SECOND);
    refused_unconnected(&outcomes, &seen);

    let allowed = format!("http://{addr}/hook?n=1");
    let outcomes = on_a_shard(&["127.0.0.1"], vec![allowed.clone(), allowed], SECOND);
    assert!(outcomes.iter().all(|o| o.success), "{outcomes:?}");
    let requests = seen.requests.lock().expect("lock");
    let header = |request: &str, name: &str| {
        request
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with(name))
            .map(str::to_owned)
            .unwrap_or_default()
    };
    assert_eq!(requests.len(), 2);
    let ids: Vec<String> = requests
        .iter()
        .map(|r| header(r, "x-lerian-delivery-id:"))
        .collect();
    assert!(!ids[0].is_empty() && ids[0] != ids[1], "{ids:?}");
    assert!(requests.iter().all(|r| r
        .to_ascii_lowercase()
        .starts_with("post /hook?n=1 http/1.1\r\n")));
}

/// A certificate for `hooks.example`, the server's configuration holding it, and a root store
/// trusting it.
fn certificate() -> (Arc<rustls::ServerConfig>, rustls::RootCertStore) {
    certificate_for("hooks.example")
}

/// The same for `name` (a DNS name or an address).
fn certificate_for(name: &str) -> (Arc<rustls::ServerConfig>, rustls::RootCertStore) {
    let made = rcgen::generate_simple_self_signed(vec![name.to_owned()]).expect("cert");
    let cert = made.cert.der().clone();
    let key = rustls_pki_types::PrivateKeyDer::Pkcs8(made.key_pair.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .expect("server config");
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).expect("root");
    (Arc::new(config), roots)
}

#[test]
fn r_di_5_an_https_destination_is_delivered_over_tls_on_the_shard() {
    let (config, roots) = certificate();
    let (addr, seen) = serving(no_content, false, Some(config));
    let endpoint = format!("https://hooks.example:{}/hook", addr.port());
    let outcomes = on_a_shard_trusting(
        &["hooks.example"],
        vec![endpoint.clone(), endpoint],
        SECOND,
        roots,
    );
    assert!(outcomes.iter().all(|o| o.success), "{outcomes:?}");
    assert_eq!(
        seen.connections.load(Ordering::SeqCst),
        1,
        "kept alive over TLS"
    );
}

#[test]
fn r_di_13_an_untrusted_certificate_is_a_tls_failure() {
    let (config, _) = certificate();
    let (addr, seen) = serving(no_content, false, Some(config));
    let endpoint = format!("https://hooks.example:{}/hook", addr.port());
    let outcomes = on_a_shard(&["hooks.example"], vec![endpoint], SECOND);
    assert_eq!(
        outcomes[0].error_class,
        Some(ErrorClass::TlsError),
        "{:?}",
        outcomes[0]
    );
    assert!(
        seen.requests.lock().expect("lock").is_empty(),
        "nothing sent"
    );
}

#[test]
fn r_di_5_an_https_destination_at_an_ipv6_literal_is_checked_against_its_address() {
    let (config, roots) = certificate_for("::1");
    let (addr, _) = serving_at("[::1]:0", no_content, false, Some(config));
    let endpoint = format!("https://[::1]:{}/hook", addr.port());
    let outcomes = on_a_shard_trusting(&["[::1]", "::1"], vec![endpoint], SECOND, roots);
    assert!(outcomes[0].success, "{:?}", outcomes[0]);
}
