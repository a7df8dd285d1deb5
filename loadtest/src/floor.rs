//! The floor of what a delivered event costs at a steady rate, measured in the same run (issue
//! 17): a process of its own that does, for each record, the least the hub must do for it — take
//! it from Kafka, append it to a file and sync it (an event is durable before it is delivered),
//! POST it on a kept-alive connection and read the answer — on one thread, librdkafka's own
//! threads beside it, with nothing else: no verdict, no seq, no job, no signature, no hand-off
//! between threads. Its CPU per record is the limit the hub's CPU per event is compared with at
//! that rate.
//!
//! The probe is this binary run again with [`CHILD_FLAG`], so its CPU is its own process's and the
//! load generator's and receivers' are not counted in it (nor are they in the hub's).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rdkafka::message::Message;
use rdkafka::producer::FutureProducer;
use serde::{Deserialize, Serialize};

use crate::kafka::{self, Budget};
use crate::receiver::Receivers;
use crate::workload::Generator;

/// The first argument that makes `loadtest` the probe instead of a load test.
pub const CHILD_FLAG: &str = "--floor-child";

/// How long the probe's paced production lasts.
pub const SECONDS: u64 = 10;

/// What the probe did and what it cost, from its first record to its last.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FloorFigures {
    /// The rate the records were produced at.
    pub rate: u64,
    pub records: u64,
    /// Whether each record was POSTed (delivery's floor) or only made durable (ingest's).
    pub posted: bool,
    pub seconds: f64,
    /// Every thread of the probe (user + system, from `/proc/self/task/*/schedstat`).
    pub cpu_seconds: f64,
    /// librdkafka's threads (fetching, decoding, queueing).
    pub kafka_threads_seconds: f64,
    /// The probe's thread taking records from librdkafka's queue.
    pub taking_seconds: f64,
    /// Appending each record and syncing it (`fdatasync`), on whichever thread did it.
    pub sync_seconds: f64,
    /// POSTing each record and reading the answer.
    pub post_seconds: f64,
}

impl FloorFigures {
    /// Whether a thread of its own synced what the main thread appended: ingest's floor over a
    /// backlog.
    pub fn pipelined(&self) -> bool {
        self.rate == 0 && !self.posted
    }

    /// CPU per record, in microseconds.
    pub fn per_record_us(&self, seconds: f64) -> f64 {
        seconds * 1e6 / self.records.max(1) as f64
    }
}

/// What the parent tells the probe.
#[derive(Debug, Serialize, Deserialize)]
struct Spec {
    brokers: String,
    topic: String,
    partitions: i32,
    records: u64,
    /// Where to POST each record; none for ingest's floor (consume, append, sync).
    url: Option<String>,
    dir: PathBuf,
    /// Records a second (paced), or 0: the whole topic is there already (backlog), and the
    /// probe syncs once per group of what librdkafka has at hand, as a group commit does.
    rate: u64,
}

/// Runs the probe at `rate` for [`SECONDS`] on a topic of its own, records from `generator`.
pub async fn measure_paced(
    brokers: &str,
    partitions: i32,
    rate: u64,
    producer: &FutureProducer,
    generator: &mut Generator,
) -> anyhow::Result<FloorFigures> {
    let topic = format!("loadtest-floor-{}", uuid::Uuid::now_v7().simple());
    kafka::create_topic(brokers, &topic, partitions).await?;
    let records = rate * SECONDS;
    let probe = Probe::start(brokers, &topic, partitions, records, rate, true).await?;
    kafka::produce(
        producer,
        &topic,
        generator,
        move |elapsed, n| paced(rate, records, elapsed, n),
        |_| {},
    )
    .await?;
    let figures = probe.finish().await;
    let _ = kafka::delete_topics(brokers, &[topic]).await;
    figures
}

/// Runs the probe over the first `records` of a topic already written (a backlog run's own);
/// with `post`, each record is also POSTed (a delivery run's floor), else only made durable
/// (ingest's).
pub async fn measure_backlog(
    brokers: &str,
    topic: &str,
    partitions: i32,
    records: u64,
    post: bool,
) -> anyhow::Result<FloorFigures> {
    Probe::start(brokers, topic, partitions, records, 0, post)
        .await?
        .finish()
        .await
}

