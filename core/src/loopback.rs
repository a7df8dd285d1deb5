//! Loopback ports for the processes a test or a load test starts (engines, control planes,
//! receivers), one rule for both.
//!
//! A port from `bind(127.0.0.1:0)` is an ephemeral one: between its release and the process's
//! own bind, an outgoing connection (an engine's to Kafka or CQL, started just before) may be
//! given it, and the process exits with "Address already in use" — which failed a CI's
//! kill-engine run. Ports below the kernel's ephemeral range are never handed to outgoing
//! connections, so they are taken from there, in turn from a start that differs per process:
//! one process never hands out a port twice, and two test processes rarely meet.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// The lowest port handed out: above the well-known and most registered services' ports.
const LOWEST: u32 = 10_000;

/// A loopback port free at this moment, below the ephemeral range; `None` when every one is
/// taken.
pub fn free_port() -> Option<u16> {
    static NEXT: OnceLock<AtomicU32> = OnceLock::new();
    let span = ephemeral_low().saturating_sub(LOWEST).max(1);
    let next = NEXT.get_or_init(|| AtomicU32::new(process_start()));
    (0..span)
        .filter_map(|_| u16::try_from(LOWEST + next.fetch_add(1, Ordering::Relaxed) % span).ok())
        .find(|&port| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok())
}

/// The first port of the kernel's ephemeral range (`ip_local_port_range`; 32768 by default).
fn ephemeral_low() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// Where this process starts its turn: a value std's hasher seeds at random per process.
fn process_start() -> u32 {
    use std::hash::BuildHasher;
    let spread = std::collections::hash_map::RandomState::new().hash_one(std::process::id());
    (spread >> 32) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_handed_out_are_free_below_the_ephemeral_range_and_never_repeat() {
        let ports: Vec<u16> = (0..50).filter_map(|_| free_port()).collect();
        assert_eq!(ports.len(), 50);
        let low = ephemeral_low();
        assert!(ports
            .iter()
            .all(|&p| u32::from(p) >= LOWEST && u32::from(p) < low));
        let distinct: std::collections::HashSet<_> = ports.iter().collect();
        assert_eq!(distinct.len(), ports.len(), "no port twice in one process");
    }
}
