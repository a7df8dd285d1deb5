//! `kill-engine:1` with `--engines N` (issue 18): SIGKILL one engine of several on one CQL
//! keyspace, mid-run, and do not restart it. The others must take its partitions and its jobs:
//! the engine holding the most lanes at the kill's moment is the one killed, and the rebalance
//! time reported is from the kill until the survivors hold every lane the dead engine held (by
//! the group's reassignment or as strays, whichever comes first). Nothing may be lost; repeats
//! are bounded as for any kill.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::{Ctx, Injection, STALL_LIMIT};
use crate::hub::Hub;

/// The lanes an engine holds now (assigned or adopted as strays), from `/admin/ownership`.
async fn held_lanes(hub: &Hub, token: &str) -> anyhow::Result<BTreeSet<u64>> {
    let view: serde_json::Value = reqwest::Client::new()
        .get(format!("{}/admin/ownership", hub.url))
        .bearer_auth(token)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    Ok(view["lanes"]
        .as_array()
        .map(|lanes| {
            lanes
                .iter()
                .filter(|l| l["held_here"] == true)
                .filter_map(|l| l["lane"].as_u64())
                .collect()
        })
        .unwrap_or_default())
}

/// At half the deliveries, kills the engine of `engines` holding the most lanes (so the others
/// always have lanes to take over: the first started, killed before, twice held none in CI) and
/// waits until the others hold all its lanes. `engines` is left with the survivors.
pub(super) async fn kill_engine(
    ctx: &Ctx<'_>,
    engines: &mut Vec<Hub>,
    token: &str,
) -> anyhow::Result<Vec<Injection>> {
    anyhow::ensure!(engines.len() > 1, "kill-engine needs two engines or more");
    ctx.wait_for_share((1, 2), 0, "the kill's moment").await?;
    let mut held = Vec::with_capacity(engines.len());
    for engine in engines.iter() {
        held.push(held_lanes(engine, token).await?);
    }
    let (most, lanes) = (held.into_iter().enumerate())
        .max_by_key(|(_, lanes)| lanes.len())
        .unwrap_or_default();
    let victim = engines.remove(most);
    let survivors: Vec<&Hub> = engines.iter().collect();
    let delivered_at = ctx.delivered();
    let at_s = ctx.t0.elapsed().as_secs_f64();
    victim.kill_9()?;
    let killed = Instant::now();
    eprintln!(
        "[faults] killed one engine at {at_s:.1} s ({} lanes), {delivered_at} of {} delivered",
        lanes.len(),
        ctx.expected
    );
    loop {
        let mut held = BTreeSet::new();
        for hub in &survivors {
            held.extend(held_lanes(hub, token).await?);
        }
        if lanes.is_subset(&held) {
            break;
        }
        anyhow::ensure!(
            killed.elapsed() < STALL_LIMIT,
            "the other engines did not take the killed engine's lanes within {STALL_LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let taken = killed.elapsed().as_secs_f64();
    eprintln!("[faults] the other engines hold its lanes {taken:.1} s after the kill");
    Ok(vec![Injection {
        n: 1,
        at_s,
        delivered_at,
        recovered_after_s: taken,
        duplicates: 0,
        note: format!(
            "{} lanes of the killed engine held by the others {taken:.1} s after the kill",
            lanes.len()
        ),
        killed_at: Some(killed),
        failed: None,
    }])
}