/// The probe's process, its receiver and its data directory, while it runs.
struct Probe {
    child: std::process::Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
    _receivers: Receivers,
    _dir: tempfile::TempDir,
}

impl Probe {
    /// Starts the probe and waits until it has its partitions.
    async fn start(
        brokers: &str,
        topic: &str,
        partitions: i32,
        records: u64,
        rate: u64,
        post: bool,
    ) -> anyhow::Result<Self> {
        let receivers = Receivers::start(Default::default()).await?;
        let dir = tempfile::tempdir()?;
        let spec = Spec {
            brokers: brokers.to_owned(),
            topic: topic.to_owned(),
            partitions,
            records,
            url: post.then(|| receivers.url("floor")),
            dir: dir.path().to_owned(),
            rate,
        };
        let mut child = crate::sched::as_a_peer(&mut Command::new(std::env::current_exe()?))
            .arg(CHILD_FLAG)
            .arg(serde_json::to_string(&spec)?)
            .stdout(Stdio::piped())
            .spawn()?;
        let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        let lines = tokio::task::spawn_blocking(move || {
            let first = lines.next().transpose()?;
            anyhow::ensure!(first.as_deref() == Some("ready"), "floor probe: {first:?}");
            Ok(lines)
        })
        .await??;
        Ok(Self {
            child,
            lines,
            _receivers: receivers,
            _dir: dir,
        })
    }

    /// Waits for the probe's figures.
    async fn finish(self) -> anyhow::Result<FloorFigures> {
        let Self {
            mut child,
            mut lines,
            _receivers,
            _dir,
        } = self;
        tokio::task::spawn_blocking(move || -> anyhow::Result<FloorFigures> {
            let line = lines
                .next()
                .transpose()?
                .ok_or_else(|| anyhow::anyhow!("the floor probe said nothing"))?;
            let status = child.wait()?;
            anyhow::ensure!(status.success(), "floor probe: {status}");
            Ok(serde_json::from_str(&line)?)
        })
        .await?
    }
}

/// `rate` records a second until `records`.
fn paced(rate: u64, records: u64, elapsed: Duration, n: u64) -> Budget {
    if n >= records {
        return Budget::Done;
    }
    let due = ((elapsed.as_secs_f64() * rate as f64) as u64).min(records);
    if due > n {
        Budget::Send(due - n)
    } else {
        Budget::Wait(Duration::from_millis(2))
    }
}

