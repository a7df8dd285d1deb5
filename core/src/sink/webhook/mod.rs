//! One webhook attempt, shared by the engine's delivery workers and the control plane's probes
//! (ping, verify), so a probe goes through the real delivery path (R-CP-5):
//!
//! - the request: POST of the raw payload with the headers of R-DI-5 and the signatures of
//!   R-DI-12 (dual during a rotation overlap);
//! - the client: a keep-alive pool per host, a per-attempt timeout (`timeout_ms`), no redirects
//!   (a 3xx is a failure), the response body read up to a cap, and the destination check of
//!   R-SEC-2 again on every address the name resolves to at connect time (DNS rebinding, R-DI-13);
//! - the outcome: success is a 2xx within the timeout; anything else is classified.

mod fields;
mod header_text;
pub mod key_cache;
pub mod secrets;
pub mod signature;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use uuid::Uuid;

use crate::destination::{refused_because, DestinationPolicy, DnsResolver, ResolveError, Resolver};
use crate::model::SinkKind;

pub use self::fields::AttemptFields;
use self::signature::SigningKey;
use reqwest::header::{HeaderMap, HeaderName};

/// The names of R-DI-5's headers (and W3C trace context), checked at compile time: an HTTP/1
/// name is case-insensitive and goes out in lower case whatever it is written as.
const EVENT_ID: HeaderName = HeaderName::from_static("x-lerian-event-id");
const DELIVERY_ID: HeaderName = HeaderName::from_static("x-lerian-delivery-id");
const EVENT_TYPE: HeaderName = HeaderName::from_static("x-lerian-event-type");
const EVENT_SOURCE: HeaderName = HeaderName::from_static("x-lerian-event-source");
const TENANT_ID: HeaderName = HeaderName::from_static("x-lerian-tenant-id");
const SCHEMA_VERSION: HeaderName = HeaderName::from_static("x-lerian-schema-version");
const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// Most response-body bytes read from a destination; the rest is dropped unread.
pub const MAX_RESPONSE_BODY: usize = 4096;

/// The signing keys of one attempt: the current secret, and the previous one during a rotation
/// overlap.
#[derive(Debug, Clone)]
pub struct Keys {
    pub current: SigningKey,
    pub previous: Option<SigningKey>,
}

/// What one attempt sends. Borrowed: the worker owns the event, the probe its synthetic body.
#[derive(Debug)]
pub struct Attempt<'a> {
    pub endpoint: &'a str,
    /// `ce-id`: stable across attempts (`X-Lerian-Event-Id`, `webhook-id`).
    pub event_id: Uuid,
    /// `<resource>.<event>`, without the producer.
    pub event_key: &'a str,
    pub source: &'a str,
    pub tenant: &'a str,
    pub schema_version: &'a str,
    /// `ce-datacontenttype`, default `application/json`.
    pub content_type: Option<&'a str>,
    /// W3C trace context of the event (R-TR-5), sent as `traceparent` / `tracestate`.
    pub traceparent: Option<&'a str>,
    pub tracestate: Option<&'a str>,
    pub body: Bytes,
    pub timeout: Duration,
    /// The attempt's clock (Unix seconds), signed into the request.
    pub unix_s: i64,
}

use crate::sink::outcome::ErrorClass;
pub use crate::sink::outcome::Outcome;

/// The webhook client: one per process, cheap to clone, pooled per host.
#[derive(Debug, Clone)]
pub struct WebhookClient {
    http: reqwest::Client,
    policy: Arc<DestinationPolicy>,
    resolver: Arc<dyn Resolver>,
}

/// Resolves names and refuses any answer that R-SEC-2 forbids (unless the host is allow-listed),
/// at every new connection, so the address connected to is the address checked: a name that
/// passed at create time and now answers a private address (DNS rebinding) is refused.
#[derive(Debug)]
struct CheckedResolver {
    policy: Arc<DestinationPolicy>,
    resolver: Arc<dyn Resolver>,
}

#[derive(Debug, thiserror::Error)]
#[error("destination not allowed: {0}")]
pub struct NotAllowed(String);

#[derive(Debug, thiserror::Error)]
#[error("{host} could not be resolved: {why:?}")]
pub struct Unresolved {
    host: String,
    why: ResolveError,
}

