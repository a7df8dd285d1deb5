//! Candidates for the embedded store (issue 17: "the embedded store appends"), on the hub's write
//! pattern, each durable at every commit (synced to disk), so the figures say what one group
//! commit and one delivery step cost on each engine:
//! - `redb`: today's store (a copy-on-write B-tree): one write transaction over four tables;
//! - `fjall`: an LSM tree with a journal: one atomic batch over four keyspaces, journal synced;
//! - `log`: an append-only file: the group encoded into one buffer, appended, `fdatasync`ed; the
//!   dedup marks, heads and jobs live in memory (rebuilt from the file at start, not measured).
//!
//! The pattern: a group of `n` events of 100 tenants (512-byte payload), each with its dedup mark,
//! its tenant's next seq and one job; then a delivery step rewriting `n` jobs (a lease or an
//! outcome). At 500 events/s a group commit holds about 3 events; under a backlog, hundreds.
//! These are the engines alone, without the hub's code around them (`embedded_store` measures
//! that for redb).

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use criterion::measurement::Measurement;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use uuid::Uuid;

mod cpu_time;
use cpu_time::CpuTime;

const TENANTS: usize = 100;
const PAYLOAD: usize = 512;

/// One event of a group, as the store would key it.
struct Row {
    tenant: usize,
    id: Uuid,
    payload: Vec<u8>,
}

fn rows(n: usize, start: usize) -> Vec<Row> {
    (0..n)
        .map(|i| Row {
            tenant: (start + i) % TENANTS,
            id: Uuid::now_v7(),
            payload: vec![b'x'; PAYLOAD],
        })
        .collect()
}

fn tenant_key(tenant: usize) -> Vec<u8> {
    format!("tenant-{tenant:04}").into_bytes()
}

fn seq_key(tenant: usize, seq: u64) -> Vec<u8> {
    let mut k = tenant_key(tenant);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

fn dedup_key(tenant: usize, id: &Uuid) -> Vec<u8> {
    let mut k = tenant_key(tenant);
    k.extend_from_slice(id.as_bytes());
    k
}

/// A job record's size in the hub (ids, due time, attempt count, lane).
const JOB: [u8; 64] = [7; 64];

/// What every candidate does.
trait Candidate {
    /// Stores a group durably: events, dedup marks, heads, one job each.
    fn write_group(&mut self, rows: &[Row]);
    /// Rewrites the jobs of `rows` durably (a lease step or outcomes).
    fn step(&mut self, rows: &[Row]);
}

struct Redb {
    db: redb::Database,
    heads: HashMap<usize, u64>,
}

const EVENTS: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("events");
const DEDUP: redb::TableDefinition<&[u8], u64> = redb::TableDefinition::new("dedup");
const HEADS: redb::TableDefinition<&[u8], u64> = redb::TableDefinition::new("heads");
const JOBS: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("jobs");

impl Candidate for Redb {
    fn write_group(&mut self, rows: &[Row]) {
        let txn = self.db.begin_write().expect("txn");
        {
            let mut events = txn.open_table(EVENTS).expect("events");
            let mut dedup = txn.open_table(DEDUP).expect("dedup");
            let mut heads = txn.open_table(HEADS).expect("heads");
            let mut jobs = txn.open_table(JOBS).expect("jobs");
            for r in rows {
                let seq = self.heads.entry(r.tenant).or_default();
                *seq += 1;
                events
                    .insert(seq_key(r.tenant, *seq).as_slice(), r.payload.as_slice())
                    .expect("event");
                dedup
                    .insert(dedup_key(r.tenant, &r.id).as_slice(), *seq)
                    .expect("dedup");
                heads
                    .insert(tenant_key(r.tenant).as_slice(), *seq)
                    .expect("head");
                jobs.insert(r.id.as_bytes().as_slice(), JOB.as_slice())
                    .expect("job");
            }
        }
        txn.commit().expect("commit");
    }

    fn step(&mut self, rows: &[Row]) {
        let txn = self.db.begin_write().expect("txn");
        {
            let mut jobs = txn.open_table(JOBS).expect("jobs");
            for r in rows {
                jobs.insert(r.id.as_bytes().as_slice(), JOB.as_slice())
                    .expect("job");
            }
        }
        txn.commit().expect("commit");
    }
}

struct Fjall {
    db: fjall::Database,
    events: fjall::Keyspace,
    dedup: fjall::Keyspace,
    heads_ks: fjall::Keyspace,
    jobs: fjall::Keyspace,
    heads: HashMap<usize, u64>,
}

impl Fjall {
    fn open(dir: &Path) -> Self {
        let db = fjall::Database::builder(dir).open().expect("fjall");
        let ks = |name: &str| {
            db.keyspace(name, fjall::KeyspaceCreateOptions::default)
                .expect("keyspace")
        };
        Self {
            events: ks("events"),
            dedup: ks("dedup"),
            heads_ks: ks("heads"),
            jobs: ks("jobs"),
            db,
            heads: HashMap::new(),
        }
    }

    fn sync(&self) {
        self.db
            .persist(fjall::PersistMode::SyncData)
            .expect("persist");
    }
}

impl Candidate for Fjall {
    fn write_group(&mut self, rows: &[Row]) {
        let mut batch = self.db.batch();
        for r in rows {
            let seq = self.heads.entry(r.tenant).or_default();
            *seq += 1;
            batch.insert(&self.events, seq_key(r.tenant, *seq), &r.payload);
            batch.insert(&self.dedup, dedup_key(r.tenant, &r.id), seq.to_be_bytes());
            batch.insert(&self.heads_ks, tenant_key(r.tenant), seq.to_be_bytes());
            batch.insert(&self.jobs, r.id.as_bytes(), JOB);
        }
        batch.commit().expect("commit");
        self.sync();
    }

    fn step(&mut self, rows: &[Row]) {
        let mut batch = self.db.batch();
        for r in rows {
            batch.insert(&self.jobs, r.id.as_bytes(), JOB);
        }
        batch.commit().expect("commit");
        self.sync();
    }
}

/// An append-only file with its indexes in memory.
struct Log {
    file: std::fs::File,
    buffer: Vec<u8>,
    heads: HashMap<usize, u64>,
    dedup: HashMap<(usize, Uuid), u64>,
    jobs: HashMap<Uuid, [u8; 64]>,
}

impl Log {
    fn open(dir: &Path) -> Self {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("hub.log"))
            .expect("log");
        Self {
            file,
            buffer: Vec::new(),
            heads: HashMap::new(),
            dedup: HashMap::new(),
            jobs: HashMap::new(),
        }
    }

    /// One record: kind, length, bytes.
    fn record(&mut self, kind: u8, parts: &[&[u8]]) {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        self.buffer.push(kind);
        self.buffer
            .extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes());
        for p in parts {
            self.buffer.extend_from_slice(p);
        }
    }

    fn flush(&mut self) {
        self.file.write_all(&self.buffer).expect("append");
        self.file.sync_data().expect("fdatasync");
        self.buffer.clear();
    }
}

