//! Webhook receivers for the delivery tests, on loopback: a scripted raw-TCP server that answers
//! each request as its script says (a status, a timeout, a connection reset), and records every
//! request with its headers and body. Signatures are checked with the Standard Webhooks library,
//! not with the hub's own code.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the receiver does with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// Answer with this status.
    Status(u16),
    /// Read the request, then say nothing for this long and close.
    Stall(Duration),
    /// Read the request, then reset the connection (RST).
    Reset,
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    /// Lower-cased names.
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
    pub act: Act,
}

impl Received {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map_or("", String::as_str)
    }

    /// Verifies the Standard Webhooks signature with the `standardwebhooks` crate.
    pub fn verifies_with(&self, secret: &str) -> bool {
        let Ok(wh) = standardwebhooks::Webhook::new(secret) else {
            return false;
        };
        let mut map = http::HeaderMap::new();
        for (k, v) in &self.headers {
            if let (Ok(k), Ok(v)) = (
                http::HeaderName::try_from(k.as_str()),
                http::HeaderValue::try_from(v.as_str()),
            ) {
                map.insert(k, v);
            }
        }
        wh.verify(&self.body, &map).is_ok()
    }
}

/// A scripted receiver: requests take the script's acts in order; once it is empty, `then`.
#[derive(Debug, Clone)]
pub struct Receiver {
    pub port: u16,
    script: Arc<Mutex<VecDeque<Act>>>,
    then: Arc<Mutex<Act>>,
    log: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    pub async fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let r = Receiver {
            port,
            script: Arc::default(),
            then: Arc::new(Mutex::new(Act::Status(204))),
            log: Arc::default(),
        };
        let server = r.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let server = server.clone();
                tokio::spawn(async move { server.serve(stream).await });
            }
        });
        r
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Acts for the next requests, then `then` for every one after.
    pub fn script(&self, acts: &[Act], then: Act) {
        let mut s = self.script.lock().expect("script");
        s.clear();
        s.extend(acts.iter().copied());
        *self.then.lock().expect("then") = then;
    }

    pub fn received(&self) -> Vec<Received> {
        self.log.lock().expect("log").clone()
    }

    fn next_act(&self) -> Act {
        let next = self.script.lock().expect("script").pop_front();
        next.unwrap_or_else(|| *self.then.lock().expect("then"))
    }

    async fn serve(&self, mut stream: TcpStream) {
        // One request per connection (answers say `connection: close`), so every attempt is
        // scripted on its own.
        let Some((path, headers, body)) = read_request(&mut stream).await else {
            return;
        };
        let act = self.next_act();
        self.log.lock().expect("log").push(Received {
            path,
            headers,
            body,
            act,
        });
        match act {
            Act::Status(code) => {
                let reply = format!(
                    "HTTP/1.1 {code} Scripted\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"
                );
                let _ = stream.write_all(reply.as_bytes()).await;
                let _ = stream.shutdown().await;
            }
            Act::Stall(d) => tokio::time::sleep(d).await,
            Act::Reset => {
                // Linger zero: the close sends RST at once (no blocking, which is what the
                // deprecation warns about for a non-zero linger).
                #[allow(deprecated)]
                let _ = stream.set_linger(Some(Duration::ZERO));
                drop(stream);
            }
        }
    }
}

/// Reads one HTTP/1.1 request with a `content-length` body.
async fn read_request(
    stream: &mut TcpStream,
) -> Option<(String, HashMap<String, String>, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let path = lines.next()?.split(' ').nth(1)?.to_owned();
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(len);
    Some((path, headers, body))
}

/// A keep-alive receiver for volume: answers 204 after a per-path delay, counts deliveries per
/// (path, event id) and tracks how many requests each path holds at once.
#[derive(Debug, Clone, Default)]
pub struct Counter {
    pub port: u16,
    state: Arc<CounterState>,
}

#[derive(Debug, Default)]
struct CounterState {
    counts: Mutex<HashMap<(String, String), u32>>,
    delays: Mutex<HashMap<String, Duration>>,
    /// path → (in flight now, most at once, finished).
    load: Mutex<HashMap<String, (u32, u32, u64)>>,
}

impl Counter {
    pub async fn start() -> Counter {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let c = Counter {
            port,
            state: Arc::default(),
        };
        let state = c.state.clone();
        let app = axum::Router::new().fallback(
            move |uri: axum::http::Uri, headers: axum::http::HeaderMap| {
                let state = state.clone();
                async move { state.receive(uri.path(), &headers).await }
            },
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
        c
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Every request to `path` waits `d` before its answer.
    pub fn delay(&self, path: &str, d: Duration) {
        self.state
            .delays
            .lock()
            .expect("delays")
            .insert(path.to_owned(), d);
    }

    /// Deliveries per (path, event id), pings left out.
    pub fn counts(&self) -> HashMap<(String, String), u32> {
        self.state.counts.lock().expect("counts").clone()
    }

    /// How many (path, event id) pairs arrived: `counts().len()` without the copy, which a test
    /// polling a hundred thousand pairs would make every tenth of a second while the receiver
    /// waits for the lock.
    pub fn distinct(&self) -> usize {
        self.state.counts.lock().expect("counts").len()
    }

    /// (most requests at once, requests finished) of `path`.
    pub fn load(&self, path: &str) -> (u32, u64) {
        let load = self.state.load.lock().expect("load");
        load.get(path)
            .map_or((0, 0), |(_, max, done)| (*max, *done))
    }
}

impl CounterState {
    async fn receive(&self, path: &str, headers: &axum::http::HeaderMap) -> axum::http::StatusCode {
        let text = |n: &str| {
            headers
                .get(n)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        {
            let mut load = self.load.lock().expect("load");
            let entry = load.entry(path.to_owned()).or_default();
            entry.0 += 1;
            entry.1 = entry.1.max(entry.0);
        }
        let delay = self.delays.lock().expect("delays").get(path).copied();
        if let Some(d) = delay {
            tokio::time::sleep(d).await;
        }
        if text("x-lerian-event-type") != "destination.ping" {
            *self
                .counts
                .lock()
                .expect("counts")
                .entry((path.to_owned(), text("x-lerian-event-id")))
                .or_default() += 1;
        }
        let mut load = self.load.lock().expect("load");
        let entry = load.entry(path.to_owned()).or_default();
        entry.0 -= 1;
        entry.2 += 1;
        axum::http::StatusCode::NO_CONTENT
    }
}
