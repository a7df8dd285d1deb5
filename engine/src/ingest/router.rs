//! Which shard owns a Kafka partition. Every record of a partition goes to the same shard, so a
//! shard needs no cross-core lock for its partitions (DESIGN invariant 2, STYLE §11).

/// The owning shard of `(topic, partition)` among `shards`.
pub fn shard_for(topic: &str, partition: i32, shards: usize) -> usize {
    // FNV-1a over the topic spreads topics; adding the partition keeps one topic's partitions on
    // consecutive shards, which balances a topic with many partitions exactly.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in topic.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    (h.wrapping_add(partition.unsigned_abs() as u64) % shards.max(1) as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_topics_partitions_spread_evenly_over_shards() {
        let mut load = [0usize; 2];
        for p in 0..8 {
            load[shard_for("lerian.streaming.lender", p, 2)] += 1;
        }
        assert_eq!(load, [4, 4]);
        assert_eq!(shard_for("x", 3, 1), 0);
    }
}
