//! Access Manager bearer tokens (R-CP-1): JWTs validated against a configured key or key set
//! (JWKS, selected by `kid`) with the algorithm pinned; expiry, not-before, issue time (not in
//! the future beyond the leeway), issuer and audience (a string or an array) checked; the tenant
//! and permissions come from the token and scope every call.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{
    decode, decode_header, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation,
};
use serde::{Deserialize, Serialize};

use crate::error::ApiError;

/// What a caller may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    Get,
    Post,
    Patch,
    Delete,
}

impl Permission {
    fn claim(self) -> &'static str {
        match self {
            Permission::Get => "subscriptions:get",
            Permission::Post => "subscriptions:post",
            Permission::Patch => "subscriptions:patch",
            Permission::Delete => "subscriptions:delete",
        }
    }
}

/// The caller, as the token says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub subject: String,
    pub tenant: String,
    pub permissions: Vec<String>,
    /// Set when the call is a partner's, relayed by the gateway (R-CP-17): the token's
    /// `partner_id` claim.
    pub partner: Option<String>,
    /// The sources an `ingest` token may write over HTTP (R-SEC-4): the token's `sources`
    /// claim; `*` names every source.
    pub sources: Vec<String>,
}

/// The permission HTTP ingest requires (R-SEC-4), beside a `sources` claim naming the source.
pub const INGEST_PERMISSION: &str = "ingest";

impl Principal {
    /// R-SEC-4: 403 unless the token has the `ingest` permission and names `source` (or `*`)
    /// in its `sources` claim. Operator `admin` alone does not write events.
    pub fn may_ingest(&self, source: &str) -> Result<(), ApiError> {
        if !self.permissions.iter().any(|g| g == INGEST_PERMISSION) {
            return Err(ApiError::forbidden("the token lacks the ingest permission"));
        }
        if self.sources.iter().any(|s| s == "*" || s == source) {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!(
                "the token's sources do not include {source}"
            )))
        }
    }

    /// 403 unless the token has the operator `admin` permission: reads across every tenant
    /// (the engines' ownership). A partner's relayed call never has it.
    pub fn require_operator(&self) -> Result<(), ApiError> {
        if self.partner.is_none() && self.permissions.iter().any(|g| g == "admin") {
            Ok(())
        } else {
            Err(ApiError::forbidden(
                "the operator admin permission is required",
            ))
        }
    }

    /// 403 unless the token grants `p` (or operator `admin`).
    pub fn require(&self, p: Permission) -> Result<(), ApiError> {
        if self
            .permissions
            .iter()
            .any(|g| g == p.claim() || g == "admin")
        {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!(
                "the token lacks {}",
                p.claim()
            )))
        }
    }
}

/// The claims read from an Access Manager token.
#[derive(Debug, Serialize, Deserialize)]
pub struct Claims {
    pub sub: String,
    pub iss: String,
    pub aud: Audience,
    pub exp: u64,
    /// Issued at: refused when in the future beyond the leeway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iat: Option<u64>,
    #[serde(alias = "tenantId")]
    pub tenant_id: String,
    #[serde(default)]
    pub permissions: Vec<String>,
    /// A partner's call relayed by the gateway (R-CP-17).
    #[serde(default, alias = "partnerId", skip_serializing_if = "Option::is_none")]
    pub partner_id: Option<String>,
    /// The sources an ingest token may write (R-SEC-4).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<String>,
}

/// `aud`: one audience or several (RFC 7519 allows both).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Audience {
    One(String),
    Many(Vec<String>),
}

/// Seconds of clock skew tolerated on `exp`, `nbf` and `iat`.
const LEEWAY_S: u64 = 30;

/// How tokens are checked. One algorithm, pinned: a token signed with any other is refused.
#[derive(Clone)]
pub struct TokenVerifier {
    keys: Keys,
    validation: Validation,
    /// Told when a token names a `kid` the key set lacks: the key set's refresher re-reads it
    /// at once (rate-limited), so a key Access Manager just added is in use for the retry.
    unknown_kid: Arc<tokio::sync::Notify>,
}

