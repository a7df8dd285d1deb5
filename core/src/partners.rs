//! Partners (R-CP-17): funds and originators that manage their own push subscriptions through a
//! gateway that relays their calls. A partner subscription delivers only while Access Manager
//! shows the partner active; this is the hub's view of that, kept by both the control plane
//! (which refuses relayed calls when no directory is configured) and the engine's lanes (which
//! hold a partner's deliveries while it is not known active).
//!
//! The directory asks `GET {STREAMING_HUB_PARTNERS_URL}/partners/{id}` (bearer
//! `STREAMING_HUB_PARTNERS_TOKEN` when set) and reads `{"status": "active" | …}`; a 404 is an
//! unknown partner, so inactive. Answers are cached: a lane never waits on Access Manager. Each
//! partner asked about is re-read every `refresh` (30 s by default); an answer older than
//! three refreshes (Access Manager unreachable meanwhile) no longer counts, so deliveries are
//! held rather than sent on stale news — the staleness bound.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a lane may do for a partner's subscription now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartnerState {
    /// Access Manager shows the partner active (within the staleness bound).
    Active,
    /// Access Manager shows it inactive or does not know it.
    Inactive,
    /// Not known yet, or the last answer is too old: hold, and ask.
    Unknown,
}

#[derive(Debug, Clone, Copy)]
struct Known {
    active: bool,
    at_ms: i64,
}

/// The cached answers of Access Manager about partners.
#[derive(Debug)]
pub struct PartnerDirectory {
    url: String,
    token: Option<String>,
    refresh: Duration,
    client: reqwest::Client,
    /// Every partner asked about, with its last answer (if any).
    known: Mutex<HashMap<String, Option<Known>>>,
}

/// How many refresh periods an answer stays good for.
const STALE_AFTER_REFRESHES: i64 = 3;

impl PartnerDirectory {
    pub fn new(url: &str, token: Option<String>, refresh: Duration) -> Result<Self, String> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Self {
            url: url.trim_end_matches('/').to_owned(),
            token,
            refresh,
            client,
            known: Mutex::new(HashMap::new()),
        })
    }

    fn refresh_ms(&self) -> i64 {
        i64::try_from(self.refresh.as_millis()).unwrap_or(i64::MAX)
    }

    /// The partner's state from the cache; an unknown partner is remembered, so the next
    /// refresh asks about it.
    pub fn state(&self, partner: &str, now_ms: i64) -> PartnerState {
        let Ok(mut known) = self.known.lock() else {
            return PartnerState::Unknown;
        };
        match known.get(partner) {
            Some(Some(k)) if now_ms - k.at_ms <= STALE_AFTER_REFRESHES * self.refresh_ms() => {
                if k.active {
                    PartnerState::Active
                } else {
                    PartnerState::Inactive
                }
            }
            Some(_) => PartnerState::Unknown,
            None => {
                known.insert(partner.to_owned(), None);
                PartnerState::Unknown
            }
        }
    }

    /// Asks Access Manager about one partner now.
    pub async fn ask(&self, partner: &str) -> Result<bool, String> {
        let url = format!("{}/partners/{}", self.url, encode(partner));
        let mut request = self.client.get(url);
        if let Some(t) = &self.token {
            request = request.bearer_auth(t);
        }
        let response = request.send().await.map_err(|e| e.to_string())?;
        match response.status().as_u16() {
            404 => Ok(false),
            200 => {
                let body: serde_json::Value = response.json().await.map_err(|e| e.to_string())?;
                Ok(body["status"].as_str() == Some("active"))
            }
            other => Err(format!("Access Manager answered {other}")),
        }
    }

    /// Re-reads every partner asked about; an error keeps the previous answer (which ages out).
    pub async fn refresh_all(&self, now_ms: i64) {
        let partners: Vec<String> = match self.known.lock() {
            Ok(k) => k.keys().cloned().collect(),
            Err(_) => return,
        };
        for partner in partners {
            match self.ask(&partner).await {
                Ok(active) => {
                    if let Ok(mut k) = self.known.lock() {
                        k.insert(
                            partner,
                            Some(Known {
                                active,
                                at_ms: now_ms,
                            }),
                        );
                    }
                }
                Err(e) => {
                    tracing::warn!(partner, error = %e, "asking Access Manager about a partner failed")
                }
            }
        }
    }

    /// Refreshes on the current tokio runtime, every `refresh`, and soon after a new partner is
    /// asked about (a first delivery waits about a second, not a whole period).
    pub fn spawn_refresh(self: &Arc<Self>, now_ms: fn() -> i64) {
        let directory = Arc::clone(self);
        tokio::spawn(async move {
            let mut last_full = tokio::time::Instant::now();
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let due = last_full.elapsed() >= directory.refresh;
                let waiting = directory
                    .known
                    .lock()
                    .map(|k| k.values().any(Option::is_none))
                    .unwrap_or(false);
                if due || waiting {
                    directory.refresh_all(now_ms()).await;
                    if due {
                        last_full = tokio::time::Instant::now();
                    }
                }
            }
        });
    }
}

/// Percent-encodes a path segment.
fn encode(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn directory() -> PartnerDirectory {
        PartnerDirectory::new("http://127.0.0.1:9", None, Duration::from_secs(30)).expect("dir")
    }

    #[test]
    fn r_cp_17_a_partner_is_held_until_known_active_and_again_once_the_answer_is_stale() {
        let d = directory();
        assert_eq!(d.state("fund-1", 0), PartnerState::Unknown, "never asked");
        d.known.lock().expect("lock").insert(
            "fund-1".into(),
            Some(Known {
                active: true,
                at_ms: 1_000,
            }),
        );
        assert_eq!(d.state("fund-1", 1_000), PartnerState::Active);
        assert_eq!(d.state("fund-1", 1_000 + 90_000), PartnerState::Active);
        assert_eq!(
            d.state("fund-1", 1_000 + 90_001),
            PartnerState::Unknown,
            "older than three refreshes: no longer trusted"
        );
        d.known.lock().expect("lock").insert(
            "fund-2".into(),
            Some(Known {
                active: false,
                at_ms: 1_000,
            }),
        );
        assert_eq!(d.state("fund-2", 2_000), PartnerState::Inactive);
    }

    #[test]
    fn r_cp_17_partner_ids_are_encoded_in_the_path() {
        assert_eq!(encode("fund/../x y"), "fund%2F..%2Fx%20y");
    }
}