impl reqwest::dns::Resolve for CheckedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let (policy, resolver) = (self.policy.clone(), self.resolver.clone());
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let ips = checked_addresses(&policy, resolver.as_ref(), &host)
                .await
                .map_err(|refused| match refused {
                    ConnectRefused::NotAllowed(e) => {
                        Box::new(e) as Box<dyn std::error::Error + Send + Sync>
                    }
                    ConnectRefused::Unresolved(e) => Box::new(e),
                })?;
            let addrs = ips.into_iter().map(|ip| SocketAddr::new(ip, 0));
            Ok(Box::new(addrs) as reqwest::dns::Addrs)
        })
    }
}

/// Why a connection was not made: the name resolves to a forbidden address, or does not
/// resolve.
#[derive(Debug, thiserror::Error)]
pub enum ConnectRefused {
    #[error(transparent)]
    NotAllowed(NotAllowed),
    #[error(transparent)]
    Unresolved(Unresolved),
}

impl ConnectRefused {
    /// The attempt's outcome: nothing was sent.
    pub fn outcome(&self) -> Outcome {
        let class = match self {
            Self::NotAllowed(_) => ErrorClass::DestinationNotAllowed,
            Self::Unresolved(_) => ErrorClass::ConnectionFailed,
        };
        Outcome::refused(class, short(&self.to_string()))
    }
}

/// How long a webhook's name may take to resolve at connect.
const CONNECT_DNS_TIMEOUT: Duration = Duration::from_secs(5);

impl WebhookClient {
    /// The client on the system's DNS servers.
    pub fn new(policy: Arc<DestinationPolicy>) -> Result<Self, String> {
        let resolver = Arc::new(DnsResolver::system(CONNECT_DNS_TIMEOUT)?);
        Self::with_resolver(policy, resolver)
    }

    /// The client resolving names through `resolver` (every answer checked at connect).
    pub fn with_resolver(
        policy: Arc<DestinationPolicy>,
        resolver: Arc<dyn Resolver>,
    ) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Arc::new(CheckedResolver {
                policy: policy.clone(),
                resolver: resolver.clone(),
            }))
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(64)
            .tcp_nodelay(true)
            .user_agent("lerian-streaming-hub")
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Self {
            http,
            policy,
            resolver,
        })
    }

    /// The destination policy every attempt of this client is checked against (R-SEC-2).
    pub fn policy(&self) -> &DestinationPolicy {
        &self.policy
    }

    /// The resolver names are resolved through at connect (each answer checked).
    pub fn resolver(&self) -> &Arc<dyn Resolver> {
        &self.resolver
    }

    /// Makes exactly one attempt (R-DI-4) and classifies it. Never panics, never returns an error:
    /// every failure is an `Outcome`.
    pub async fn send(&self, a: &Attempt<'_>, keys: &Keys) -> Outcome {
        let started = Instant::now();
        let request = match prepare(&self.policy, a, keys) {
            Ok(r) => r,
            Err(refused) => return refused,
        };
        let req = self
            .http
            .post(request.url)
            .timeout(a.timeout)
            .headers(request.headers);
        let resp = match req.body(a.body.clone()).send().await {
            Ok(r) => r,
            Err(e) => return classify_error(&e, started.elapsed()),
        };
        let status = resp.status();
        let kept = read_capped(resp).await;
        answered(status.as_u16(), &kept, started.elapsed())
    }
}

/// One attempt's request, checked and signed, for whichever client sends it (this one on tokio,
/// or the engine's on its shards): where it goes, and its headers (R-DI-5, R-DI-12).
#[derive(Debug)]
pub struct Prepared {
    pub url: reqwest::Url,
    pub headers: HeaderMap,
}

/// Checks the endpoint (an http(s) URL; an address literal against R-SEC-2 here, since it never
/// reaches a resolver) and builds the headers, signatures included.
pub fn prepare(
    policy: &DestinationPolicy,
    a: &Attempt<'_>,
    keys: &Keys,
) -> Result<Prepared, Outcome> {
    let url = checked_endpoint(policy, a.endpoint)?;
    Ok(Prepared {
        url,
        headers: attempt_headers(a, keys, Uuid::now_v7())?,
    })
}

