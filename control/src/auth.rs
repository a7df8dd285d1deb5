//! Access Manager bearer tokens (R-CP-1): JWTs validated against configured keys with the
//! algorithm pinned, expiry, issuer and audience checked; the tenant and permissions come from the
//! token and scope every call.

use jsonwebtoken::{decode, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use hub_core::error::ApiError;

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
}

impl Principal {
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
    pub aud: String,
    pub exp: u64,
    #[serde(alias = "tenantId")]
    pub tenant_id: String,
    #[serde(default)]
    pub permissions: Vec<String>,
}

/// How tokens are checked. One algorithm, pinned: a token signed with any other is refused.
#[derive(Clone)]
pub struct TokenVerifier {
    key: DecodingKey,
    validation: Validation,
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
}

impl TokenVerifier {
    pub fn new(key: &VerifyKey, issuer: &str, audience: &str) -> anyhow::Result<Self> {
        let (key, alg) = match key {
            VerifyKey::Hs256(secret) => (DecodingKey::from_secret(secret), Algorithm::HS256),
            VerifyKey::Rs256Pem(pem) => (DecodingKey::from_rsa_pem(pem)?, Algorithm::RS256),
            VerifyKey::Es256Pem(pem) => (DecodingKey::from_ec_pem(pem)?, Algorithm::ES256),
        };
        let mut validation = Validation::new(alg);
        validation.set_issuer(&[issuer]);
        validation.set_audience(&[audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.leeway = 30;
        Ok(Self { key, validation })
    }

    /// Checks `Authorization: Bearer <jwt>`; 401 for anything short of a valid token.
    pub fn verify(&self, authorization: Option<&str>) -> Result<Principal, ApiError> {
        let token = authorization
            .and_then(|h| {
                h.strip_prefix("Bearer ")
                    .or_else(|| h.strip_prefix("bearer "))
            })
            .ok_or_else(|| ApiError::unauthorized("a bearer token is required"))?;
        let data = decode::<Claims>(token.trim(), &self.key, &self.validation)
            .map_err(|e| ApiError::unauthorized(format!("invalid token: {}", reason(&e))))?;
        let c = data.claims;
        if c.tenant_id.is_empty() {
            return Err(ApiError::unauthorized("the token names no tenant"));
        }
        Ok(Principal {
            subject: c.sub,
            tenant: c.tenant_id,
            permissions: c.permissions,
        })
    }
}

/// Why a token failed, without echoing any of it.
fn reason(e: &jsonwebtoken::errors::Error) -> &'static str {
    use jsonwebtoken::errors::ErrorKind::*;
    match e.kind() {
        ExpiredSignature => "expired",
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
    let claims = Claims {
        sub: m.subject.into(),
        iss: m.issuer.into(),
        aud: m.audience.into(),
        exp: m.now_s + m.ttl_s,
        tenant_id: m.tenant.into(),
        permissions: m.permissions.iter().map(|p| (*p).to_owned()).collect(),
    };
    Ok(encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(secret),
    )?)
}

#[cfg(test)]
mod tests {
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
        let now = now();
        let exp = if ttl >= 0 {
            now + ttl as u64
        } else {
            now - 3600
        };
        let m = Mint {
            issuer: iss,
            audience: aud,
            subject: "user-1",
            tenant,
            permissions: &["subscriptions:get"],
            ttl_s: 0,
            now_s: exp,
        };
        mint_hs256(SECRET, &m).expect("mint")
    }

    #[test]
    fn r_cp_1_a_valid_token_gives_tenant_and_permissions() {
        let p = verifier()
            .verify(Some(&format!("Bearer {}", token("am", "hub", "t-1", 600))))
            .expect("valid");
        assert_eq!(p.tenant, "t-1");
        assert!(p.require(Permission::Get).is_ok());
        assert_eq!(p.require(Permission::Post).expect_err("403").status, 403);
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
            assert_eq!(err.status, 401, "{why}");
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
                .status,
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
                .status,
            401
        );
    }

    fn base64_url(b: &[u8]) -> String {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
    }
}
