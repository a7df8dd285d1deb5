//! What `hubctl` prints: aligned columns for people, JSON for scripts. Results go to stdout,
//! errors and notes to stderr.
#![allow(clippy::print_stdout)]

use serde_json::{json, Value};
use tonic::Status;
use tonic_types::StatusExt;

use hub_control::grpc::pb;

fn subscription_json(s: &pb::Subscription) -> Value {
    let mut v = json!({
        "id": s.id, "name": s.name, "sink_kind": s.sink_kind, "endpoint": s.endpoint,
        "event_types": s.event_types, "schema_major": s.schema_major, "enabled": s.enabled,
        "paused": s.paused, "verification_state": s.verification_state, "revision": s.revision,
        "etag": s.etag, "created_at": s.created_at, "updated_at": s.updated_at,
        "last_success_at": s.last_success_at, "last_failure_at": s.last_failure_at,
    });
    if let Some(secret) = &s.secret {
        v["secret"] = secret.clone().into();
    }
    v
}

fn print_json(v: &Value) {
    println!("{v}");
}

fn state(s: &pb::Subscription) -> &str {
    match (s.paused, s.enabled) {
        (true, _) => "paused",
        (false, false) => "stopped",
        _ => s.verification_state.as_str(),
    }
}

fn row(s: &pb::Subscription) -> String {
    format!(
        "{:<36}  {:<24}  {:<11}  {:<20}  {}",
        s.id,
        s.name,
        s.sink_kind,
        state(s),
        s.endpoint.as_deref().unwrap_or("-")
    )
}

const HEADER: &str = "ID                                    NAME                      KIND         STATE                 ENDPOINT";

pub fn subscription(json: bool, s: &pb::Subscription) {
    if json {
        return print_json(&subscription_json(s));
    }
    println!("{HEADER}\n{}", row(s));
    println!("etag {}  revision {}", s.etag, s.revision);
    if let Some(secret) = &s.secret {
        println!("secret {secret}  (shown once: keep it)");
    }
}

pub fn subscription_page(json: bool, page: &pb::ListSubscriptionsResponse) {
    if json {
        let items: Vec<Value> = page.items.iter().map(subscription_json).collect();
        return print_json(&json!({"items": items, "next_cursor": page.next_cursor}));
    }
    println!("{HEADER}");
    for s in &page.items {
        println!("{}", row(s));
    }
    if let Some(c) = &page.next_cursor {
        println!("more: --cursor {c}");
    }
}

