//! The events this process appended last, kept encoded so a lease of their jobs need not read
//! them back (issue 17: one CQL read per delivered event saved when delivery keeps up with
//! ingest). Bounded in bytes; the oldest go first. An event row never changes once appended,
//! so a kept copy is always the stored one; a job whose event is not kept reads it as before.
//! What is kept is minutes old at most under load, against a retention of days, so a kept copy
//! never outlives its row in practice (a test with second-long TTLs could see one that did).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use uuid::Uuid;

/// `(tenant, seq)` → `(id, encoded event)`, at most `cap_bytes` of encodings.
#[derive(Debug)]
pub struct RecentEvents {
    cap_bytes: usize,
    kept: Mutex<Kept>,
}

#[derive(Debug, Default)]
struct Kept {
    by_seq: HashMap<(String, u64), (Uuid, Vec<u8>)>,
    order: VecDeque<(String, u64)>,
    bytes: usize,
}

impl RecentEvents {
    pub fn new(cap_bytes: usize) -> Self {
        Self {
            cap_bytes,
            kept: Mutex::default(),
        }
    }

    /// Keeps an appended event, dropping the oldest kept ones past the bound.
    pub fn keep(&self, tenant: &str, seq: u64, id: Uuid, encoded: &[u8]) {
        if encoded.len() > self.cap_bytes {
            return;
        }
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let key = (tenant.to_owned(), seq);
        if let Some((_, old)) = kept.by_seq.insert(key.clone(), (id, encoded.to_vec())) {
            kept.bytes -= old.len();
        } else {
            kept.order.push_back(key);
        }
        kept.bytes += encoded.len();
        while kept.bytes > self.cap_bytes {
            let Some(oldest) = kept.order.pop_front() else {
                break;
            };
            if let Some((_, gone)) = kept.by_seq.remove(&oldest) {
                kept.bytes -= gone.len();
            }
        }
    }

    /// The encoded event at `(tenant, seq)` when it is kept and is event `id`.
    pub fn get(&self, tenant: &str, seq: u64, id: Uuid) -> Option<Vec<u8>> {
        let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        match kept.by_seq.get(&(tenant.to_owned(), seq)) {
            Some((found, encoded)) if *found == id => Some(encoded.clone()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_event_is_found_by_tenant_seq_and_id() {
        let recent = RecentEvents::new(1024);
        let id = Uuid::now_v7();
        recent.keep("t", 7, id, b"event");
        assert_eq!(recent.get("t", 7, id).as_deref(), Some(&b"event"[..]));
        assert_eq!(recent.get("t", 7, Uuid::now_v7()), None, "another id");
        assert_eq!(recent.get("u", 7, id), None, "another tenant");
        assert_eq!(recent.get("t", 8, id), None, "another seq");
    }

    #[test]
    fn the_oldest_go_first_past_the_bound() {
        let recent = RecentEvents::new(10);
        let ids: Vec<Uuid> = (0..3).map(|_| Uuid::now_v7()).collect();
        for (seq, id) in ids.iter().enumerate() {
            recent.keep("t", seq as u64, *id, b"1234");
        }
        assert_eq!(
            recent.get("t", 0, ids[0]),
            None,
            "12 bytes > 10: the first went"
        );
        assert!(recent.get("t", 1, ids[1]).is_some());
        assert!(recent.get("t", 2, ids[2]).is_some());
        recent.keep("t", 9, Uuid::now_v7(), &[0; 11]);
        assert!(
            recent.get("t", 2, ids[2]).is_some(),
            "a too-large event is not kept"
        );
    }
}
