//! The records a run produces: CloudEvents in Kafka binary mode with headers as the Lerian producer
//! writes them (`ce-*`, UUIDv7 ids, `studio.lerian.<source>.<resource>.<event>` types), plus the
//! chosen shares of re-sent duplicates, malformed records and system events. Pure and seeded:
//! the same seed gives the same sequence of choices.

use std::collections::VecDeque;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use uuid::Uuid;

use crate::scenario::{Scenario, Skew};

/// What a record is meant to be, so the run knows what the hub should do with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Valid,
    Duplicate,
    Malformed,
    System,
}

/// One record to produce. The tenant is the Kafka key, so a tenant stays on one partition.
#[derive(Debug, Clone)]
pub struct Record {
    pub key: String,
    pub headers: Headers,
    pub value: Vec<u8>,
    pub kind: Kind,
}

/// Header name and value, as the producer writes them.
pub type Headers = Vec<(&'static str, Vec<u8>)>;

/// Re-sent duplicates are drawn from this many recent valid records.
const RECENT: usize = 10_000;

const EVENTS: &[(&str, &str)] = &[
    ("loan_application", "approved"),
    ("loan_application", "submitted"),
    ("transaction", "created"),
    ("account", "updated"),
    ("payment", "settled"),
];

pub struct Generator {
    rng: StdRng,
    source: String,
    tenants: Vec<String>,
    /// Cumulative weights for Zipf.
    cdf: Vec<f64>,
    skew: Skew,
    duplicate: f64,
    malformed: f64,
    system: f64,
    payload_bytes: usize,
    recent: VecDeque<(String, Headers)>,
    produced: u64,
}

impl Generator {
    pub fn new(scenario: &Scenario, source: &str, run: &str, seed: u64) -> Self {
        let tenants: Vec<String> = (0..scenario.tenants)
            .map(|t| format!("{run}-t{t}"))
            .collect();
        let cdf = match scenario.skew {
            Skew::Zipf { exponent } => {
                let mut total = 0.0;
                let mut cdf: Vec<f64> = (1..=tenants.len())
                    .map(|i| {
                        total += 1.0 / (i as f64).powf(exponent);
                        total
                    })
                    .collect();
                cdf.iter_mut().for_each(|c| *c /= total);
                cdf
            }
            _ => Vec::new(),
        };
        Self {
            rng: StdRng::seed_from_u64(seed),
            source: source.to_owned(),
            tenants,
            cdf,
            skew: scenario.skew,
            duplicate: scenario.duplicate_share,
            malformed: scenario.malformed_share,
            system: scenario.system_share,
            payload_bytes: scenario.payload_bytes,
            recent: VecDeque::with_capacity(RECENT),
            produced: 0,
        }
    }

    #[cfg(test)]
    pub fn tenants(&self) -> &[String] {
        &self.tenants
    }

    fn tenant(&mut self) -> String {
        let n = self.tenants.len();
        let index = match self.skew {
            Skew::Uniform => self.rng.gen_range(0..n),
            Skew::Zipf { .. } => {
                let u: f64 = self.rng.gen();
                self.cdf.partition_point(|c| *c < u).min(n - 1)
            }
            Skew::Hot { share } => {
                if n == 1 || self.rng.gen_bool(share) {
                    0
                } else {
                    self.rng.gen_range(1..n)
                }
            }
        };
        self.tenants[index].clone()
    }

    fn headers(&mut self, tenant: &str) -> Headers {
        let (resource, event) = EVENTS[self.rng.gen_range(0..EVENTS.len())];
        let time = time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_else(|_| "2026-11-29T00:00:00Z".into());
        vec![
            ("ce-specversion", b"1.0".to_vec()),
            ("ce-id", Uuid::now_v7().to_string().into_bytes()),
            ("ce-source", self.source.clone().into_bytes()),
            (
                "ce-type",
                format!("studio.lerian.{}.{resource}.{event}", self.source).into_bytes(),
            ),
            ("ce-time", time.into_bytes()),
            ("ce-schemaversion", b"1.0.0".to_vec()),
            ("ce-resourcetype", resource.as_bytes().to_vec()),
            ("ce-eventtype", event.as_bytes().to_vec()),
            ("ce-tenantid", tenant.as_bytes().to_vec()),
            ("ce-datacontenttype", b"application/json".to_vec()),
        ]
    }

    fn payload(&self) -> Vec<u8> {
        // The send time lets the receivers measure end to end (producer → webhook).
        let head = format!(
            "{{\"n\":{},\"sent_ms\":{},\"pad\":\"",
            self.produced,
            crate::machine::unix_ms()
        );
        let pad = self.payload_bytes.saturating_sub(head.len() + 2);
        let mut value = head.into_bytes();
        value.resize(value.len() + pad, b'x');
        value.extend_from_slice(b"\"}");
        value
    }

    pub fn next_record(&mut self) -> Record {
        self.produced += 1;
        let roll: f64 = self.rng.gen();
        if roll < self.duplicate && !self.recent.is_empty() {
            let i = self.rng.gen_range(0..self.recent.len());
            let (key, headers) = self.recent[i].clone();
            return Record {
                key,
                headers,
                value: self.payload(),
                kind: Kind::Duplicate,
            };
        }
        let tenant = self.tenant();
        let mut headers = self.headers(&tenant);
        if roll < self.duplicate + self.malformed {
            // A careless producer: no tenant, or a UUIDv4 id.
            if self.rng.gen_bool(0.5) {
                headers.retain(|(k, _)| *k != "ce-tenantid");
            } else {
                let v4 = uuid::Builder::from_random_bytes(self.rng.gen()).into_uuid();
                headers[1].1 = v4.to_string().into_bytes();
            }
            return Record {
                key: tenant,
                headers,
                value: self.payload(),
                kind: Kind::Malformed,
            };
        }
        if roll < self.duplicate + self.malformed + self.system {
            headers.retain(|(k, _)| *k != "ce-tenantid");
            headers.push(("ce-systemevent", b"true".to_vec()));
            return Record {
                key: "system".into(),
                headers,
                value: b"{}".to_vec(),
                kind: Kind::System,
            };
        }
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back((tenant.clone(), headers.clone()));
        Record {
            key: tenant,
            headers,
            value: self.payload(),
            kind: Kind::Valid,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(skew: Skew) -> Scenario {
        let mut s = Scenario::load("ingest-backlog").expect("built in");
        s.skew = skew;
        s.tenants = 10;
        s
    }

    #[test]
    fn shares_of_each_kind_are_close_to_the_scenario() {
        let s = scenario(Skew::Uniform);
        let mut g = Generator::new(&s, "lender", "run", 1);
        let n = 50_000;
        let mut counts = [0u32; 4];
        for _ in 0..n {
            let r = g.next_record();
            counts[r.kind as usize] += 1;
            if r.kind == Kind::Valid {
                assert_eq!(r.value.len(), s.payload_bytes);
            }
        }
        let share = |c: u32| f64::from(c) / f64::from(n);
        assert!((share(counts[Kind::Duplicate as usize]) - s.duplicate_share).abs() < 0.01);
        assert!((share(counts[Kind::Malformed as usize]) - s.malformed_share).abs() < 0.005);
        assert!((share(counts[Kind::System as usize]) - s.system_share).abs() < 0.005);
    }

    #[test]
    fn a_hot_tenant_gets_its_share() {
        let mut g = Generator::new(&scenario(Skew::Hot { share: 0.5 }), "lender", "run", 2);
        let hot = g.tenants()[0].clone();
        let valid: Vec<_> = (0..20_000)
            .map(|_| g.next_record())
            .filter(|r| r.kind == Kind::Valid)
            .collect();
        let share = valid.iter().filter(|r| r.key == hot).count() as f64 / valid.len() as f64;
        assert!((share - 0.5).abs() < 0.03, "{share}");
    }

    #[test]
    fn zipf_favours_the_first_tenants() {
        let mut g = Generator::new(&scenario(Skew::Zipf { exponent: 1.1 }), "lender", "r", 3);
        let (first, last) = (g.tenants()[0].clone(), g.tenants()[9].clone());
        let keys: Vec<_> = (0..20_000).map(|_| g.next_record().key).collect();
        let count = |t: &str| keys.iter().filter(|k| *k == t).count();
        assert!(count(&first) > 5 * count(&last));
    }

    #[test]
    fn duplicates_repeat_an_earlier_id() {
        let mut s = scenario(Skew::Uniform);
        s.duplicate_share = 0.5;
        let mut g = Generator::new(&s, "lender", "run", 4);
        let mut ids = std::collections::HashSet::new();
        for _ in 0..1000 {
            let r = g.next_record();
            let id = r.headers[1].1.clone();
            match r.kind {
                Kind::Valid => assert!(ids.insert(id)),
                Kind::Duplicate => assert!(ids.contains(&id)),
                _ => {}
            }
        }
    }
}