/// A single key, or a key set by `kid` that can be replaced while the hub runs (JWKS refresh).
#[derive(Clone)]
enum Keys {
    One(DecodingKey),
    Set(Arc<RwLock<HashMap<String, DecodingKey>>>),
}

impl std::fmt::Debug for TokenVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenVerifier")
            .field("algorithms", &self.validation.algorithms)
            .finish_non_exhaustive()
    }
}

/// Key material as configured.
#[derive(Debug, Clone)]
pub enum VerifyKey {
    /// HS256 shared secret (the standalone hub's default, minted locally).
    Hs256(Vec<u8>),
    /// RS256 public key, PEM.
    Rs256Pem(Vec<u8>),
    /// ES256 public key, PEM.
    Es256Pem(Vec<u8>),
    /// A JWKS document (RS256 keys by `kid`), as read from a file or URL.
    Jwks(Vec<u8>),
}

impl TokenVerifier {
    pub fn new(key: &VerifyKey, issuer: &str, audience: &str) -> anyhow::Result<Self> {
        let (keys, alg) = match key {
            VerifyKey::Hs256(secret) => (
                Keys::One(DecodingKey::from_secret(secret)),
                Algorithm::HS256,
            ),
            VerifyKey::Rs256Pem(pem) => {
                (Keys::One(DecodingKey::from_rsa_pem(pem)?), Algorithm::RS256)
            }
            VerifyKey::Es256Pem(pem) => {
                (Keys::One(DecodingKey::from_ec_pem(pem)?), Algorithm::ES256)
            }
            VerifyKey::Jwks(doc) => (
                Keys::Set(Arc::new(RwLock::new(key_set(doc)?))),
                Algorithm::RS256,
            ),
        };
        let mut validation = Validation::new(alg);
        validation.set_issuer(&[issuer]);
        validation.set_audience(&[audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.validate_nbf = true;
        validation.leeway = LEEWAY_S;
        Ok(Self {
            keys,
            validation,
            unknown_kid: Arc::default(),
        })
    }

    /// Resolves when a token named a `kid` the key set lacks (for the refresher).
    pub async fn unknown_kid_seen(&self) {
        self.unknown_kid.notified().await;
    }

    /// Replaces the key set with a newly read JWKS document. A malformed one changes nothing
    /// (the keys in use stay) and is reported to the caller.
    pub fn refresh_jwks(&self, doc: &[u8]) -> anyhow::Result<usize> {
        let Keys::Set(keys) = &self.keys else {
            anyhow::bail!("this verifier has a single key, not a key set");
        };
        let fresh = key_set(doc)?;
        let n = fresh.len();
        if let Ok(mut k) = keys.write() {
            *k = fresh;
        }
        Ok(n)
    }

    /// The key that signed `token`: the single key, or the set's key of its `kid`.
    fn key_for(&self, token: &str) -> Result<DecodingKey, ApiError> {
        match &self.keys {
            Keys::One(k) => Ok(k.clone()),
            Keys::Set(set) => {
                let kid = decode_header(token)
                    .ok()
                    .and_then(|h| h.kid)
                    .ok_or_else(|| ApiError::unauthorized("invalid token: no key id"))?;
                set.read()
                    .ok()
                    .and_then(|s| s.get(&kid).cloned())
                    .ok_or_else(|| {
                        self.unknown_kid.notify_one();
                        ApiError::unauthorized(
                            "invalid token: unknown key id (the key set is re-read: retry)",
                        )
                    })
            }
        }
    }

    /// Checks `Authorization: Bearer <jwt>`; 401 for anything short of a valid token.
    pub fn verify(&self, authorization: Option<&str>) -> Result<Principal, ApiError> {
        let token = authorization
            .and_then(|h| h.trim().split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, t)| t.trim())
            .ok_or_else(|| ApiError::unauthorized("a bearer token is required"))?;
        let key = self.key_for(token)?;
        let data = decode::<Claims>(token, &key, &self.validation)
            .map_err(|e| ApiError::unauthorized(format!("invalid token: {}", reason(&e))))?;
        let c = data.claims;
        if c.iat.is_some_and(|iat| iat > now_s() + LEEWAY_S) {
            return Err(ApiError::unauthorized(
                "invalid token: issued in the future",
            ));
        }
        if c.tenant_id.is_empty() {
            return Err(ApiError::unauthorized("the token names no tenant"));
        }
        Ok(Principal {
            subject: c.sub,
            tenant: c.tenant_id,
            permissions: c.permissions,
            partner: c.partner_id.filter(|p| !p.is_empty()),
            sources: c.sources,
        })
    }
}

/// The RS256 keys of a JWKS document by `kid` (keys without a `kid` cannot be selected).
fn key_set(doc: &[u8]) -> anyhow::Result<HashMap<String, DecodingKey>> {
    let set: JwkSet = serde_json::from_slice(doc)?;
    let mut keys = HashMap::new();
    for jwk in &set.keys {
        if let Some(kid) = &jwk.common.key_id {
            keys.insert(kid.clone(), DecodingKey::from_jwk(jwk)?);
        }
    }
    anyhow::ensure!(!keys.is_empty(), "the key set holds no key with a kid");
    Ok(keys)
}

fn now_s() -> u64 {
    u64::try_from(crate::clock::now_ms() / 1000).unwrap_or(0)
}

/// Why a token failed, without echoing any of it.
fn reason(e: &jsonwebtoken::errors::Error) -> &'static str {
    use jsonwebtoken::errors::ErrorKind::*;
    match e.kind() {
        ExpiredSignature => "expired",
        ImmatureSignature => "not valid yet",
        InvalidIssuer => "wrong issuer",
        InvalidAudience => "wrong audience",
        InvalidAlgorithm => "algorithm not allowed",
        InvalidSignature => "bad signature",
        MissingRequiredClaim(_) => "a required claim is missing",
        _ => "malformed",
    }
}

