//! Retention and space of the log store (R-OP-5).
//!
//! Expiry is a change like any other: a tenant's events up to a `seq`, forensic rows up to a
//! number, one dead letter or lasting dedup mark at a time leave the indexes at once and the
//! log remembers it. The bytes go when their segment does: the oldest segment is dropped once
//! none of its events is still kept, after what else still lives in it (jobs, dead letters,
//! lasting dedup marks, forensic rows) is written again at the log's head. Segments go oldest
//! first only, so a removal recorded in a dropped segment can never bring back something an
//! older, kept segment still holds.
//!
//! Units, heads, statistics, pull positions and counters are few: every new segment starts with
//! all of them ([`snapshot`]), so they never need carrying.

use super::record::Change;
use super::writes::Tx;
use crate::store::{Expired, Retention, StoreError};

/// One retention pass at `now_ms`: records what expired.
pub(super) fn expire(tx: &mut Tx<'_>, retention: Retention, now_ms: i64) -> Expired {
    let horizon = |window_s: u32| now_ms.saturating_sub(i64::from(window_s) * 1_000);
    let mut expired = Expired::default();
    expire_events(tx, retention, horizon(retention.events_s), &mut expired);
    expire_lasting_marks(tx, now_ms, &mut expired);
    let forensics = horizon(retention.forensics_s);
    if let Some(through) = oldest_run(&tx.state.quarantine, forensics) {
        expired.quarantined += tx.state.quarantine.range(..=through).count() as u64;
        tx.change(Change::QuarantineExpired { through });
    }
    if let Some(through) = oldest_run(&tx.state.dlq, forensics) {
        expired.dlq_observations += tx.state.dlq.range(..=through).count() as u64;
        tx.change(Change::DlqExpired { through });
    }
    let dead_horizon = horizon(retention.events_s);
    let old_letters: Vec<_> = tx
        .state
        .dead
        .iter()
        .filter(|(_, (letter, _))| letter.dead_at_ms < dead_horizon)
        .map(|(key, _)| key.clone())
        .collect();
    for (tenant, subscription, job) in old_letters {
        tx.change(Change::DeadGone {
            tenant,
            subscription: uuid::Uuid::from_u128(subscription),
            job,
        });
        expired.dead_letters += 1;
    }
    expired
}

/// The last number of the run of forensic rows, from the oldest, that arrived before `horizon`.
fn oldest_run(
    rows: &std::collections::BTreeMap<u64, super::state::Forensic>,
    horizon: i64,
) -> Option<u64> {
    rows.iter()
        .take_while(|(_, row)| row.at_ms < horizon)
        .last()
        .map(|(number, _)| *number)
}

/// Each tenant's oldest events received before `horizon` go; their dedup marks go with them,
/// or stay until the dedup window ends when that is longer.
fn expire_events(tx: &mut Tx<'_>, retention: Retention, horizon: i64, expired: &mut Expired) {
    let mut old_by_tenant = Vec::new();
    for (tenant, events) in &tx.state.events {
        let old: Vec<(u64, u128, i64)> = events
            .iter()
            .take_while(|(_, e)| e.received_at_ms < horizon)
            .map(|(seq, e)| (seq, e.id.as_u128(), e.received_at_ms))
            .collect();
        if !old.is_empty() {
            old_by_tenant.push((tenant.clone(), old));
        }
    }
    let marks_outlive_events = retention.dedup_s > retention.events_s;
    for (tenant, old) in old_by_tenant {
        let through = old.last().map_or(0, |(seq, _, _)| *seq);
        tx.change(Change::EventsExpired {
            tenant: tenant.clone(),
            through,
        });
        expired.events += old.len() as u64;
        for (seq, id, received_at_ms) in old {
            if marks_outlive_events {
                let ends_at_ms =
                    received_at_ms.saturating_add(i64::from(retention.dedup_s) * 1_000);
                tx.change(Change::DedupMark {
                    tenant: tenant.clone(),
                    id,
                    seq,
                    ends_at_ms,
                });
            } else {
                expired.dedup_marks += 1;
            }
        }
    }
}