/// The probe's process: `args` is what follows [`CHILD_FLAG`].
pub fn child_main(args: &[String]) -> anyhow::Result<()> {
    let spec: Spec = serde_json::from_str(args.first().map_or("", String::as_str))?;
    let consumer = kafka::from_the_start(
        &spec.brokers,
        &spec.topic,
        spec.partitions,
        "loadtest-floor",
    )?;
    let _ = consumer.poll(Duration::from_millis(200));
    let mut file = std::fs::File::create(spec.dir.join("floor.log"))?;
    let mut http = spec.url.as_deref().map(Post::connect).transpose()?;
    let clock = ThreadClock::open()?;
    #[allow(clippy::print_stdout)] // the probe answers its parent on standard output
    {
        println!("ready");
    }
    std::io::stdout().flush()?;

    // Paced, each record is synced alone (they come 1/rate apart); from a backlog, once per
    // group of what librdkafka has at hand, as the hub's group commit does.
    let (group_max, limit) = match spec.rate {
        0 => (1000, Duration::from_secs(300)),
        _ => (1, Duration::from_secs(SECONDS * 3 + 30)),
    };
    let deadline = Instant::now() + limit;
    // Ingest's floor over a backlog overlaps consuming and syncing, as the hub's shards and
    // commit thread do: the sync thread syncs whatever was appended since its last sync.
    let syncer = match (spec.rate, &spec.url) {
        (0, None) => Some(Syncer::start(file.try_clone()?)),
        _ => None,
    };
    // CPU of the main thread appending and syncing (or handing the sync over), and POSTing.
    let (mut count, mut durable, mut post) = (0u64, 0u64, 0u64);
    let mut first: Option<(Instant, u64, u64)> = None;
    let mut group = Vec::with_capacity(group_max);
    while count < spec.records && Instant::now() < deadline {
        let Some(message) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        if first.is_none() {
            first = Some((Instant::now(), process_cpu_ns()?, clock.now()?));
        }
        group.clear();
        group.push(message?);
        while group.len() < group_max && count + (group.len() as u64) < spec.records {
            match consumer.poll(Duration::ZERO) {
                Some(m) => group.push(m?),
                None => break,
            }
        }
        let before = clock.now()?;
        for m in &group {
            file.write_all(m.payload().unwrap_or_default())?;
        }
        match &syncer {
            Some(syncer) => syncer.appended(count + group.len() as u64),
            None => file.sync_data()?,
        }
        let synced = clock.now()?;
        if let Some(http) = http.as_mut() {
            for m in &group {
                http.send(m.payload().unwrap_or_default())?;
            }
        }
        let posted = clock.now()?;
        durable += synced - before;
        post += posted - synced;
        count += group.len() as u64;
    }
    let syncing = match syncer {
        Some(syncer) => syncer.finish()?,
        None => 0,
    };
    let (at, cpu0, main0) = first.ok_or_else(|| anyhow::anyhow!("no record reached the probe"))?;
    let (cpu, main) = (process_cpu_ns()? - cpu0, clock.now()? - main0);
    let s = |ns: u64| ns as f64 / 1e9;
    let figures = FloorFigures {
        rate: spec.rate,
        records: count,
        posted: spec.url.is_some(),
        seconds: at.elapsed().as_secs_f64(),
        cpu_seconds: s(cpu),
        kafka_threads_seconds: s(cpu.saturating_sub(main + syncing)),
        taking_seconds: s(main.saturating_sub(durable + post)),
        sync_seconds: s(durable + syncing),
        post_seconds: s(post),
    };
    #[allow(clippy::print_stdout)]
    {
        println!("{}", serde_json::to_string(&figures)?);
    }
    Ok(())
}

/// Syncs, on a thread of its own, whatever was appended since its last sync.
struct Syncer {
    appended: Arc<(Mutex<(u64, bool)>, Condvar)>,
    thread: std::thread::JoinHandle<anyhow::Result<u64>>,
}

impl Syncer {
    fn start(file: std::fs::File) -> Self {
        let appended: Arc<(Mutex<(u64, bool)>, Condvar)> = Arc::default();
        let shared = appended.clone();
        let thread = std::thread::spawn(move || -> anyhow::Result<u64> {
            let clock = ThreadClock::open()?;
            let started = clock.now()?;
            let (lock, wake) = &*shared;
            let mut synced = 0;
            loop {
                let (target, done) = {
                    let mut g = lock.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
                    while g.0 == synced && !g.1 {
                        g = wake.wait(g).map_err(|_| anyhow::anyhow!("poisoned"))?;
                    }
                    *g
                };
                if target > synced {
                    file.sync_data()?;
                    synced = target;
                } else if done {
                    return Ok(clock.now()? - started);
                }
            }
        });
        Self { appended, thread }
    }

    /// `n` records are appended in all.
    fn appended(&self, n: u64) {
        if let Ok(mut g) = self.appended.0.lock() {
            g.0 = n;
        }
        self.appended.1.notify_one();
    }

    /// Waits until everything appended is synced; the sync thread's CPU in nanoseconds.
    fn finish(self) -> anyhow::Result<u64> {
        if let Ok(mut g) = self.appended.0.lock() {
            g.1 = true;
        }
        self.appended.1.notify_one();
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("the sync thread panicked"))?
    }
}

/// Nanoseconds on a CPU of every thread of this process (`schedstat`'s first field).
fn process_cpu_ns() -> anyhow::Result<u64> {
    let mut total = 0;
    for task in std::fs::read_dir("/proc/self/task")? {
        let text = std::fs::read_to_string(task?.path().join("schedstat"))?;
        total += first_field(&text)?;
    }
    Ok(total)
}