impl Candidate for Log {
    fn write_group(&mut self, rows: &[Row]) {
        for r in rows {
            let seq = self.heads.entry(r.tenant).or_default();
            *seq += 1;
            let seq = *seq;
            self.dedup.insert((r.tenant, r.id), seq);
            self.jobs.insert(r.id, JOB);
            let key = seq_key(r.tenant, seq);
            self.record(1, &[&key, r.id.as_bytes(), &JOB, &r.payload]);
        }
        self.flush();
    }

    fn step(&mut self, rows: &[Row]) {
        for r in rows {
            self.jobs.insert(r.id, JOB);
            self.record(2, &[r.id.as_bytes(), &JOB]);
        }
        self.flush();
    }
}

fn measure<M: Measurement>(c: &mut Criterion<M>, name: &str, candidate: &mut dyn Candidate) {
    let mut group = c.benchmark_group("store_candidates");
    for n in [3usize, 100] {
        group.throughput(Throughput::Elements(n as u64));
        let mut start = 0;
        group.bench_function(format!("{name}_group_commit_{n}_events"), |b| {
            b.iter(|| {
                let rows = rows_after(n, &mut start);
                candidate.write_group(&rows);
            })
        });
        let stored = rows(n, 0);
        candidate.write_group(&stored);
        group.bench_function(format!("{name}_delivery_step_{n}_jobs"), |b| {
            b.iter(|| candidate.step(&stored))
        });
    }
    group.finish();
}

fn rows_after(n: usize, start: &mut usize) -> Vec<Row> {
    *start += n;
    rows(n, *start)
}

/// Every candidate, each in a fresh directory on the disk the hub's data lives on by default.
fn candidates<M: Measurement>(c: &mut Criterion<M>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut redb = Redb {
        db: redb::Database::create(dir.path().join("hub.redb")).expect("redb"),
        heads: HashMap::new(),
    };
    measure(c, "redb", &mut redb);
    let mut fjall = Fjall::open(&dir.path().join("fjall"));
    measure(c, "fjall", &mut fjall);
    let mut log = Log::open(dir.path());
    measure(c, "log", &mut log);
}

criterion_group! {
    name = wall;
    // Each iteration syncs to disk: fewer samples keep the run short.
    config = Criterion::default().sample_size(20);
    targets = candidates
}
criterion_group! {
    name = cpu;
    config = Criterion::default().sample_size(20).with_measurement(CpuTime);
    targets = candidates
}
criterion_main!(wall, cpu);