/// The endpoint as a URL, if it is an http(s) URL and, when its host is an address literal, an
/// address R-SEC-2 allows (a name is checked where it is resolved). Depends only on the
/// endpoint and the policy, so a client may keep the answer for the endpoint.
pub fn checked_endpoint(
    policy: &DestinationPolicy,
    endpoint: &str,
) -> Result<reqwest::Url, Outcome> {
    let url = match reqwest::Url::parse(endpoint) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => u,
        _ => {
            return Err(Outcome::refused(
                ErrorClass::InvalidEndpoint,
                "not an http(s) URL",
            ))
        }
    };
    if let Some(ip) = literal_ip(&url) {
        let host = url.host_str().unwrap_or_default();
        if let (Some(why), false) = (
            refused_because(ip),
            policy.allows_host(SinkKind::Webhook, host),
        ) {
            return Err(Outcome::refused(
                ErrorClass::DestinationNotAllowed,
                format!("the destination is a {why} address"),
            ));
        }
    }
    Ok(url)
}

/// The headers of one attempt as a map, for the tokio client ([`AttemptFields`] says what
/// they are and when an attempt is refused instead).
pub fn attempt_headers(
    a: &Attempt<'_>,
    keys: &Keys,
    delivery_id: Uuid,
) -> Result<HeaderMap, Outcome> {
    Ok(AttemptFields::of(a, keys, delivery_id)?.to_map())
}

/// The addresses `host` resolves to, refused whole when one is an address R-SEC-2 forbids (unless
/// the host is allow-listed): checked at every new connection, so the address connected to is
/// the address checked.
pub async fn checked_addresses(
    policy: &DestinationPolicy,
    resolver: &dyn Resolver,
    host: &str,
) -> Result<Vec<IpAddr>, ConnectRefused> {
    let ips = resolver.resolve(host, 0).await.map_err(|why| {
        ConnectRefused::Unresolved(Unresolved {
            host: host.to_owned(),
            why,
        })
    })?;
    if !policy.allows_host(SinkKind::Webhook, host) {
        if let Some(why) = ips.iter().find_map(|ip| refused_because(*ip)) {
            return Err(ConnectRefused::NotAllowed(NotAllowed(format!(
                "{host} resolves to a {why} address"
            ))));
        }
    }
    Ok(ips)
}

/// The outcome of an answer: success is a 2xx; a 3xx is a failure (redirects are not followed);
/// anything else keeps a short prefix of the body (`kept`) for the operator. The prefix is made
/// for that failure alone: a delivered attempt's answer is never read as text (issue 17: a
/// lossy decode and a `String` per delivered attempt).
pub fn answered(status: u16, kept: &[u8], took: Duration) -> Outcome {
    match status {
        200..=299 => Outcome::delivered(Some(status), took),
        300..=399 => Outcome::failed(
            ErrorClass::Redirect,
            Some(status),
            "redirects are not followed",
            took,
        ),
        code => Outcome::failed(ErrorClass::HttpStatus, Some(code), body_prefix(kept), took),
    }
}

/// The detail kept of a response body: its first characters, as lossy text.
fn body_prefix(kept: &[u8]) -> String {
    // Short: the detail is for an operator's eye, not an archive of the response.
    String::from_utf8_lossy(kept).chars().take(256).collect()
}

fn literal_ip(url: &reqwest::Url) -> Option<IpAddr> {
    match url.host()? {
        url::Host::Ipv4(v4) => Some(IpAddr::V4(v4)),
        url::Host::Ipv6(v6) => Some(IpAddr::V6(v6)),
        url::Host::Domain(_) => None,
    }
}

/// Reads at most [`MAX_RESPONSE_BODY`] bytes of a response.
async fn read_capped(mut resp: reqwest::Response) -> Vec<u8> {
    let mut kept = Vec::new();
    while kept.len() < MAX_RESPONSE_BODY {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                let room = MAX_RESPONSE_BODY - kept.len();
                kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            _ => break,
        }
    }
    kept
}

fn classify_error(e: &reqwest::Error, took: Duration) -> Outcome {
    let mut source: Option<&dyn std::error::Error> = Some(e);
    let (mut reset, mut tls) = (false, false);
    while let Some(s) = source {
        if s.downcast_ref::<NotAllowed>().is_some() {
            return Outcome::failed(ErrorClass::DestinationNotAllowed, None, s.to_string(), took);
        }
        // The handshake's own error, typed (tokio-rustls wraps it in an io::Error).
        tls |= s.downcast_ref::<rustls::Error>().is_some();
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            reset |= matches!(io.kind(), ConnectionReset | ConnectionAborted | BrokenPipe);
            tls |= rustls_inside(io);
        }
        // hyper's words for a peer that closed the connection instead of answering.
        reset |= s
            .to_string()
            .contains("connection closed before message completed");
        source = s.source();
    }
    // The whole chain: reqwest's own words ("error sending request") name no cause.
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    let class = if e.is_timeout() {
        ErrorClass::Timeout
    } else if reset {
        ErrorClass::ConnectionReset
    } else if tls || text.contains("certificate") || text.contains("tls") || text.contains("TLS") {
        ErrorClass::TlsError
    } else if e.is_connect() {
        ErrorClass::ConnectionFailed
    } else {
        ErrorClass::RequestFailed
    };
    Outcome::failed(class, None, short(&text), took)
}

