//! The event catalog (R-CP-15): event keys, the producer (`origin`) of each, and their schema
//! majors — from a configured producer catalog file plus keys observed in accepted events.
//! Subscriptions name keys from it; an unreadable or empty catalog checks nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::RwLock;

use serde::Deserialize;
use serde_json::json;

use crate::error::{ApiError, ErrorCode};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogFile {
    #[serde(default)]
    event: Vec<FileEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileEntry {
    key: String,
    origin: String,
    majors: Vec<u32>,
}

/// The hub's own event keys (R-CP-5), always in the catalog under origin `hub`, major 1. Built
/// in rather than observed: seeing one must not turn checking on for producers' keys.
pub const HUB_KEYS: [&str; 2] = ["destination.verified", "destination.disabled"];
const HUB_ORIGIN: &str = "hub";
const HUB_MAJOR: u32 = 1;

fn is_hub_key(key: &str) -> bool {
    HUB_KEYS.contains(&key)
}

/// The most `(event key, origin)` pairs observed events may add (a producer's configured file
/// is not limited): the catalog is every tenant's, so events under an invented tenant must not
/// grow it without end (issue 16). Beyond it new keys are left out, and said once in the log.
pub const OBSERVED_KEY_LIMIT: usize = 5_000;
/// The most schema majors kept for one key.
pub const MAJORS_PER_KEY_LIMIT: usize = 64;

/// `(event key, origin)` → majors.
#[derive(Debug, Default)]
pub struct Catalog {
    entries: RwLock<BTreeMap<(String, String), BTreeSet<u32>>>,
    /// False when the configured file could not be read: keys are then accepted unchecked.
    readable: bool,
    /// When keys recorded by engines in other processes were last merged in (Unix ms).
    synced_ms: std::sync::atomic::AtomicI64,
    /// Whether reaching a limit has been logged.
    full_logged: std::sync::atomic::AtomicBool,
}

impl Catalog {
    /// Loads `path` (TOML, `[[event]] key origin majors`). A missing or broken file gives an
    /// unreadable catalog (logged), never a failed start.
    pub fn load(path: Option<&Path>) -> Self {
        let Some(path) = path else {
            return Self {
                readable: true,
                ..Self::default()
            };
        };
        let parsed = std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|t| toml::from_str::<CatalogFile>(&t).map_err(|e| e.to_string()));
        match parsed {
            Ok(file) => {
                let catalog = Self {
                    readable: true,
                    ..Self::default()
                };
                if let Ok(mut entries) = catalog.entries.write() {
                    for e in file.event {
                        if e.origin == HUB_ORIGIN && is_hub_key(&e.key) {
                            continue; // built in
                        }
                        entries
                            .entry((e.key, e.origin))
                            .or_default()
                            .extend(e.majors);
                    }
                }
                catalog
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "producer catalog unreadable; event types are accepted unchecked");
                Self::default()
            }
        }
    }

    /// Adds a key seen in an accepted event.
    pub fn observe(&self, key: &str, origin: &str, major: u32) {
        if origin == HUB_ORIGIN && is_hub_key(key) {
            return; // built in
        }
        let Ok(mut entries) = self.entries.write() else {
            return;
        };
        let pair = (key.to_owned(), origin.to_owned());
        let fits = match entries.get(&pair) {
            Some(majors) => majors.len() < MAJORS_PER_KEY_LIMIT,
            None => entries.len() < OBSERVED_KEY_LIMIT,
        };
        if fits {
            entries.entry(pair).or_default().insert(major);
        } else if !self
            .full_logged
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::warn!(
                key,
                origin,
                limit = OBSERVED_KEY_LIMIT,
                "the event catalog is full; newly observed keys are left out"
            );
        }
    }

    /// Adds keys of accepted events; the write lock is taken only when one is new.
    pub fn observe_all<'a>(&self, keys: impl Iterator<Item = (&'a str, &'a str, u32)>) {
        let new: Vec<(&str, &str, u32)> = match self.entries.read() {
            Ok(e) => keys
                .filter(|(k, o, m)| {
                    !e.get(&((*k).to_owned(), (*o).to_owned()))
                        .is_some_and(|majors| majors.contains(m))
                })
                .collect(),
            Err(_) => return,
        };
        for (k, o, m) in new {
            self.observe(k, o, m);
        }
    }

    /// Whether keys recorded in the store are due to be merged in again (every `every_ms`); marks
    /// the sync as done when they are.
    pub fn sync_due(&self, now_ms: i64, every_ms: i64) -> bool {
        use std::sync::atomic::Ordering;
        let last = self.synced_ms.load(Ordering::Relaxed);
        now_ms - last >= every_ms
            && self
                .synced_ms
                .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// R-CP-3: each key must exist at its major (from that `origin` when given); unchecked when
    /// the catalog is unreadable or lists nothing yet.
    pub fn check(
        &self,
        types: &[String],
        schema_major: u32,
        event_majors: &BTreeMap<String, u32>,
        origin: Option<&str>,
    ) -> Result<(), ApiError> {
        let Ok(entries) = self.entries.read() else {
            return Ok(());
        };
        if !self.readable || entries.is_empty() {
            return Ok(());
        }
        for key in types {
            let major = event_majors.get(key).copied().unwrap_or(schema_major);
            if is_hub_key(key) && major == HUB_MAJOR && origin.is_none_or(|o| o == HUB_ORIGIN) {
                continue;
            }
            let known = entries.iter().any(|((k, o), majors)| {
                k == key && origin.is_none_or(|want| want == o) && majors.contains(&major)
            });
            if !known {
                let from = origin.map(|o| format!(" from {o}")).unwrap_or_default();
                return Err(ApiError::new(
                    ErrorCode::UnknownEventType,
                    format!("{key} v{major}{from} is not in the catalog"),
                ));
            }
        }
        Ok(())
    }

    pub fn list(&self) -> serde_json::Value {
        let entries = self.entries.read().map(|e| e.clone()).unwrap_or_default();
        let items: Vec<_> = entries
            .iter()
            .map(|((k, o), m)| json!({"eventKey": k, "origin": o, "majors": m}))
            .collect();
        // The hub's own events, subscribed to with `origin: hub`, apart from producers' keys.
        let hub: Vec<_> = HUB_KEYS
            .iter()
            .map(|k| json!({"eventKey": k, "origin": HUB_ORIGIN, "majors": [HUB_MAJOR]}))
            .collect();
        json!({ "items": items, "hub": hub })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 16: events cannot grow the catalog without end (it is every tenant's); keys
    /// already in it still gain majors, up to their own limit.
    #[test]
    fn r_cp_15_observed_keys_are_bounded() {
        let c = Catalog::load(None);
        for i in 0..OBSERVED_KEY_LIMIT + 10 {
            c.observe(&format!("thing.made_{i}"), "lender", 1);
        }
        c.observe("thing.made_0", "lender", 2);
        for m in 0..1000 {
            c.observe("thing.made_1", "lender", m);
        }
        let entries = c.entries.read().expect("entries");
        assert_eq!(entries.len(), OBSERVED_KEY_LIMIT);
        assert!(
            !entries.contains_key(&(format!("thing.made_{OBSERVED_KEY_LIMIT}"), "lender".into()))
        );
        assert_eq!(entries[&("thing.made_0".into(), "lender".into())].len(), 2);
        assert_eq!(
            entries[&("thing.made_1".into(), "lender".into())].len(),
            MAJORS_PER_KEY_LIMIT
        );
    }

    #[test]
    fn r_cp_15_keys_are_checked_by_major_and_origin_and_unchecked_when_empty() {
        let c = Catalog::load(None);
        assert!(
            c.check(&["x.y".into()], 1, &BTreeMap::new(), None).is_ok(),
            "empty: unchecked"
        );
        c.observe("loan.approved", "lender", 1);
        c.observe("loan.approved", "lender", 2);
        let majors = BTreeMap::from([("loan.approved".to_owned(), 2)]);
        assert!(c
            .check(
                &["loan.approved".into()],
                1,
                &BTreeMap::new(),
                Some("lender")
            )
            .is_ok());
        assert!(c.check(&["loan.approved".into()], 1, &majors, None).is_ok());
        let e = c
            .check(&["loan.approved".into()], 3, &BTreeMap::new(), None)
            .expect_err("major");
        assert_eq!((e.status(), e.code.as_str()), (422, "unknown_event_type"));
        assert!(
            c.check(&["loan.approved".into()], 1, &BTreeMap::new(), Some("crm"))
                .is_err(),
            "origin"
        );
        assert!(c
            .check(&["nope.x".into()], 1, &BTreeMap::new(), None)
            .is_err());
        // The hub's own keys are always there, from origin hub (R-CP-5), and listed.
        assert!(c
            .check(
                &["destination.verified".into()],
                1,
                &BTreeMap::new(),
                Some("hub")
            )
            .is_ok());
        assert!(c
            .check(&["destination.disabled".into()], 1, &BTreeMap::new(), None)
            .is_ok());
        assert!(c
            .check(
                &["destination.verified".into()],
                1,
                &BTreeMap::new(),
                Some("lender")
            )
            .is_err());
        let listed = c.list();
        assert_eq!(
            listed["hub"][1]["eventKey"], "destination.disabled",
            "{listed}"
        );
        assert!(listed["items"]
            .as_array()
            .is_some_and(|i| i.iter().all(|e| e["origin"] != "hub")));
        // Seeing a hub event does not make an empty catalog start checking producers' keys.
        let fresh = Catalog::load(None);
        fresh.observe("destination.verified", "hub", 1);
        assert!(fresh
            .check(&["anything.new".into()], 1, &BTreeMap::new(), None)
            .is_ok());
        let broken = Catalog::load(Some(Path::new("/nonexistent/catalog.toml")));
        broken.observe("a.b", "o", 1);
        assert!(
            broken
                .check(&["zzz.q".into()], 1, &BTreeMap::new(), None)
                .is_ok(),
            "unreadable: unchecked"
        );
    }
}
