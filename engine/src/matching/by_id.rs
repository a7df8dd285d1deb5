//! Subscriptions by id in shares copied on write: a published snapshot costs a change its
//! share, not a copy of every subscription (as `MatchIndex` does with tenants' parts).

use std::collections::HashMap;
use std::sync::Arc;

use hub_core::model::Subscription;
use uuid::Uuid;

const SHARES: usize = 64;

/// One share: the subscriptions whose id falls in it.
type Share = HashMap<Uuid, Arc<Subscription>>;

/// Every subscription known, by id (ids are unique across tenants). Cloning it clones 64
/// pointers; a write copies the one share it touches if a clone still holds it.
#[derive(Debug, Clone)]
pub struct ById {
    shares: Vec<Arc<Share>>,
}

impl Default for ById {
    fn default() -> Self {
        Self {
            shares: (0..SHARES).map(|_| Arc::default()).collect(),
        }
    }
}

/// The share of `id`: its low bits (random in a UUIDv7, and spread enough in any other).
fn share_of(id: &Uuid) -> usize {
    (id.as_u128() % SHARES as u128) as usize
}

impl ById {
    pub fn get(&self, id: &Uuid) -> Option<&Arc<Subscription>> {
        self.shares[share_of(id)].get(id)
    }

    pub fn insert(&mut self, sub: Arc<Subscription>) {
        Arc::make_mut(&mut self.shares[share_of(&sub.id)]).insert(sub.id, sub);
    }

    pub fn remove(&mut self, id: &Uuid) -> Option<Arc<Subscription>> {
        let share = &mut self.shares[share_of(id)];
        // No copy of a share that does not hold it.
        if !share.contains_key(id) {
            return None;
        }
        Arc::make_mut(share).remove(id)
    }

    pub fn values(&self) -> impl Iterator<Item = &Arc<Subscription>> {
        self.shares.iter().flat_map(|s| s.values())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hub_core::control_store::conformance::subscription;

    /// A clone taken before a write keeps what it saw; the write copies only its share.
    #[test]
    fn r_ma_3_a_snapshot_of_the_subscriptions_keeps_what_it_saw() {
        let mut live = ById::default();
        let subs: Vec<_> = (0..200)
            .map(|i| Arc::new(subscription("t-by-id", &format!("s{i}"))))
            .collect();
        for s in &subs {
            live.insert(s.clone());
        }
        let snapshot = live.clone();
        let gone = subs[7].id;
        assert!(live.remove(&gone).is_some());
        assert!(live.remove(&gone).is_none());
        assert!(live.get(&gone).is_none());
        assert_eq!(snapshot.get(&gone).map(|s| s.id), Some(gone));
        let shared = (0..SHARES)
            .filter(|&i| Arc::ptr_eq(&live.shares[i], &snapshot.shares[i]))
            .count();
        assert_eq!(shared, SHARES - 1, "one share copied");
        assert_eq!(live.values().count(), 199);
        assert_eq!(snapshot.values().count(), 200);
    }
}
