//! The signing keys of the webhooks one shard delivers to, opened once rather than per attempt
//! (issue 17): opening a sealed secret (an AEAD open, the binding's string, parsing, an HMAC key
//! schedule per secret) was ~3 % of a shard's CPU in a deliver-backlog profile, repeated for
//! every event of the same subscription.
//!
//! An entry is used only while the subscription's sealed secret is the very one it was opened
//! from (a rotation seals a new value) and, during a rotation's overlap, until the overlap ends
//! (then the previous key must stop signing). The keys stay in this process's memory, as they
//! did for the length of each attempt before; `Debug` shows only how many there are.

use std::collections::HashMap;
use std::rc::Rc;

use uuid::Uuid;

use super::Keys;
use crate::model::Subscription;
use crate::secrets::{Keyring, Sealed};
use crate::sink::outcome::Outcome;

/// Most subscriptions whose keys a cache keeps; past it the cache starts over (a shard with more
/// webhook destinations than this reopens some secrets, as every attempt did before).
pub const MOST_KEPT: usize = 4096;

struct Opened {
    sealed: Sealed,
    keys: Rc<Keys>,
    until_ms: i64,
}

/// One shard's opened signing keys, by subscription.
#[derive(Default)]
pub struct KeyCache {
    opened: HashMap<Uuid, Opened>,
}

impl std::fmt::Debug for KeyCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyCache({} subscriptions)", self.opened.len())
    }
}

impl KeyCache {
    /// `sub`'s signing keys at `now_ms`: kept ones while still valid, else opened afresh.
    pub fn keys(
        &mut self,
        keyring: &Keyring,
        sub: &Subscription,
        now_ms: i64,
    ) -> Result<Rc<Keys>, Outcome> {
        if let (Some(kept), Some(sealed)) = (self.opened.get(&sub.id), &sub.secret) {
            if kept.sealed == *sealed && now_ms < kept.until_ms {
                return Ok(kept.keys.clone());
            }
        }
        let (keys, until_ms) = crate::sink::open_signing(keyring, sub, now_ms)?;
        let keys = Rc::new(keys);
        if let Some(sealed) = &sub.secret {
            if self.opened.len() >= MOST_KEPT && !self.opened.contains_key(&sub.id) {
                self.opened.clear();
            }
            let opened = Opened {
                sealed: sealed.clone(),
                keys: keys.clone(),
                until_ms,
            };
            self.opened.insert(sub.id, opened);
        }
        Ok(keys)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.opened.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{binding, SinkKind, VerificationState};
    use crate::sink::webhook::secrets::{SigningSecrets, OVERLAP_MS};
    use crate::sink::webhook::signature::headers;

    fn keyring() -> Keyring {
        Keyring::parse(&Keyring::generate_spec("k1").expect("spec")).expect("keyring")
    }

    fn hook(keyring: &Keyring, secrets: &SigningSecrets) -> Subscription {
        let mut sub = Subscription {
            verification_state: VerificationState::Active,
            ..Subscription::new("t", "s", SinkKind::Webhook, 0)
        };
        seal(keyring, &mut sub, secrets);
        sub
    }

    fn seal(keyring: &Keyring, sub: &mut Subscription, secrets: &SigningSecrets) {
        let sealed = keyring.seal(secrets.to_plain().as_bytes(), &binding(sub));
        sub.secret = Some(sealed.expect("seal"));
    }

    /// What `keys` sign a fixed message as.
    fn signed(keys: &Keys) -> String {
        let id = reqwest::header::HeaderValue::from_static("id");
        let h = headers(&keys.current, keys.previous.as_ref(), &id, 1, b"{}");
        format!("{h:?}")
    }

    const A: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const B: &str = "whsec_c2VjcmV0LW9sZC1zZWNyZXQtb2xk";

    #[test]
    fn r_di_4_a_subscriptions_keys_are_opened_once_and_reused() {
        let keyring = keyring();
        let sub = hook(&keyring, &SigningSecrets::new(A.into()));
        let mut cache = KeyCache::default();
        let first = cache.keys(&keyring, &sub, 0).expect("keys");
        let again = cache.keys(&keyring, &sub, 1_000).expect("keys");
        assert!(Rc::ptr_eq(&first, &again), "the same opened keys");
        assert_eq!(cache.len(), 1);
        assert!(
            !format!("{cache:?}").contains("whsec_"),
            "Debug shows no key"
        );
    }

    /// R-CP-9: after a rotation the new sealed value is opened (both keys sign during the
    /// overlap), and once the overlap ends the previous key stops signing.
    #[test]
    fn r_cp_9_a_rotation_is_seen_at_once_and_its_overlap_ends_on_time() {
        let keyring = keyring();
        let before = SigningSecrets::new(A.into());
        let mut sub = hook(&keyring, &before);
        let mut cache = KeyCache::default();
        let plain = cache.keys(&keyring, &sub, 0).expect("keys");
        assert!(plain.previous.is_none());
        let rotated = before.rotated(B.into(), 10, OVERLAP_MS);
        seal(&keyring, &mut sub, &rotated);
        let during = cache.keys(&keyring, &sub, 20).expect("keys");
        assert!(during.previous.is_some(), "both sign during the overlap");
        assert_ne!(signed(&plain), signed(&during));
        let after = cache.keys(&keyring, &sub, 10 + OVERLAP_MS).expect("keys");
        assert!(
            after.previous.is_none(),
            "the previous key stops at the overlap's end"
        );
    }

    #[test]
    fn r_di_4_a_subscription_without_a_secret_is_refused_and_not_kept() {
        let keyring = keyring();
        let mut sub = hook(&keyring, &SigningSecrets::new(A.into()));
        sub.secret = None;
        let mut cache = KeyCache::default();
        assert!(cache.keys(&keyring, &sub, 0).is_err());
        assert_eq!(cache.len(), 0);
    }
}
