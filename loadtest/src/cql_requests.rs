//! The CQL store's requests and Paxos rounds per delivered event (issue 17), from the hub's
//! `streaming_hub_store_cql_requests_total{statement}` and `…_paxos_rounds_total{statement}`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

const REQUESTS: &str = "streaming_hub_store_cql_requests_total{statement=\"";
const PAXOS: &str = "streaming_hub_store_cql_paxos_rounds_total{statement=\"";
const DELIVERED: &str = "streaming_hub_delivery_outcomes_total{outcome=\"delivered\"}";
const STORED: &str = "streaming_hub_ingest_verdicts_total{verdict=\"stored\"}";

/// One statement's requests over the run.
#[derive(Debug, Clone, Serialize)]
pub struct StatementShare {
    pub statement: String,
    pub requests: u64,
    pub paxos: u64,
}

/// Every statement the hub's CQL store sent, most requests first (empty on other stores).
pub fn shares(counters: &BTreeMap<String, u64>) -> Vec<StatementShare> {
    let mut all: Vec<StatementShare> = counters
        .iter()
        .filter_map(|(k, &requests)| {
            let statement = k.strip_prefix(REQUESTS)?.strip_suffix("\"}")?;
            let paxos = counters
                .get(&format!("{PAXOS}{statement}\"}}"))
                .copied()
                .unwrap_or(0);
            Some(StatementShare {
                statement: statement.to_owned(),
                requests,
                paxos,
            })
        })
        .collect();
    all.sort_by_key(|s| std::cmp::Reverse(s.requests));
    all
}

/// The section of the report: per delivered event when the run delivers, else per stored record.
pub fn section(shares: &[StatementShare], counters: &BTreeMap<String, u64>) -> String {
    let mut md = String::new();
    if shares.is_empty() {
        return md;
    }
    let delivered = counters.get(DELIVERED).copied().unwrap_or(0);
    let (per, n) = if delivered > 0 {
        ("delivered event", delivered)
    } else {
        ("stored record", counters.get(STORED).copied().unwrap_or(0))
    };
    let n = n.max(1) as f64;
    let (requests, paxos) = shares
        .iter()
        .fold((0, 0), |(r, p), s| (r + s.requests, p + s.paxos));
    let _ = writeln!(
        md,
        "## CQL requests per {per}\n\n\
         **{:.2} requests, {:.2} of them Paxos rounds, per {per}** ({requests} requests, {paxos} \
         Paxos rounds, {n:.0} {per}s). A request is one statement or batch sent (first page of a \
         paged read); a Paxos round is a conditional write or a serial read. The scrapes of the \
         load test itself read `job_counts` about every second.\n\n\
         | statement | requests | per {per} | Paxos rounds | per {per} |\n|---|---|---|---|---|",
        requests as f64 / n,
        paxos as f64 / n,
    );
    for s in shares {
        let _ = writeln!(
            md,
            "| `{}` | {} | {:.3} | {} | {:.3} |",
            s.statement,
            s.requests,
            s.requests as f64 / n,
            s.paxos,
            s.paxos as f64 / n
        );
    }
    md.push('\n');
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_are_read_from_the_counters_and_shown_per_delivered_event() {
        let counters: BTreeMap<String, u64> = [
            (format!("{REQUESTS}insert jobs\"}}"), 200),
            (format!("{REQUESTS}update units if\"}}"), 10),
            (format!("{PAXOS}update units if\"}}"), 10),
            (DELIVERED.to_owned(), 100),
            ("streaming_hub_other_total".to_owned(), 5),
        ]
        .into_iter()
        .collect();
        let shares = shares(&counters);
        let found: Vec<_> = shares
            .iter()
            .map(|s| (s.statement.as_str(), s.requests, s.paxos))
            .collect();
        assert_eq!(
            found,
            vec![("insert jobs", 200, 0), ("update units if", 10, 10)]
        );
        let md = section(&shares, &counters);
        assert!(
            md.contains("**2.10 requests, 0.10 of them Paxos rounds, per delivered event**"),
            "{md}"
        );
        assert!(
            md.contains("| `insert jobs` | 200 | 2.000 | 0 | 0.000 |"),
            "{md}"
        );
        assert!(section(&[], &counters).is_empty());
    }
}
