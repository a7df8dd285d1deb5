//! Hash maps for what the hot path looks up per event or per job step: foldhash instead of the
//! standard SipHash, which was about 2 % of the hub's CPU in a deliver-backlog profile (issue
//! 17). The seed is still random per process; the keys are the hub's own (ids, tenant names of
//! accepted events), looked up by one shard or the log's one writer.

/// A `HashMap` with foldhash.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
/// A `HashSet` with foldhash.
pub type FastSet<T> = std::collections::HashSet<T, foldhash::fast::RandomState>;