/// Whether a rustls error is wrapped in `io` (tokio-rustls and hyper nest io::Errors, and an
/// io::Error's `source()` skips the error it wraps).
fn rustls_inside(io: &std::io::Error) -> bool {
    let mut inner = io.get_ref();
    while let Some(e) = inner {
        if e.downcast_ref::<rustls::Error>().is_some() {
            return true;
        }
        inner = e
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref);
    }
    false
}

/// An error's text as an outcome's detail keeps it: its first 256 characters.
pub fn short(text: &str) -> String {
    text.chars().take(256).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{CONTENT_LENGTH, CONTENT_TYPE};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A one-shot HTTP server on loopback answering `response` to every request; answers its
    /// address and how many requests it got.
    async fn answering(response: Vec<u8>) -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = hits.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let response = response.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 65536];
                    let _ = socket.read(&mut buf).await;
                    let _ = socket.write_all(&response).await;
                    let _ = socket.shutdown().await;
                });
            }
        });
        (addr, hits)
    }

    pub(super) fn keys() -> Keys {
        Keys {
            current: SigningKey::from_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
                .expect("key"),
            previous: None,
        }
    }

    pub(super) fn attempt(endpoint: &str) -> Attempt<'_> {
        Attempt {
            endpoint,
            event_id: Uuid::now_v7(),
            event_key: "loan.approved",
            source: "lender",
            tenant: "t-1",
            schema_version: "1.0.0",
            content_type: None,
            traceparent: None,
            tracestate: None,
            body: Bytes::from_static(b"{}"),
            timeout: Duration::from_secs(5),
            unix_s: 1_800_000_000,
        }
    }

    fn loopback_allowed() -> WebhookClient {
        let policy = DestinationPolicy {
            allow: ["127.0.0.1".to_owned()].into_iter().collect(),
        };
        WebhookClient::new(Arc::new(policy)).expect("client")
    }

    #[tokio::test]
    async fn r_di_5_an_attribute_that_is_no_header_value_refuses_the_attempt_for_good_unsent() {
        let (addr, hits) = answering(b"HTTP/1.1 204 No Content\r\n\r\n".to_vec()).await;
        let endpoint = format!("http://{addr}/hook");
        let mut a = attempt(&endpoint);
        a.schema_version = "1.0\u{1}";
        let outcome = loopback_allowed().send(&a, &keys()).await;
        assert_eq!(
            outcome.error_class,
            Some(ErrorClass::InvalidMessage),
            "{outcome:?}"
        );
        assert!(outcome.is_permanent(), "no retry can mend the event");
        assert!(outcome.detail.contains("schema-version"), "{outcome:?}");
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    #[test]
    fn r_tr_5_a_trace_context_that_is_no_header_value_is_left_out_and_the_rest_is_sent() {
        let mut a = attempt("http://127.0.0.1:1/hook");
        a.traceparent = Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        a.tracestate = Some("vendor=a\u{1}b");
        let headers = attempt_headers(&a, &keys(), Uuid::now_v7()).expect("sent");
        assert_eq!(
            headers.get(TRACEPARENT).and_then(|v| v.to_str().ok()),
            a.traceparent
        );
        assert!(headers.get(TRACESTATE).is_none());
    }

    #[test]
    fn r_di_5_an_attempts_request_made_again_carries_the_same_ids_and_signatures() {
        let a = attempt("http://127.0.0.1:1/hook");
        let delivery = Uuid::now_v7();
        let first = attempt_headers(&a, &keys(), delivery).expect("headers");
        let again = attempt_headers(&a, &keys(), delivery).expect("headers");
        assert_eq!(first, again);
        assert_eq!(
            first.get(DELIVERY_ID).and_then(|v| v.to_str().ok()),
            Some(delivery.to_string().as_str())
        );
        assert_eq!(
            first.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()),
            Some("application/json")
        );
        let length: Vec<_> = first.get_all(CONTENT_LENGTH).iter().collect();
        assert_eq!(length, [a.body.len().to_string().as_str()]);
        let other = attempt_headers(&a, &keys(), Uuid::now_v7()).expect("headers");
        assert_ne!(
            first.get(DELIVERY_ID),
            other.get(DELIVERY_ID),
            "a new attempt, a new id"
        );
    }

    #[test]
    fn r_di_13_an_answer_keeps_a_prefix_of_its_body_only_when_it_failed() {
        let took = Duration::from_millis(3);
        let body = "é".repeat(400);
        let delivered = answered(204, body.as_bytes(), took);
        assert!(delivered.success);
        assert_eq!(delivered.detail, "");
        let refused = answered(503, body.as_bytes(), took);
        assert!(!refused.success);
        assert_eq!(refused.status_code, Some(503));
        assert_eq!(refused.detail, "é".repeat(256));
        let redirected = answered(302, body.as_bytes(), took);
        assert_eq!(redirected.error_class, Some(ErrorClass::Redirect));
        assert_eq!(redirected.detail, "redirects are not followed");
    }

    #[tokio::test]
    async fn r_di_13_a_redirect_is_a_failure_and_is_not_followed() {
        let (target, followed) = answering(b"HTTP/1.1 204 No Content\r\n\r\n".to_vec()).await;
        let redirect = format!(
            "HTTP/1.1 302 Found\r\nlocation: http://{target}/elsewhere\r\ncontent-length: 0\r\n\r\n"
        );
        let (addr, _) = answering(redirect.into_bytes()).await;
        let endpoint = format!("http://{addr}/hook");
        let outcome = loopback_allowed().send(&attempt(&endpoint), &keys()).await;
        assert_eq!(
            outcome.error_class,
            Some(ErrorClass::Redirect),
            "{outcome:?}"
        );
        assert_eq!(
            followed.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "the Location is never requested"
        );
    }

    /// Issue 19: a 10 MiB answer, success or failure, is read only up to the cap.
    #[tokio::test]
    async fn r_di_13_a_2xx_is_success_and_a_large_body_is_read_only_up_to_the_cap() {
        let body = vec![b'x'; 10 * 1024 * 1024];
        for (status, success) in [("200 OK", true), ("500 Internal Server Error", false)] {
            let mut response = format!(
                "HTTP/1.1 {status}\r\ncontent-length: {}\r\n\r\n",
                body.len()
            )
            .into_bytes();
            response.extend_from_slice(&body);
            let (addr, _) = answering(response).await;
            let endpoint = format!("http://{addr}/hook");
            let outcome = loopback_allowed().send(&attempt(&endpoint), &keys()).await;
            assert_eq!(outcome.success, success, "{outcome:?}");
            assert!(
                outcome.detail.len() <= MAX_RESPONSE_BODY,
                "the detail keeps a bounded prefix"
            );
        }
    }

    /// The attempt was refused as not allowed, and the receiver never saw a connection.
    fn refused_unconnected(outcome: &Outcome, hits: &std::sync::atomic::AtomicUsize) {
        assert_eq!(
            outcome.error_class,
            Some(ErrorClass::DestinationNotAllowed),
            "{outcome:?}"
        );
        assert_eq!(
            hits.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "never connected"
        );
    }

    #[tokio::test]
    async fn r_di_13_a_loopback_destination_is_refused_at_connect_without_the_allow_list() {
        let (addr, hits) = answering(b"HTTP/1.1 204 No Content\r\n\r\n".to_vec()).await;
        let client = WebhookClient::new(Arc::new(DestinationPolicy::default())).expect("client");
        // A name, so the check that refuses it is the resolver's, at connect time.
        let endpoint = format!("http://localhost:{}/hook", addr.port());
        let outcome = client.send(&attempt(&endpoint), &keys()).await;
        refused_unconnected(&outcome, &hits);
    }

    /// Answers a public address on the first lookup and loopback on every later one: a name
    /// rebound after it was checked.
    #[derive(Debug, Default)]
    struct Rebinding(std::sync::atomic::AtomicUsize);

    #[async_trait::async_trait]
    impl Resolver for Rebinding {
        async fn resolve(&self, _: &str, _: u16) -> Result<Vec<IpAddr>, ResolveError> {
            let n = self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let ip = if n == 0 {
                [93, 184, 216, 34]
            } else {
                [127, 0, 0, 1]
            };
            Ok(vec![IpAddr::from(ip)])
        }
    }

    /// R-SEC-2 (issue 16): the connect-time check reads every answer at every connection, so a
    /// name that resolved to a public address when the endpoint was checked and to loopback
    /// when the attempt connects (DNS rebinding) is refused, never connected to.
    #[tokio::test]
    async fn r_sec_2_a_name_rebound_to_a_private_address_after_the_check_is_refused_at_connect() {
        let (addr, hits) = answering(b"HTTP/1.1 204 No Content\r\n\r\n".to_vec()).await;
        let resolver = Arc::new(Rebinding::default());
        let policy = Arc::new(DestinationPolicy::default());
        let endpoint = format!("https://rebound.example:{}/hook", addr.port());
        crate::destination::check_endpoint(&policy, &*resolver, SinkKind::Webhook, Some(&endpoint))
            .await
            .expect("the first answer is public: the endpoint passes its check");
        let client = WebhookClient::with_resolver(policy, resolver.clone()).expect("client");
        let outcome = client.send(&attempt(&endpoint), &keys()).await;
        refused_unconnected(&outcome, &hits);
        assert!(
            resolver.0.load(std::sync::atomic::Ordering::SeqCst) >= 2,
            "resolved again"
        );
    }

    /// A loopback server that hands every connection to `serve`.
    async fn serving<F, Fut>(serve: F) -> SocketAddr
    where
        F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serve(socket));
            }
        });
        addr
    }

    fn within(endpoint: &str, timeout: Duration) -> Attempt<'_> {
        Attempt {
            timeout,
            ..attempt(endpoint)
        }
    }

    /// Issue 19's destination chaos, R-DI-13: each misbehaviour is classified, and none holds
    /// the attempt past its timeout.
    #[tokio::test]
    async fn r_di_13_misbehaving_destinations_are_classified_within_the_timeout() {
        let limit = Duration::from_millis(800);
        let client = loopback_allowed();

        // 429 with Retry-After: a failure like any non-2xx, retried on the curve.
        let (addr, _) = answering(
            b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 120\r\ncontent-length: 0\r\n\r\n"
                .to_vec(),
        )
        .await;
        let outcome = client
            .send(&within(&format!("http://{addr}/h"), limit), &keys())
            .await;
        assert_eq!(
            (outcome.error_class, outcome.status_code),
            (Some(ErrorClass::HttpStatus), Some(429)),
            "{outcome:?}"
        );

        // Accepts the connection and never reads or answers.
        let silent = serving(|socket| async move {
            tokio::time::sleep(Duration::from_secs(30)).await;
            drop(socket);
        })
        .await;
        let started = Instant::now();
        let outcome = client
            .send(&within(&format!("http://{silent}/h"), limit), &keys())
            .await;
        assert_eq!(
            outcome.error_class,
            Some(ErrorClass::Timeout),
            "{outcome:?}"
        );
        assert!(
            started.elapsed() < limit + Duration::from_secs(1),
            "held past its timeout"
        );

        // Answers 200 at once, then trickles its body a byte a second: the answer counts, the
        // body is cut at the timeout.
        let trickle = serving(|mut socket| async move {
            let mut buf = vec![0u8; 65536];
            let _ = socket.read(&mut buf).await;
            let _ = socket
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n")
                .await;
            for _ in 0..100 {
                if socket.write_all(b"x").await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
        .await;
        let started = Instant::now();
        let outcome = client
            .send(&within(&format!("http://{trickle}/h"), limit), &keys())
            .await;
        assert!(outcome.success, "{outcome:?}");
        assert!(
            started.elapsed() < limit + Duration::from_secs(1),
            "held past its timeout"
        );

        // Speaks plain HTTP where TLS is expected: a TLS failure, not a delivery.
        let plain = serving(|mut socket| async move {
            let mut buf = vec![0u8; 65536];
            let _ = socket.read(&mut buf).await;
            let _ = socket
                .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                .await;
        })
        .await;
        let outcome = client
            .send(&within(&format!("https://{plain}/h"), limit), &keys())
            .await;
        assert_eq!(
            outcome.error_class,
            Some(ErrorClass::TlsError),
            "{outcome:?}"
        );
    }
}