fn first_field(schedstat: &str) -> anyhow::Result<u64> {
    Ok(schedstat
        .split_whitespace()
        .next()
        .ok_or_else(|| anyhow::anyhow!("empty schedstat"))?
        .parse()?)
}

/// The calling thread's CPU in nanoseconds, read again from one open file (a read costs one
/// `pread`, a few microseconds, counted in the figures it brackets).
struct ThreadClock(std::fs::File);

impl ThreadClock {
    fn open() -> anyhow::Result<Self> {
        Ok(Self(std::fs::File::open("/proc/thread-self/schedstat")?))
    }

    fn now(&self) -> anyhow::Result<u64> {
        let mut buf = [0u8; 128];
        let n = self.0.read_at(&mut buf, 0)?;
        first_field(std::str::from_utf8(&buf[..n])?)
    }
}

/// A kept-alive HTTP/1.1 connection that POSTs a body and reads the whole answer.
struct Post {
    stream: TcpStream,
    head: String,
    request: Vec<u8>,
    answer: Vec<u8>,
}

impl Post {
    fn connect(url: &str) -> anyhow::Result<Self> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| anyhow::anyhow!("not an http URL: {url}"))?;
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let stream = TcpStream::connect(authority)?;
        stream.set_nodelay(true)?;
        Ok(Self {
            stream,
            head: format!(
                "POST /{path} HTTP/1.1\r\nhost: {authority}\r\ncontent-type: application/json\r\n"
            ),
            request: Vec::new(),
            answer: Vec::new(),
        })
    }

    fn send(&mut self, body: &[u8]) -> anyhow::Result<()> {
        self.request.clear();
        self.request.extend_from_slice(self.head.as_bytes());
        self.request
            .extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
        self.request.extend_from_slice(body);
        self.stream.write_all(&self.request)?;
        self.read_answer()
    }

    /// Reads the status line and headers, then as many body bytes as `content-length` says.
    fn read_answer(&mut self) -> anyhow::Result<()> {
        self.answer.clear();
        let mut chunk = [0u8; 4096];
        let end = loop {
            if let Some(i) = find(&self.answer, b"\r\n\r\n") {
                break i + 4;
            }
            let n = self.stream.read(&mut chunk)?;
            anyhow::ensure!(n > 0, "the receiver closed the connection");
            self.answer.extend_from_slice(&chunk[..n]);
        };
        let head = std::str::from_utf8(&self.answer[..end])?.to_ascii_lowercase();
        anyhow::ensure!(
            head.starts_with("http/1.1 2"),
            "the receiver answered {}",
            head.lines().next().unwrap_or("")
        );
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(Ok(0), |v| v.trim().parse())?;
        let mut have = self.answer.len() - end;
        while have < length {
            let n = self.stream.read(&mut chunk)?;
            anyhow::ensure!(n > 0, "the receiver closed the connection");
            have += n;
        }
        Ok(())
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pace_sends_what_is_due_and_stops_at_the_count() {
        assert!(matches!(
            paced(500, 5000, Duration::from_millis(10), 0),
            Budget::Send(5)
        ));
        assert!(matches!(
            paced(500, 5000, Duration::from_millis(10), 5),
            Budget::Wait(_)
        ));
        assert!(matches!(
            paced(500, 5000, Duration::from_secs(60), 4990),
            Budget::Send(10)
        ));
        assert!(matches!(
            paced(500, 5000, Duration::from_secs(60), 5000),
            Budget::Done
        ));
    }

    /// The probe's client against the load test's own receiver: answers read whole, one after
    /// another on one connection.
    #[tokio::test]
    async fn the_probe_posts_on_one_kept_alive_connection() {
        let r = Receivers::start(Default::default())
            .await
            .expect("receivers");
        let url = r.url("floor");
        tokio::task::spawn_blocking(move || {
            let mut post = Post::connect(&url).expect("connect");
            for _ in 0..3 {
                post.send(b"{\"n\":1}").expect("post");
            }
        })
        .await
        .expect("join");
    }
}