/// What a minted token says.
#[derive(Debug, Clone, Copy)]
pub struct Mint<'a> {
    pub issuer: &'a str,
    pub audience: &'a str,
    pub subject: &'a str,
    pub tenant: &'a str,
    pub permissions: &'a [&'a str],
    /// Expiry: `now_s + ttl_s`.
    pub ttl_s: u64,
    pub now_s: u64,
}

/// Mints an HS256 token (the `hub-control token` command, for local use with the standalone hub).
pub fn mint_hs256(secret: &[u8], m: &Mint<'_>) -> anyhow::Result<String> {
    mint_hs256_for(secret, m, None)
}

/// Mints an HS256 token, a partner's (R-CP-17: `partner_id`) when `partner` is given.
pub fn mint_hs256_for(
    secret: &[u8],
    m: &Mint<'_>,
    partner: Option<&str>,
) -> anyhow::Result<String> {
    mint_hs256_claims(secret, m, partner, &[])
}

/// Mints an HS256 producer token that may write `sources` over HTTP ingest (R-SEC-4; give it
/// the `ingest` permission).
pub fn mint_hs256_ingest(secret: &[u8], m: &Mint<'_>, sources: &[&str]) -> anyhow::Result<String> {
    mint_hs256_claims(secret, m, None, sources)
}

fn mint_hs256_claims(
    secret: &[u8],
    m: &Mint<'_>,
    partner: Option<&str>,
    sources: &[&str],
) -> anyhow::Result<String> {
    let claims = Claims {
        sub: m.subject.into(),
        iss: m.issuer.into(),
        aud: Audience::One(m.audience.into()),
        exp: m.now_s + m.ttl_s,
        iat: Some(m.now_s),
        tenant_id: m.tenant.into(),
        permissions: m.permissions.iter().map(|p| (*p).to_owned()).collect(),
        partner_id: partner.map(str::to_owned),
        sources: sources.iter().map(|s| (*s).to_owned()).collect(),
    };
    Ok(encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(secret),
    )?)
}

