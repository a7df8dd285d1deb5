//! Readiness and health of an engine (R-OP-4). `/ready` answers 200 only while every component
//! is up — the store answers a read and its last write did not fail, Kafka answers (when configured), the subscription index is
//! loaded, every shard runs — and 503 with the ones that are not; `/health` lists each component
//! with its state and last error; `/metrics` has `streaming_hub_component_up`. A store or broker outage
//! shows within seconds (the store is read on each check, the broker every five seconds by the
//! consumer thread) and clears as soon as it answers again.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use crate::matching::follow::Subscriptions;
use crate::store::Store;

/// How long the store has to answer a readiness read.
const STORE_WITHIN: Duration = Duration::from_secs(2);
/// A broker check older than this no longer says the broker is up.
pub const KAFKA_STALE_MS: i64 = 15_000;

/// What the last check of one component found.
#[derive(Debug, Default)]
pub struct ComponentState {
    up: AtomicBool,
    checked_ms: AtomicI64,
    last_error: Mutex<Option<String>>,
}

impl ComponentState {
    pub fn ok(&self, now_ms: i64) {
        self.up.store(true, Ordering::Release);
        self.checked_ms.store(now_ms, Ordering::Release);
    }

    /// Down, with why (kept as the last error after it recovers).
    pub fn failed(&self, error: &str, now_ms: i64) {
        self.up.store(false, Ordering::Release);
        self.checked_ms.store(now_ms, Ordering::Release);
        if let Ok(mut e) = self.last_error.lock() {
            *e = Some(error.to_owned());
        }
    }

    fn last_error(&self) -> Option<String> {
        self.last_error.lock().ok().and_then(|e| e.clone())
    }
}

/// One component as `/health` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Component {
    pub name: &'static str,
    /// `up` or `down`.
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

impl Component {
    fn of(name: &'static str, up: bool, last_error: Option<String>) -> Self {
        Self {
            name,
            state: if up { "up" } else { "down" },
            last_error,
        }
    }

    pub fn is_up(&self) -> bool {
        self.state == "up"
    }
}

/// What the engine's readiness looks at.
#[derive(Debug)]
pub struct Readiness {
    pub store: Arc<dyn Store>,
    pub store_state: ComponentState,
    /// Kept by the consumer thread; `None` without Kafka.
    pub kafka: Option<Arc<ComponentState>>,
    /// The delivery index (`None` when delivery is off).
    pub subscriptions: Option<Arc<Subscriptions>>,
    pub shards: usize,
    /// Shards whose executor has started; `shards_done` once they all stopped.
    pub shards_started: Arc<AtomicUsize>,
    pub shards_done: Arc<AtomicBool>,
}

impl Readiness {
    /// Asks every component now (the store with a read; the others from their last state).
    pub async fn check(&self) -> Vec<Component> {
        let now = crate::clock::now_ms();
        let read = tokio::time::timeout(
            STORE_WITHIN,
            self.store
                .delivery_stats(hub_core::control_store::PROBE_TENANT, uuid::Uuid::nil()),
        )
        .await;
        match read {
            Ok(Ok(_)) => match self.store.write_failure() {
                // It answers reads but cannot write (a full disk): not ready, and why.
                Some(why) => self
                    .store_state
                    .failed(&format!("writes failing: {why}"), now),
                None => self.store_state.ok(now),
            },
            Ok(Err(e)) => self.store_state.failed(&e.to_string(), now),
            Err(_) => self
                .store_state
                .failed(&format!("no answer within {STORE_WITHIN:?}"), now),
        }
        let mut all = vec![Component::of(
            "store",
            self.store_state.up.load(Ordering::Acquire),
            self.store_state.last_error(),
        )];
        if let Some(kafka) = &self.kafka {
            let fresh = now - kafka.checked_ms.load(Ordering::Acquire) <= KAFKA_STALE_MS;
            let up = fresh && kafka.up.load(Ordering::Acquire);
            let error = kafka.last_error().or_else(|| {
                (!fresh).then(|| "not checked yet, or the consumer thread is stuck".into())
            });
            all.push(Component::of("kafka", up, error));
        }
        if self.subscriptions.is_some() {
            all.push(Component::of("subscription_index", true, None));
        }
        let started = self.shards_started.load(Ordering::Acquire);
        let running = started >= self.shards && !self.shards_done.load(Ordering::Acquire);
        let shards_error =
            (!running).then(|| format!("{started} of {} shards running", self.shards));
        all.push(Component::of("shards", running, shards_error));
        all
    }
}