pub fn probe(json: bool, p: &pb::ProbeResult) {
    if json {
        return print_json(&json!({
            "outcome": p.outcome, "verification_state": p.verification_state,
            "enabled": p.enabled, "paused": p.paused, "error_class": p.error_class,
            "status_code": p.status_code, "detail": p.detail,
        }));
    }
    let why = [
        p.error_class.clone(),
        p.status_code.map(|c| format!("HTTP {c}")),
        p.detail.clone(),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(", ");
    println!(
        "{}  ({}){}",
        p.outcome,
        p.verification_state,
        if why.is_empty() {
            String::new()
        } else {
            format!(": {why}")
        }
    );
}

pub fn rotated(json: bool, r: &pb::RotatedSecret) {
    if json {
        return print_json(
            &json!({"secret": r.secret, "overlap_until": r.overlap_until, "etag": r.etag}),
        );
    }
    println!("secret {}  (shown once: keep it)", r.secret);
    if let Some(until) = &r.overlap_until {
        println!("the previous secret also signs until {until}");
    }
}

pub fn deleted(json: bool, id: &str) {
    if json {
        return print_json(&json!({"deleted": id}));
    }
    println!("deleted {id}");
}

pub fn event(json: bool, e: &pb::Event) {
    let data = String::from_utf8_lossy(&e.data);
    if json {
        let data: Value = serde_json::from_slice(&e.data).unwrap_or_else(|_| data.clone().into());
        return print_json(&json!({
            "seq": e.seq, "id": e.id, "key": e.key, "origin": e.origin,
            "schema_version": e.schema_version, "time": e.time, "subject": e.subject,
            "content_type": e.content_type, "data": data, "cursor": e.cursor,
        }));
    }
    println!("{:>8}  {}  {:<32}  {}", e.seq, e.time, e.key, data);
}

pub fn page(json: bool, page: &pb::PullResponse) {
    for e in &page.items {
        event(json, e);
    }
    if !json {
        println!("next_after {}", page.next_after);
    }
}

pub fn catalog(json: bool, c: &pb::CatalogList) {
    let entry = |e: &pb::CatalogEntry| json!({"eventKey": e.event_key, "origin": e.origin, "majors": e.majors});
    if json {
        let items: Vec<Value> = c.items.iter().map(entry).collect();
        let hub: Vec<Value> = c.hub.iter().map(entry).collect();
        return print_json(&json!({"items": items, "hub": hub}));
    }
    println!("{:<40}  {:<16}  MAJORS", "EVENT KEY", "ORIGIN");
    for e in c.items.iter().chain(&c.hub) {
        let majors: Vec<String> = e.majors.iter().map(u32::to_string).collect();
        println!(
            "{:<40}  {:<16}  {}",
            e.event_key,
            e.origin,
            majors.join(",")
        );
    }
}

/// One line for a refused call: the error code and the message.
pub fn status_line(s: &Status) -> String {
    match s.get_details_error_info() {
        Some(info) => format!("{} ({}): {}", info.reason, grpc_name(s), s.message()),
        None => format!("{}: {}", grpc_name(s), s.message()),
    }
}

fn grpc_name(s: &Status) -> String {
    format!("{:?}", s.code())
}

fn attempt_json(a: &pb::Attempt) -> Value {
    json!({"at": a.at, "outcome": a.outcome, "duration_ms": a.duration_ms,
        "error_class": a.error_class, "status_code": a.status_code, "detail": a.detail})
}

fn attempt_line(a: &pb::Attempt) -> String {
    let why = [
        a.error_class.clone(),
        a.status_code.map(|c| format!("HTTP {c}")),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(" ");
    format!(
        "{}  {:<7}  {:>6} ms  {}",
        a.at, a.outcome, a.duration_ms, why
    )
}

pub fn dead_letters(json: bool, page: &pb::ListDeadLettersResponse) {
    if json {
        let items: Vec<Value> = page
            .items
            .iter()
            .map(|d| {
                json!({"id": d.id, "event_id": d.event_id, "seq": d.seq, "reason": d.reason,
                    "attempts": d.attempts, "received_at": d.received_at, "dead_at": d.dead_at,
                    "last_attempt": d.last_attempt.as_ref().map(attempt_json)})
            })
            .collect();
        return print_json(&json!({"items": items, "next_cursor": page.next_cursor}));
    }
    println!("{:<32}  {:>8}  {:<36}  REASON", "ID", "SEQ", "EVENT");
    for d in &page.items {
        println!(
            "{:<32}  {:>8}  {:<36}  {}",
            d.id, d.seq, d.event_id, d.reason
        );
    }
    if let Some(c) = &page.next_cursor {
        println!("more: --cursor {c}");
    }
}

pub fn replayed(json: bool, n: u64) {
    if json {
        return print_json(&json!({"replayed": n}));
    }
    println!("replayed {n}");
}

pub fn health(json: bool, h: &pb::DeliveryHealth) {
    if json {
        let auto = h.auto_disable.as_ref().map(|a| {
            json!({"enabled": a.enabled, "window_hours": a.window_hours,
                "would_disable": a.would_disable, "disabled_reason": a.disabled_reason})
        });
        return print_json(&json!({
            "status": h.status, "window_start": h.window_start, "snapshot_at": h.snapshot_at,
            "recent_outcomes": h.recent_outcomes.iter().map(attempt_json).collect::<Vec<_>>(),
            "delivered": h.delivered, "failed_attempts": h.failed_attempts,
            "dead_letters": h.dead_letters, "auto_disable": auto,
        }));
    }
    println!(
        "{}  delivered {}  failed attempts {}  dead letters {}",
        h.status, h.delivered, h.failed_attempts, h.dead_letters
    );
    for a in &h.recent_outcomes {
        println!("  {}", attempt_line(a));
    }
}

pub fn ownership(json: bool, view: &pb::OwnershipResponse) {
    if json {
        let engines: Vec<Value> = view
            .engines
            .iter()
            .map(|e| {
                let lanes: Vec<Value> = e
                    .lanes
                    .iter()
                    .map(|l| {
                        json!({"lane": l.lane, "shard": l.shard, "how": l.how, "topic": l.topic,
                            "partition": l.partition, "adopted_at_ms": l.adopted_at_ms,
                            "lag": l.lag, "holder": l.holder, "held_until_ms": l.held_until_ms,
                            "held_here": l.held_here, "pending": l.pending})
                    })
                    .collect();
                json!({"engine": e.engine, "instance": e.instance, "numbering": e.numbering,
                    "assignment_generation": e.assignment_generation,
                    "reported_at_ms": e.reported_at_ms, "lanes": lanes})
            })
            .collect();
        return print_json(&json!({ "engines": engines }));
    }
    let shown = |v: Option<String>| v.unwrap_or_else(|| "-".to_owned());
    println!(
        "{:<36}  {:>5}  {:<8}  {:<32}  {:>8}  {:>8}  HELD",
        "ENGINE", "SHARD", "HOW", "PARTITION", "LAG", "PENDING"
    );
    for e in &view.engines {
        for l in &e.lanes {
            let partition = match (&l.topic, l.partition) {
                (Some(t), Some(p)) => format!("{t}[{p}]"),
                _ => format!("lane {}", l.lane),
            };
            println!(
                "{:<36}  {:>5}  {:<8}  {:<32}  {:>8}  {:>8}  {}",
                e.instance.as_deref().unwrap_or(&e.engine),
                l.shard,
                l.how,
                partition,
                shown(l.lag.map(|n| n.to_string())),
                shown(l.pending.map(|n| n.to_string())),
                if l.held_here { "yes" } else { "no" }
            );
        }
    }
}