/// Test helpers other crates' tests use too.
#[cfg(any(test, feature = "conformance"))]
pub mod testing {
    /// A JWKS document of RSA keys `(kid, base64url modulus)`, exponent AQAB.
    pub fn jwks(keys: &[(&str, &str)]) -> Vec<u8> {
        let keys: Vec<serde_json::Value> = keys
            .iter()
            .map(|(kid, n)| {
                serde_json::json!({"kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig",
                    "n": n.trim(), "e": "AQAB"})
            })
            .collect();
        serde_json::to_vec(&serde_json::json!({ "keys": keys })).expect("json")
    }
}

#[cfg(test)]
mod tests {
    use super::testing::jwks;
    use super::*;

    const SECRET: &[u8] = b"test-secret-test-secret-test-secret";
    const NOW: u64 = 2_000_000_000;

    fn verifier() -> TokenVerifier {
        TokenVerifier::new(&VerifyKey::Hs256(SECRET.to_vec()), "am", "hub").expect("verifier")
    }

    fn now() -> u64 {
        // jsonwebtoken checks `exp` against the system clock.
        #[allow(clippy::disallowed_methods)]
        let n = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(NOW);
        n
    }

    fn token(iss: &str, aud: &str, tenant: &str, ttl: i64) -> String {
        let (now_s, ttl_s) = if ttl >= 0 {
            (now(), ttl as u64)
        } else {
            (now() - 3600, 0)
        };
        let m = Mint {
            issuer: iss,
            audience: aud,
            subject: "user-1",
            tenant,
            permissions: &["subscriptions:get"],
            ttl_s,
            now_s,
        };
        mint_hs256(SECRET, &m).expect("mint")
    }

    /// A token with these claims, signed by `key` under `header`.
    fn signed(header: &Header, claims: serde_json::Value, key: &EncodingKey) -> String {
        encode(header, &claims, key).expect("encode")
    }

    fn claims(extra: serde_json::Value) -> serde_json::Value {
        let mut c = serde_json::json!({
            "sub": "u", "iss": "am", "aud": "hub", "exp": now() + 600, "tenant_id": "t",
            "permissions": ["subscriptions:get"],
        });
        if let (Some(c), Some(e)) = (c.as_object_mut(), extra.as_object()) {
            c.extend(e.clone());
        }
        c
    }

    #[test]
    fn r_cp_1_audience_lists_not_before_issue_time_and_the_bearer_scheme() {
        let v = verifier();
        let key = EncodingKey::from_secret(SECRET);
        let hs = Header::new(Algorithm::HS256);
        let ok = |t: String| v.verify(Some(&format!("Bearer {t}"))).map(|p| p.tenant);
        assert_eq!(
            ok(signed(
                &hs,
                claims(serde_json::json!({"aud": ["other", "hub"]})),
                &key
            )),
            Ok("t".into()),
            "aud as an array naming the hub"
        );
        assert!(ok(signed(
            &hs,
            claims(serde_json::json!({"aud": ["other"]})),
            &key
        ))
        .is_err());
        assert!(
            ok(signed(
                &hs,
                claims(serde_json::json!({"nbf": now() + 3600})),
                &key
            ))
            .is_err(),
            "valid only an hour from now"
        );
        assert!(
            ok(signed(
                &hs,
                claims(serde_json::json!({"iat": now() + 3600})),
                &key
            ))
            .is_err(),
            "issued in the future"
        );
        assert!(ok(signed(
            &hs,
            claims(serde_json::json!({"iat": now() - 10})),
            &key
        ))
        .is_ok());
        let t = token("am", "hub", "t-2", 600);
        for scheme in ["bearer", "BEARER", "BeArEr"] {
            assert!(v.verify(Some(&format!("{scheme} {t}"))).is_ok(), "{scheme}");
        }
    }

