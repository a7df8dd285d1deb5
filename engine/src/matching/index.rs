//! Matching (R-MA-1 … 3): which subscriptions want an event. An immutable index per revision of
//! the subscriptions, by tenant and event key, so the cost of a lookup grows with the
//! subscriptions that can match, not with all of them; a shard swaps in a new index when the
//! control plane's revision log moves. Matching never consults the catalog, and no match is a
//! correct outcome (zero jobs).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

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

impl TenantIndex {
    /// The index of one tenant's subscriptions; `None` when none takes deliveries.
    fn build<'a>(subs: impl IntoIterator<Item = &'a Subscription>) -> Option<Self> {
        let mut t = TenantIndex::default();
        for s in subs.into_iter().filter(|s| deliverable(s)) {
            let entry = Entry {
                id: s.id,
                push: s.sink_kind != SinkKind::Pull,
                origin: s.origin.clone(),
                schema_major: s.schema_major,
                event_majors: s.event_majors.clone(),
            };
            if s.event_types.is_empty() {
                t.all_keys.push(entry);
            } else {
                for key in &s.event_types {
                    t.by_key.entry(key.clone()).or_default().push(entry.clone());
                }
            }
        }
        (!t.by_key.is_empty() || !t.all_keys.is_empty()).then_some(t)
    }
}

/// The index of one revision of the subscriptions. Each tenant's part is shared with the
/// revisions before it until one of the tenant's subscriptions changes, so a change costs its
/// tenant's subscriptions, not every tenant's. The parts sit in `SHARES` (64) maps by a hash of
/// the tenant, and a change copies the map of its tenant's share only (with 100,000 tenants,
/// copying one map of every part was 100,000 pointers per change; delivery marks are changes).
#[derive(Debug)]
pub struct MatchIndex {
    pub revision: u64,
    shares: Vec<Arc<Share>>,
}

/// Tenants' parts whose tenant hashes to one share.
type Share = HashMap<Arc<str>, Arc<TenantIndex>>;

const SHARES: usize = 64;

/// The share of `tenant`'s part: xxh3 (the log's checksum), fixed so every index agrees, and a
/// few nanoseconds for a tenant id, as every matched event pays it (SipHash added 15 ns to a
/// 50 ns match).
fn share_of(tenant: &str) -> usize {
    (xxhash_rust::xxh3::xxh3_64(tenant.as_bytes()) % SHARES as u64) as usize
}

impl Default for MatchIndex {
    fn default() -> Self {
        Self {
            revision: 0,
            shares: (0..SHARES).map(|_| Arc::default()).collect(),
        }
    }
}

/// Whether a subscription takes deliveries at all (R-MA-1): enabled, verified, not deleted.
fn deliverable(s: &Subscription) -> bool {
    s.enabled && !s.deleted && s.verification_state == VerificationState::Active
}

impl MatchIndex {
    pub fn build<'a>(subs: impl IntoIterator<Item = &'a Subscription>, revision: u64) -> Self {
        let mut by_tenant: HashMap<&str, Vec<&Subscription>> = HashMap::new();
        for s in subs {
            by_tenant.entry(s.tenant.as_str()).or_default().push(s);
        }
        Self::default().rebuilt(revision, by_tenant)
    }

    /// The index of `revision`: this one, but for the tenants of `changed`, whose parts are
    /// built again from the subscriptions given (all of the tenant's, as of `revision`).
    pub fn rebuilt<'a>(
        &self,
        revision: u64,
        changed: impl IntoIterator<Item = (&'a str, Vec<&'a Subscription>)>,
    ) -> Self {
        let mut shares = self.shares.clone();
        for (tenant, subs) in changed {
            let share = Arc::make_mut(&mut shares[share_of(tenant)]);
            match TenantIndex::build(subs) {
                Some(t) => share.insert(Arc::from(tenant), Arc::new(t)),
                None => share.remove(tenant),
            };
        }
        Self { revision, shares }
    }

    /// `tenant`'s part, when one of its subscriptions takes deliveries.
    fn part(&self, tenant: &str) -> Option<&Arc<TenantIndex>> {
        self.shares[share_of(tenant)].get(tenant)
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
        let Some(t) = self.part(ev.tenant) else {
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

    proptest! {
        /// R-MA-3: an index rebuilt for the one tenant whose subscriptions changed answers
        /// what an index built from scratch answers, for every tenant.
        #[test]
        fn r_ma_3_rebuilding_the_changed_tenant_equals_building_anew(
            before in proptest::collection::vec(subscription(), 0..30),
            replacement in proptest::collection::vec(subscription(), 0..10),
            changed in 0..TENANTS.len(),
            tenant in 0..TENANTS.len(), key in 0..KEYS.len(), source in 0..SOURCES.len(), major in 1u32..3,
        ) {
            let ev = EventFacts { tenant: TENANTS[tenant], key: KEYS[key], source: SOURCES[source], major };
            let changed = TENANTS[changed];
            let replacement: Vec<Subscription> = replacement
                .into_iter()
                .map(|s| Subscription { tenant: changed.to_owned(), ..s })
                .collect();
            let after: Vec<Subscription> = before
                .iter()
                .filter(|s| s.tenant != changed)
                .cloned()
                .chain(replacement.iter().cloned())
                .collect();
            let old = MatchIndex::build(&before, 1);
            let mut got = old.rebuilt(2, [(changed, replacement.iter().collect())]).matches(&ev);
            let mut want = MatchIndex::build(&after, 2).matches(&ev);
            got.sort();
            want.sort();
            prop_assert_eq!(got, want);
        }
    }

    /// R-MA-3 at scale: a change rebuilds its own tenant's part and shares every other part
    /// with the revision before.
    #[test]
    fn r_ma_3_a_change_leaves_the_other_tenants_parts_shared() {
        let active = |tenant: &str| Subscription {
            enabled: true,
            verification_state: VerificationState::Active,
            ..Subscription::new(tenant, "s", SinkKind::Webhook, 0)
        };
        let (a, b) = (active("t1"), active("t2"));
        let old = MatchIndex::build([&a, &b], 1);
        let a2 = active("t1");
        let new = old.rebuilt(2, [("t1", vec![&a, &a2])]);
        let part = |index: &MatchIndex, t: &str| index.part(t).cloned().expect("part");
        assert!(Arc::ptr_eq(&part(&old, "t2"), &part(&new, "t2")));
        assert!(!Arc::ptr_eq(&part(&old, "t1"), &part(&new, "t1")));
        assert_eq!(part(&new, "t1").all_keys.len(), 2);
        let copied = (old.shares.iter().zip(&new.shares))
            .filter(|(o, n)| !Arc::ptr_eq(o, n))
            .count();
        assert_eq!(copied, 1, "only the changed tenant's share is copied");
        let gone = new.rebuilt(3, [("t1", vec![])]);
        assert!(
            gone.part("t1").is_none(),
            "a tenant left with nothing leaves"
        );
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
