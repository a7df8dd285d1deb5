//! The only place the hub reads the wall clock (engine, control plane and core alike). Pure code
//! takes `now` as an argument; I/O code asks here.

/// Milliseconds since the Unix epoch.
#[allow(clippy::disallowed_methods)] // the one sanctioned read of the wall clock
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
