//! A webhook's signing secrets as sealed (R-CP-9, R-DI-12): the current secret and, during a
//! rotation overlap, the previous one with the overlap's end. Before any rotation the sealed
//! text is the bare secret (`whsec_…`); after one it is this record as JSON — both open the
//! same way. During the overlap every delivery and probe is signed with both; after it, with the
//! current secret alone. A second rotation during an overlap keeps only the newest previous
//! secret.

use serde::{Deserialize, Serialize};

use super::signature::{BadSecret, SigningKey};
use super::Keys;

/// How long the previous secret keeps signing after a rotation (R-CP-9: 24 h).
pub const OVERLAP_MS: i64 = 24 * 3_600_000;

#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SigningSecrets {
    pub current: String,
    pub previous: Option<String>,
    pub previous_until_ms: Option<i64>,
}

impl std::fmt::Debug for SigningSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningSecrets")
            .field("previous_until_ms", &self.previous_until_ms)
            .finish_non_exhaustive()
    }
}

impl SigningSecrets {
    pub fn new(current: String) -> Self {
        Self {
            current,
            previous: None,
            previous_until_ms: None,
        }
    }

    /// Reads the sealed text: a bare secret, or the record.
    pub fn parse(plain: &str) -> Option<Self> {
        if plain.starts_with('{') {
            serde_json::from_str(plain).ok()
        } else {
            Some(Self::new(plain.to_owned()))
        }
    }

    /// The text to seal.
    pub fn to_plain(&self) -> String {
        match self.previous {
            None => self.current.clone(),
            Some(_) => serde_json::to_string(self).unwrap_or_default(),
        }
    }

    /// After a rotation at `now_ms` to `new`: the current secret signs on as the previous one
    /// for `overlap_ms`.
    pub fn rotated(&self, new: String, now_ms: i64, overlap_ms: i64) -> Self {
        Self {
            current: new,
            previous: Some(self.current.clone()),
            previous_until_ms: Some(now_ms + overlap_ms),
        }
    }

    /// The keys that sign at `now_ms`.
    pub fn keys(&self, now_ms: i64) -> Result<Keys, BadSecret> {
        let current = SigningKey::from_secret(&self.current)?;
        let previous = match (&self.previous, self.previous_until_ms) {
            (Some(p), Some(until)) if now_ms < until => Some(SigningKey::from_secret(p)?),
            _ => None,
        };
        Ok(Keys { current, previous })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const B: &str = "whsec_c2VjcmV0LW9sZC1zZWNyZXQtb2xk";
    const C: &str = "whsec_Y3VycmVudC1zZWNyZXQtY3VycmVudA==";

    #[test]
    fn r_cp_9_a_rotation_signs_with_both_secrets_until_the_overlap_ends() {
        let before = SigningSecrets::parse(A).expect("a bare secret");
        assert_eq!(before.to_plain(), A, "unrotated secrets seal as before");
        assert!(before.keys(0).expect("keys").previous.is_none());
        let after = before.rotated(B.into(), 1_000, OVERLAP_MS);
        let sealed = after.to_plain();
        assert!(
            !format!("{after:?}").contains("whsec_"),
            "Debug prints no secret"
        );
        let opened = SigningSecrets::parse(&sealed).expect("the record");
        assert_eq!(opened, after);
        assert!(
            opened.keys(1_000).expect("keys").previous.is_some(),
            "overlap"
        );
        assert!(
            opened
                .keys(1_000 + OVERLAP_MS)
                .expect("keys")
                .previous
                .is_none(),
            "after the overlap only the new secret signs"
        );
        let again = opened.rotated(C.into(), 2_000, OVERLAP_MS);
        assert_eq!(
            again.previous.as_deref(),
            Some(B),
            "only the newest previous is kept"
        );
        assert_eq!(again.current, C);
    }
}