fn expire_lasting_marks(tx: &mut Tx<'_>, now_ms: i64, expired: &mut Expired) {
    let ended: Vec<(i64, String, u128)> = tx
        .state
        .lasting_marks
        .range(..(now_ms, String::new(), 0))
        .map(|(key, _)| key.clone())
        .collect();
    for (ends_at_ms, tenant, id) in ended {
        tx.change(Change::DedupGone {
            tenant,
            id,
            ends_at_ms,
        });
        expired.dedup_marks += 1;
    }
}

/// Carries forward what lives in the oldest segments that keep no event (never the active
/// one), oldest first, and marks them spent.
pub(super) fn drop_spent_segments(tx: &mut Tx<'_>) -> Result<(), StoreError> {
    let active = tx.segments.active();
    for seg in tx.segments.numbers() {
        let keeps_events = tx.state.live_events.get(&seg).copied().unwrap_or(0) > 0;
        if seg == active || keeps_events {
            break;
        }
        carry_forward(tx, seg)?;
        tx.spent.push(seg);
    }
    Ok(())
}

/// Writes again at the head what still lives in segment `seg`, so the segment may go.
fn carry_forward(tx: &mut Tx<'_>, seg: u32) -> Result<(), StoreError> {
    let jobs: Vec<_> = (tx.state.jobs.iter())
        .filter(|(_, e)| e.seg == seg)
        .filter_map(|(id, _)| tx.state.job(id))
        .collect();
    for (job, leased) in jobs {
        tx.change(Change::Job { job, leased });
    }
    let letters: Vec<_> = tx
        .state
        .dead
        .values()
        .filter(|(_, s)| *s == seg)
        .map(|(letter, _)| letter.clone())
        .collect();
    for letter in letters {
        tx.change(Change::Dead(letter));
    }
    let marks: Vec<_> = tx
        .state
        .lasting_marks
        .iter()
        .filter(|(_, (_, s))| *s == seg)
        .map(|(key, (seq, _))| (key.clone(), *seq))
        .collect();
    for ((ends_at_ms, tenant, id), seq) in marks {
        tx.change(Change::DedupMark {
            tenant,
            id,
            seq,
            ends_at_ms,
        });
    }
    let forensic_locs: Vec<_> = (tx.state.quarantine.values())
        .chain(tx.state.dlq.values())
        .filter(|row| row.loc.seg == seg)
        .map(|row| row.loc)
        .collect();
    for loc in forensic_locs {
        let change = tx.read(loc)?.into_change()?;
        tx.change(change);
    }
    Ok(())
}

/// What every segment starts with: the few things never carried forward.
pub(super) fn snapshot(tx: &mut Tx<'_>) {
    let mut changes = Vec::new();
    for ((topic, partition), (generation, next)) in &tx.state.units {
        changes.push(Change::Unit {
            topic: topic.clone(),
            partition: *partition,
            generation: *generation,
            next: *next,
        });
    }
    for (tenant, seq) in &tx.state.heads {
        changes.push(Change::Head {
            tenant: tenant.clone(),
            seq: *seq,
        });
    }
    for ((tenant, subscription), stats) in &tx.state.stats {
        changes.push(Change::Stats {
            tenant: tenant.clone(),
            subscription: *subscription,
            stats: stats.clone(),
        });
    }
    for ((tenant, subscription), position) in &tx.state.pulls {
        changes.push(Change::Pull {
            tenant: tenant.clone(),
            subscription: *subscription,
            position: *position,
        });
    }
    changes.push(Change::Counters {
        quarantine: tx.state.next_quarantine,
        dlq: tx.state.next_dlq,
    });
    for change in changes {
        tx.change(change);
    }
}
