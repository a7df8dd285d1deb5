//! Secrets at rest (R-SEC-1): signing secrets and credentials are stored only sealed with an AEAD
//! (ChaCha20-Poly1305) under a master key named by a key id, so master keys can rotate: new seals
//! use the current key, old ones open with the key their id names. The subscription it belongs to
//! is bound in as associated data, so a sealed secret moved to another row does not open.

use std::collections::HashMap;

use base64::Engine;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};

/// A sealed value as stored.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sealed {
    pub key_id: String,
    pub nonce: Vec<u8>,
    pub ciphertext: Vec<u8>,
}

impl std::fmt::Debug for Sealed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Sealed({}, {} bytes)",
            self.key_id,
            self.ciphertext.len()
        )
    }
}

/// A secret in memory: never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SealError {
    #[error("no master key with id {0}")]
    UnknownKey(String),
    #[error("a sealed value failed authentication")]
    Tampered,
    #[error("the system random source failed")]
    Random,
    #[error("master keys: {0}")]
    Config(String),
}

/// The master keys: one current (seals), all (open).
pub struct Keyring {
    current: String,
    keys: HashMap<String, LessSafeKey>,
    random: SystemRandom,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Keyring(current {}, {} keys)",
            self.current,
            self.keys.len()
        )
    }
}

impl Keyring {
    /// From `id:base64key,…`; the first is current. Each key is 32 bytes.
    pub fn parse(spec: &str) -> Result<Self, SealError> {
        let mut keys = HashMap::new();
        let mut current = None;
        for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (id, b64) = entry
                .split_once(':')
                .ok_or_else(|| SealError::Config("each key is id:base64".into()))?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|_| SealError::Config(format!("key {id} is not base64")))?;
            let unbound = UnboundKey::new(&CHACHA20_POLY1305, &bytes)
                .map_err(|_| SealError::Config(format!("key {id} must be 32 bytes")))?;
            keys.insert(id.to_owned(), LessSafeKey::new(unbound));
            current.get_or_insert_with(|| id.to_owned());
        }
        let current = current.ok_or_else(|| SealError::Config("no master key".into()))?;
        Ok(Self {
            current,
            keys,
            random: SystemRandom::new(),
        })
    }

    /// A fresh key spec `id:base64` (for a standalone hub's first start).
    pub fn generate_spec(id: &str) -> Result<String, SealError> {
        let mut key = [0u8; 32];
        SystemRandom::new()
            .fill(&mut key)
            .map_err(|_| SealError::Random)?;
        Ok(format!(
            "{id}:{}",
            base64::engine::general_purpose::STANDARD.encode(key)
        ))
    }

    pub fn seal(&self, plaintext: &[u8], bound_to: &str) -> Result<Sealed, SealError> {
        let key = self
            .keys
            .get(&self.current)
            .ok_or_else(|| SealError::UnknownKey(self.current.clone()))?;
        let mut nonce = [0u8; NONCE_LEN];
        self.random
            .fill(&mut nonce)
            .map_err(|_| SealError::Random)?;
        let mut buffer = plaintext.to_vec();
        key.seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(bound_to.as_bytes()),
            &mut buffer,
        )
        .map_err(|_| SealError::Tampered)?;
        Ok(Sealed {
            key_id: self.current.clone(),
            nonce: nonce.to_vec(),
            ciphertext: buffer,
        })
    }

    /// Whether this keyring holds the master key `key_id`.
    pub fn holds(&self, key_id: &str) -> bool {
        self.keys.contains_key(key_id)
    }

    pub fn open(&self, sealed: &Sealed, bound_to: &str) -> Result<Secret, SealError> {
        let key = self
            .keys
            .get(&sealed.key_id)
            .ok_or_else(|| SealError::UnknownKey(sealed.key_id.clone()))?;
        let nonce: [u8; NONCE_LEN] = sealed
            .nonce
            .as_slice()
            .try_into()
            .map_err(|_| SealError::Tampered)?;
        let mut buffer = sealed.ciphertext.clone();
        let plain = key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(bound_to.as_bytes()),
                &mut buffer,
            )
            .map_err(|_| SealError::Tampered)?;
        String::from_utf8(plain.to_vec())
            .map(Secret)
            .map_err(|_| SealError::Tampered)
    }

    /// A webhook signing secret in the Standard Webhooks form: `whsec_` + base64 of 32 random
    /// bytes.
    pub fn new_signing_secret(&self) -> Result<Secret, SealError> {
        let mut raw = [0u8; 32];
        self.random.fill(&mut raw).map_err(|_| SealError::Random)?;
        Ok(Secret(format!(
            "whsec_{}",
            base64::engine::general_purpose::STANDARD.encode(raw)
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_sec_1_sealed_secrets_open_only_with_their_key_and_binding() {
        let old = Keyring::generate_spec("k0").expect("spec");
        let ring0 = Keyring::parse(&old).expect("ring");
        let secret = ring0.new_signing_secret().expect("secret");
        assert!(secret.0.starts_with("whsec_"));
        assert_eq!(format!("{secret:?}"), "Secret(…)", "Debug never shows it");
        let sealed = ring0.seal(secret.0.as_bytes(), "t-1/sub-1").expect("seal");
        assert!(!sealed.ciphertext.windows(6).any(|w| w == b"whsec_"));
        assert_eq!(ring0.open(&sealed, "t-1/sub-1").expect("open"), secret);
        assert_eq!(
            ring0.open(&sealed, "t-2/sub-1"),
            Err(SealError::Tampered),
            "bound to its row"
        );

        // Rotation: a new current key seals; the old one still opens old seals.
        let rotated = Keyring::parse(&format!(
            "{},{old}",
            Keyring::generate_spec("k1").expect("spec")
        ))
        .expect("ring");
        assert_eq!(
            rotated.open(&sealed, "t-1/sub-1").expect("old opens"),
            secret
        );
        assert_eq!(rotated.seal(b"x", "b").expect("seal").key_id, "k1");
        let mut tampered = sealed.clone();
        tampered.ciphertext[0] ^= 1;
        assert_eq!(
            rotated.open(&tampered, "t-1/sub-1"),
            Err(SealError::Tampered)
        );
        assert!(matches!(
            Keyring::parse("k:short"),
            Err(SealError::Config(_))
        ));
    }
}