    #[test]
    fn r_cp_1_a_key_set_selects_by_kid_and_follows_a_rotation() {
        let (k1, n1) = (
            include_str!("../testdata/rsa-k1.pem"),
            include_str!("../testdata/rsa-k1.n"),
        );
        let (k2, n2) = (
            include_str!("../testdata/rsa-k2.pem"),
            include_str!("../testdata/rsa-k2.n"),
        );
        let v = TokenVerifier::new(
            &VerifyKey::Jwks(jwks(&[("k1", n1), ("k2", n2)])),
            "am",
            "hub",
        )
        .expect("verifier");
        let by = |kid: &str, pem: &str| {
            let mut h = Header::new(Algorithm::RS256);
            h.kid = Some(kid.into());
            let key = EncodingKey::from_rsa_pem(pem.as_bytes()).expect("key");
            format!("Bearer {}", signed(&h, claims(serde_json::json!({})), &key))
        };
        assert!(v.verify(Some(&by("k1", k1))).is_ok());
        assert!(v.verify(Some(&by("k2", k2))).is_ok());
        assert!(
            v.verify(Some(&by("k1", k2))).is_err(),
            "the kid's key must have signed"
        );
        assert!(v.verify(Some(&by("k3", k1))).is_err(), "an unknown kid");
        // Access Manager rotates k1 out.
        assert_eq!(v.refresh_jwks(&jwks(&[("k2", n2)])).expect("refresh"), 1);
        assert!(v.verify(Some(&by("k1", k1))).is_err());
        assert!(v.verify(Some(&by("k2", k2))).is_ok());
        assert!(
            v.refresh_jwks(b"not json").is_err(),
            "a malformed document is refused"
        );
        assert!(
            v.verify(Some(&by("k2", k2))).is_ok(),
            "and the keys in use stay"
        );
    }

    #[test]
    fn r_cp_1_a_valid_token_gives_tenant_and_permissions() {
        let p = verifier()
            .verify(Some(&format!("Bearer {}", token("am", "hub", "t-1", 600))))
            .expect("valid");
        assert_eq!(p.tenant, "t-1");
        assert!(p.require(Permission::Get).is_ok());
        assert_eq!(p.require(Permission::Post).expect_err("403").status(), 403);
    }

    #[test]
    fn r_cp_1_bad_tokens_are_401() {
        let v = verifier();
        for (header, why) in [
            (None, "missing"),
            (Some("Basic abc".to_owned()), "not bearer"),
            (Some("Bearer not.a.jwt".to_owned()), "malformed"),
            (
                Some(format!("Bearer {}", token("other", "hub", "t", 600))),
                "issuer",
            ),
            (
                Some(format!("Bearer {}", token("am", "other", "t", 600))),
                "audience",
            ),
            (
                Some(format!("Bearer {}", token("am", "hub", "t", -1))),
                "expired",
            ),
            (
                Some(format!("Bearer {}", token("am", "hub", "", 600))),
                "no tenant",
            ),
        ] {
            let err = v.verify(header.as_deref()).expect_err(why);
            assert_eq!(err.status(), 401, "{why}");
        }
    }

    #[test]
    fn r_cp_1_another_key_or_algorithm_is_refused() {
        let m = Mint {
            issuer: "am",
            audience: "hub",
            subject: "u",
            tenant: "t",
            permissions: &[],
            ttl_s: 600,
            now_s: now(),
        };
        let forged = mint_hs256(b"another-secret-another-secret!!", &m).expect("mint");
        assert_eq!(
            verifier()
                .verify(Some(&format!("Bearer {forged}")))
                .expect_err("forged")
                .status(),
            401
        );
        // alg "none" is never accepted.
        let none = format!(
            "{}.{}.",
            base64_url(br#"{"alg":"none","typ":"JWT"}"#),
            base64_url(
                format!(
                    r#"{{"sub":"u","iss":"am","aud":"hub","exp":{},"tenant_id":"t"}}"#,
                    now() + 600
                )
                .as_bytes()
            )
        );
        assert_eq!(
            verifier()
                .verify(Some(&format!("Bearer {none}")))
                .expect_err("none")
                .status(),
            401
        );
    }

    fn base64_url(b: &[u8]) -> String {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
    }
}
