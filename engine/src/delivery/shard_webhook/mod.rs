//! A webhook attempt on the shard that leased its job (issue 17): the webhook sink's request
//! (`hub_core::sink::webhook::prepare`: the R-SEC-2 check of an address literal, R-DI-5 headers,
//! R-DI-12 signatures) sent over the shard's own keep-alive pool (`runtime::http`), judged by
//! the sink's own rules (`answered`). Only a new connection to a named host leaves the shard:
//! its name is resolved and every address checked on tokio (R-SEC-2 at connect, as the tokio
//! client does), one bridge round trip per connection, not per attempt.

use std::cell::RefCell;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::{select, Either};
use hub_core::sink::outcome::{ErrorClass, Outcome};
use hub_core::sink::webhook::{
    answered, checked_addresses, checked_endpoint, short, Attempt, AttemptFields, Keys,
    WebhookClient, MAX_RESPONSE_BODY,
};

use crate::fast_hash::FastMap;
use crate::runtime::http::{
    connect, ConnectFailed, Connection, Failed, Fields, Origin, Request, ShardHttp,
};
use crate::runtime::{Alarm, TokioBridge};

/// Most endpoints a shard keeps checked; past it the list starts again (a changed endpoint is
/// a new one, so an old entry is only memory).
const MOST_ENDPOINTS: usize = 4096;

/// An endpoint as this client sends to it, parsed and checked once (`checked_endpoint`: its
/// answer depends only on the endpoint and the process's destination policy) instead of on
/// every attempt (issue 17).
#[derive(Debug)]
struct Target {
    url: url::Url,
    origin: Origin,
    /// The request line's target: path and query.
    path: Box<str>,
    /// The `Host` field's value: host and port as the URL gives them.
    host: Box<str>,
}

impl Target {
    fn of(url: url::Url) -> Result<Self, Outcome> {
        // A parsed URL's path, query, host and port hold no space or control character (they
        // are percent- or punycode-encoded), so they go on the request line and in `Host` as
        // they are; the fragment does not.
        let path = url[url::Position::BeforePath..url::Position::AfterQuery].into();
        let host: Box<str> = url[url::Position::BeforeHost..url::Position::AfterPort].into();
        if !host.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Outcome::refused(
                ErrorClass::InvalidEndpoint,
                "the endpoint's host is not a valid Host field",
            ));
        }
        let origin = Origin {
            host: url.host_str().unwrap_or_default().to_owned(),
            port: url.port_or_known_default().unwrap_or(80),
            tls: url.scheme() == "https",
        };
        Ok(Self {
            url,
            origin,
            path,
            host,
        })
    }
}

/// An attempt's fields as the shard sends them: its `Host`, the hub's `User-Agent`, then the
/// webhook sink's own.
struct ShardFields<'a> {
    host: &'a [u8],
    attempt: &'a AttemptFields,
}

impl Fields for ShardFields<'_> {
    fn write_lines(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"host: ");
        out.extend_from_slice(self.host);
        out.extend_from_slice(b"\r\nuser-agent: lerian-streaming-hub\r\n");
        self.attempt.write_lines(out);
    }
}

/// The webhook client of one shard.
#[derive(Debug)]
pub struct ShardWebhooks {
    http: ShardHttp,
    /// The tokio client: its destination policy and resolver are the ones checked here.
    client: WebhookClient,
    bridge: TokioBridge,
    /// The TLS client for `https` endpoints; without one they keep the tokio client.
    tls: Option<Arc<rustls::ClientConfig>>,
    /// Endpoints already checked.
    targets: RefCell<FastMap<Box<str>, Rc<Target>>>,
}

impl ShardWebhooks {
    /// The client trusting the system's roots, as the tokio client does.
    pub fn new(client: WebhookClient, bridge: TokioBridge) -> Self {
        Self::trusting(client, bridge, crate::runtime::http::system_tls())
    }

