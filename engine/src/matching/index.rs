//! Matching (R-MA-1 … 3): which subscriptions want an event. An immutable index per revision of
//! the subscriptions, by tenant and event key, so the cost of a lookup grows with the
//! subscriptions that can match, not with all of them; a shard swaps in a new index when the
//! control plane's revision log moves. Matching never consults the catalog, and no match is a
//! correct outcome (zero jobs).

use std::collections::{BTreeMap, HashMap};

use hub_core::model::{SinkKind, Subscription, VerificationState};
use uuid::Uuid;

/// What matching needs to know of an event.
#[derive(Debug, Clone, Copy)]
pub struct EventFacts<'a> {
    pub tenant: &'a str,
    /// `<resourcetype>.<eventtype>`.
    pub key: &'a str,
    /// The producer (`ce-source`).
    pub source: &'a str,
    pub major: u32,
}

#[derive(Debug, Clone)]
struct Entry {
    id: Uuid,
    /// Pull subscriptions read the tenant log by `seq` (R-CP-14): they match but take no jobs.
    push: bool,
    origin: Option<String>,
    schema_major: u32,
    event_majors: BTreeMap<String, u32>,
}

impl Entry {
    fn wants(&self, ev: &EventFacts<'_>) -> bool {
        self.origin.as_deref().is_none_or(|o| o == ev.source)
            && self
                .event_majors
                .get(ev.key)
                .copied()
                .unwrap_or(self.schema_major)
                == ev.major
    }
}

/// Whether `sub` wants `ev` by its own rules alone (R-MA-1: key, origin, majors), whatever its
/// state: what a pull read filters the tenant's log with.
pub fn wants(sub: &Subscription, ev: &EventFacts<'_>) -> bool {
    sub.tenant == ev.tenant
        && (sub.event_types.is_empty() || sub.event_types.iter().any(|k| k == ev.key))
        && sub.origin.as_deref().is_none_or(|o| o == ev.source)
        && sub
            .event_majors
            .get(ev.key)
            .copied()
            .unwrap_or(sub.schema_major)
            == ev.major
}

#[derive(Debug, Default)]
struct TenantIndex {
    /// Subscriptions naming the key.
    by_key: HashMap<String, Vec<Entry>>,
    /// Subscriptions to every key.
    all_keys: Vec<Entry>,
}

/// The index of one revision of the subscriptions.
#[derive(Debug, Default)]
pub struct MatchIndex {
    pub revision: u64,
    tenants: HashMap<String, TenantIndex>,
}

/// Whether a subscription takes deliveries at all (R-MA-1): enabled, verified, not deleted.
fn deliverable(s: &Subscription) -> bool {
    s.enabled && !s.deleted && s.verification_state == VerificationState::Active
}

impl MatchIndex {
    pub fn build<'a>(subs: impl IntoIterator<Item = &'a Subscription>, revision: u64) -> Self {
        let mut tenants: HashMap<String, TenantIndex> = HashMap::new();
        for s in subs.into_iter().filter(|s| deliverable(s)) {
            let entry = Entry {
                id: s.id,
                push: s.sink_kind != SinkKind::Pull,
                origin: s.origin.clone(),
                schema_major: s.schema_major,
                event_majors: s.event_majors.clone(),
            };
            let t = tenants.entry(s.tenant.clone()).or_default();
            if s.event_types.is_empty() {
                t.all_keys.push(entry);
            } else {
                for key in &s.event_types {
                    t.by_key.entry(key.clone()).or_default().push(entry.clone());
                }
            }
        }
        Self { revision, tenants }
    }

    /// The subscriptions that want `ev`.
    pub fn matches(&self, ev: &EventFacts<'_>) -> Vec<Uuid> {
        self.wanting(ev, false)
    }

    /// The subscriptions that want `ev` delivered (push sinks): one job each (R-DI-1).
    pub fn jobs_for(&self, ev: &EventFacts<'_>) -> Vec<Uuid> {
        self.wanting(ev, true)
    }

    fn wanting(&self, ev: &EventFacts<'_>, push_only: bool) -> Vec<Uuid> {
        let Some(t) = self.tenants.get(ev.tenant) else {
            return Vec::new();
        };
        t.by_key
            .get(ev.key)
            .into_iter()
            .flatten()
            .chain(&t.all_keys)
            .filter(|e| (e.push || !push_only) && e.wants(ev))
            .map(|e| e.id)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// R-MA-1 read literally, one subscription at a time.
    fn naive(subs: &[Subscription], ev: &EventFacts<'_>) -> Vec<Uuid> {
        subs.iter()
            .filter(|s| {
                s.enabled
                    && !s.deleted
                    && s.verification_state == VerificationState::Active
                    && wants(s, ev)
            })
            .map(|s| s.id)
            .collect()
    }

    const TENANTS: &[&str] = &["t1", "t2", "t3"];
    const KEYS: &[&str] = &[
        "loan.approved",
        "loan.rejected",
        "account.created",
        "payment.settled",
    ];
    const SOURCES: &[&str] = &["lender", "crm"];

    prop_compose! {
        fn subscription()(
            tenant in 0..TENANTS.len(),
            keys in proptest::collection::btree_set(0..KEYS.len(), 0..3),
            origin in proptest::option::of(0..SOURCES.len()),
            schema_major in 1u32..3,
            pinned in proptest::option::of((0..KEYS.len(), 1u32..3)),
            enabled: bool,
            active: bool,
            deleted in proptest::bool::weighted(0.1),
        ) -> Subscription {
            let event_types: Vec<String> = keys.iter().map(|k| KEYS[*k].to_owned()).collect();
            let mut event_majors = BTreeMap::new();
            if let Some((k, m)) = pinned {
                if event_types.contains(&KEYS[k].to_owned()) {
                    event_majors.insert(KEYS[k].to_owned(), m);
                }
            }
            Subscription {
                event_types,
                schema_major,
                event_majors,
                origin: origin.map(|o| SOURCES[o].to_owned()),
                enabled,
                paused: !enabled,
                verification_state: if active { VerificationState::Active } else { VerificationState::PendingVerification },
                deleted,
                ..Subscription::new(TENANTS[tenant], "s", SinkKind::Pull, 0)
            }
        }
    }

    proptest! {
        /// R-MA-1/3: the index answers exactly what the rule read literally answers.
        #[test]
        fn r_ma_1_the_index_agrees_with_a_naive_matcher(
            subs in proptest::collection::vec(subscription(), 0..40),
            tenant in 0..TENANTS.len(), key in 0..KEYS.len(), source in 0..SOURCES.len(), major in 1u32..3,
        ) {
            let ev = EventFacts { tenant: TENANTS[tenant], key: KEYS[key], source: SOURCES[source], major };
            let index = MatchIndex::build(&subs, 1);
            let mut got = index.matches(&ev);
            let mut want = naive(&subs, &ev);
            got.sort();
            want.sort();
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn r_ma_2_no_subscription_means_no_jobs() {
        let index = MatchIndex::build(&[], 7);
        let ev = EventFacts {
            tenant: "t",
            key: "a.b",
            source: "s",
            major: 1,
        };
        assert!(index.matches(&ev).is_empty());
        assert_eq!(index.revision, 7);
    }
}
