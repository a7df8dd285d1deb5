//! Hash maps for what the hot path looks up per event or per job step: foldhash instead of the
//! standard SipHash, which was about 2 % of the hub's CPU in a deliver-backlog profile (issue
//! 17). The seed is still random per process; the keys are the hub's own (ids, tenant names of
//! accepted events), looked up by one shard or the log's one writer.

/// A `HashMap` with foldhash.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
/// A `HashSet` with foldhash.
pub type FastSet<T> = std::collections::HashSet<T, foldhash::fast::RandomState>;

/// Adds one to `key`'s count, copying the key only the first time (a per-job counter must not
/// allocate a key on every call).
pub fn count_up(counts: &mut FastMap<String, u32>, key: &str) {
    match counts.get_mut(key) {
        Some(n) => *n += 1,
        None => {
            counts.insert(key.to_owned(), 1);
        }
    }
}