    /// The client with its own TLS configuration (tests trust their own authority).
    pub fn trusting(
        client: WebhookClient,
        bridge: TokioBridge,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Self {
        Self {
            http: ShardHttp::default(),
            client,
            bridge,
            tls,
            targets: RefCell::default(),
        }
    }

    /// `endpoint` checked and parsed, once per endpoint while it stays in the list.
    fn target(&self, endpoint: &str) -> Result<Rc<Target>, Outcome> {
        if let Some(t) = self.targets.borrow().get(endpoint) {
            return Ok(t.clone());
        }
        let target = Rc::new(Target::of(checked_endpoint(
            self.client.policy(),
            endpoint,
        )?)?);
        let mut targets = self.targets.borrow_mut();
        if targets.len() >= MOST_ENDPOINTS {
            targets.clear();
        }
        targets.insert(endpoint.into(), target.clone());
        Ok(target)
    }

    /// Whether an endpoint's attempts run here: `http`, and `https` when TLS is set up.
    pub fn carries(&self, endpoint: &str) -> bool {
        let scheme = |s: &str| {
            endpoint
                .get(..s.len())
                .is_some_and(|head| head.eq_ignore_ascii_case(s))
        };
        scheme("http://") || (self.tls.is_some() && scheme("https://"))
    }

    /// Makes exactly one attempt (R-DI-4) within its timeout and classifies it; every failure
    /// is an `Outcome`.
    pub async fn send(&self, a: &Attempt<'_>, keys: &Keys) -> Outcome {
        let started = Instant::now();
        let attempt = self.attempt(a, keys, started);
        // An alarm, not a plain timer: the attempt is polled at each step of its request, and
        // a timer registers itself with the reactor again at every poll.
        let mut alarm = Alarm::after(a.timeout);
        let timer = alarm.rings();
        futures::pin_mut!(attempt, timer);
        match select(attempt, timer).await {
            Either::Left((outcome, _)) => outcome,
            Either::Right(_) => Outcome::failed(
                ErrorClass::Timeout,
                None,
                format!("no answer within {} ms", a.timeout.as_millis()),
                started.elapsed(),
            ),
        }
    }

    async fn attempt(&self, a: &Attempt<'_>, keys: &Keys, started: Instant) -> Outcome {
        let target = match self.target(a.endpoint) {
            Ok(t) => t,
            Err(refused) => return refused,
        };
        // One request, sent again as it is if a kept connection turns out closed: the same
        // ids, signed alike.
        let delivery_id = uuid::Uuid::now_v7();
        let fields = match AttemptFields::of(a, keys, delivery_id) {
            Ok(f) => f,
            Err(refused) => return refused,
        };
        let request = Request {
            target: &target.path,
            fields: &ShardFields {
                host: target.host.as_bytes(),
                attempt: &fields,
            },
            body: &a.body,
        };
        let (url, origin) = (&target.url, &target.origin);
        let connection = match self.http.take_idle(origin) {
            Some(c) => c,
            None => match self.open(origin, url).await {
                Ok(c) => c,
                Err(outcome) => return outcome,
            },
        };
        let reused = connection.reused;
        let mut answer = self
            .http
            .send(origin, connection, &request, MAX_RESPONSE_BODY)
            .await;
        if let Err(failed) = &answer {
            // A kept connection the destination closed while it idled (or the close and the
            // request crossed): once more, on a new connection, the same request. If the
            // destination did take it, it sees the event twice, as at-least-once allows (same
            // ids).
            if reused && failed.closed_under() {
                answer = match self.open(origin, url).await {
                    Ok(fresh) => {
                        self.http
                            .send(origin, fresh, &request, MAX_RESPONSE_BODY)
                            .await
                    }
                    Err(outcome) => return outcome,
                };
            }
        }
        match answer {
            Ok(a) => answered(a.status, &a.body, started.elapsed()),
            Err(failed) => sending_failed(&failed, started.elapsed()),
        }
    }

    /// A new connection to `origin`: an address literal as it is (`prepare` checked it), a
    /// name resolved with every answer checked.
    async fn open(&self, origin: &Origin, url: &url::Url) -> Result<Connection, Outcome> {
        let started = Instant::now();
        let ips = match url.host() {
            Some(url::Host::Ipv4(ip)) => vec![IpAddr::V4(ip)],
            Some(url::Host::Ipv6(ip)) => vec![IpAddr::V6(ip)],
            _ => self.resolve(&origin.host).await?,
        };
        let addresses: Vec<SocketAddr> = ips
            .into_iter()
            .map(|ip| SocketAddr::new(ip, origin.port))
            .collect();
        connect(origin, &addresses, self.tls.as_ref())
            .await
            .map_err(|e| {
                let class = match e {
                    ConnectFailed::Tcp(_) => ErrorClass::ConnectionFailed,
                    ConnectFailed::Tls(_) => ErrorClass::TlsError,
                };
                let detail = short(&format!("connecting to {}: {e}", origin.host));
                Outcome::failed(class, None, detail, started.elapsed())
            })
    }

    async fn resolve(&self, host: &str) -> Result<Vec<IpAddr>, Outcome> {
        let (client, host) = (self.client.clone(), host.to_owned());
        let checked = self.bridge.call(async move {
            checked_addresses(client.policy(), client.resolver().as_ref(), &host)
                .await
                .map_err(|refused| refused.outcome())
        });
        match checked.await {
            Ok(answer) => answer,
            Err(_) => Err(Outcome::refused(
                ErrorClass::ConnectionFailed,
                "the resolver is not running",
            )),
        }
    }
}

/// A request that went wrong after its connection was made.
fn sending_failed(e: &Failed, took: Duration) -> Outcome {
    let class = if e.closed_under() {
        ErrorClass::ConnectionReset
    } else {
        ErrorClass::RequestFailed
    };
    Outcome::failed(class, None, short(&e.to_string()), took)
}

/// The fixed attempt and key of this client's tests and of its bench.
#[cfg(any(test, feature = "conformance"))]
pub mod fixture {
    use std::time::Duration;

    use bytes::Bytes;
    use hub_core::sink::webhook::signature::SigningKey;
    use hub_core::sink::webhook::{Attempt, Keys};

    /// A signing key (a fixed test secret).
    pub fn keys() -> Keys {
        Keys {
            current: SigningKey::from_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
                .expect("a valid fixed secret"),
            previous: None,
        }
    }

    /// An attempt of a fixed event carrying `body` to `endpoint`.
    pub fn attempt(endpoint: &str, body: Bytes, timeout: Duration) -> Attempt<'_> {
        Attempt {
            endpoint,
            event_id: uuid::Uuid::now_v7(),
            event_key: "loan.approved",
            source: "lender",
            tenant: "t-1",
            schema_version: "1.0.0",
            content_type: None,
            traceparent: None,
            tracestate: None,
            body,
            timeout,
            unix_s: 1_800_000_000,
        }
    }
}

#[cfg(test)]
mod tests;
