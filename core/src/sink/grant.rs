//! Delegated AWS grants (R-CP-7): an `sqs` or `eventbridge` subscription may, instead of a stored
//! key pair, name a role in the tenant's account that trusts the hub's principal only under an
//! ExternalId the hub generated for that subscription. The hub then assumes the role for each
//! delivery (temporary credentials, cached per subscription and renewed before they expire).
//!
//! The confused-deputy check: a role that can be assumed *without* the ExternalId does not demand
//! it, so the grant is refused (`trust_policy_unsafe`) when it is recorded and whenever it is
//! verified. What decides is [`check_trust`], written against [`AssumeRole`] so its rules are
//! tested apart from AWS; [`StsRoles`] is the real one (STS through the SDK).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::model::Subscription;
use crate::sink::aws::{classify, AwsSettings, Keys};
use crate::sink::outcome::{ErrorClass, Outcome};

/// The ExternalId of `sub`'s grant: unique per subscription and not secret (AWS's advice: the
/// deputy's id of its customer). A grant made for one subscription never serves another.
pub fn external_id(sub: &Subscription) -> String {
    format!("lerian-streaming-{}", sub.id.simple())
}

/// Every AWS region a grant may name (commercial, GovCloud, China). A name of the right shape
/// that is not here is refused: a typo would only fail later, at every delivery.
pub const REGIONS: &[&str] = &[
    "af-south-1",
    "ap-east-1",
    "ap-east-2",
    "ap-northeast-1",
    "ap-northeast-2",
    "ap-northeast-3",
    "ap-south-1",
    "ap-south-2",
    "ap-southeast-1",
    "ap-southeast-2",
    "ap-southeast-3",
    "ap-southeast-4",
    "ap-southeast-5",
    "ap-southeast-7",
    "ca-central-1",
    "ca-west-1",
    "cn-north-1",
    "cn-northwest-1",
    "eu-central-1",
    "eu-central-2",
    "eu-north-1",
    "eu-south-1",
    "eu-south-2",
    "eu-west-1",
    "eu-west-2",
    "eu-west-3",
    "il-central-1",
    "me-central-1",
    "me-south-1",
    "mx-central-1",
    "sa-east-1",
    "us-east-1",
    "us-east-2",
    "us-gov-east-1",
    "us-gov-west-1",
    "us-west-1",
    "us-west-2",
];

pub fn known_region(region: &str) -> bool {
    REGIONS.contains(&region)
}

/// Whether `arn` names an IAM role: `arn:<partition>:iam::<12 digits>:role/<path/>name`, the
/// name 1–64 of IAM's characters.
pub fn valid_role_arn(arn: &str) -> bool {
    let mut parts = arn.splitn(6, ':');
    let (Some("arn"), Some(partition), Some("iam"), Some(""), Some(account), Some(resource)) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return false;
    };
    let Some(path_and_name) = resource.strip_prefix("role/") else {
        return false;
    };
    let name = path_and_name.rsplit('/').next().unwrap_or_default();
    let iam_char = |c: char| c.is_ascii_alphanumeric() || "+=,.@_-".contains(c);
    matches!(partition, "aws" | "aws-cn" | "aws-us-gov")
        && crate::sink::aws::valid_account(account)
        && (1..=64).contains(&name.len())
        && path_and_name.len() <= 512
        && path_and_name.chars().all(|c| iam_char(c) || c == '/')
        && name.chars().all(iam_char)
}

/// Temporary credentials of an assumed role.
#[derive(Clone)]
pub struct TempKeys {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: String,
    /// When AWS said they expire (Unix ms).
    pub expires_at_ms: i64,
}

impl std::fmt::Debug for TempKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TempKeys")
            .field("expires_at_ms", &self.expires_at_ms)
            .finish_non_exhaustive()
    }
}

impl TempKeys {
    pub fn keys(&self) -> Keys<'_> {
        Keys {
            access_key_id: &self.access_key_id,
            secret_access_key: &self.secret_access_key,
            session_token: Some(&self.session_token),
        }
    }
}

/// Why an AssumeRole did not give credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AssumeFailure {
    /// STS answered and refused (the trust policy does not let the hub in this way).
    Refused(Outcome),
    /// STS did not answer (unreachable, timed out, failed on its side).
    Unreachable(Outcome),
}

/// One AssumeRole call, with or without an ExternalId.
#[async_trait::async_trait]
pub trait AssumeRole: Send + Sync {
    async fn assume(
        &self,
        role_arn: &str,
        region: &str,
        external_id: Option<&str>,
    ) -> Result<TempKeys, AssumeFailure>;
}

/// What the confused-deputy check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trust {
    /// The role refuses the hub without the ExternalId.
    Demanded,
    /// The role let the hub in without the ExternalId: refuse the grant.
    Unsafe,
    /// STS could not answer: nothing can be decided (nothing is written).
    Unknown(Outcome),
}

/// Assumes `role_arn` without an ExternalId: only a refusal proves the role demands it.
pub async fn check_trust(sts: &dyn AssumeRole, role_arn: &str, region: &str) -> Trust {
    match sts.assume(role_arn, region, None).await {
        Ok(_) => Trust::Unsafe,
        Err(AssumeFailure::Refused(_)) => Trust::Demanded,
        Err(AssumeFailure::Unreachable(o)) => Trust::Unknown(o),
    }
}

/// The hardened probe's first half (R-CP-8 for a grant): the role must refuse the hub without
/// the ExternalId and accept it with; answers the credentials to probe the destination with.
pub async fn assume_hardened(
    sts: &dyn AssumeRole,
    role_arn: &str,
    region: &str,
    external_id: &str,
) -> Result<TempKeys, Outcome> {
    match check_trust(sts, role_arn, region).await {
        Trust::Demanded => {}
        Trust::Unsafe => return Err(unsafe_trust()),
        Trust::Unknown(o) => return Err(o),
    }
    sts.assume(role_arn, region, Some(external_id))
        .await
        .map_err(|f| match f {
            AssumeFailure::Refused(o) | AssumeFailure::Unreachable(o) => o,
        })
}

pub fn unsafe_trust() -> Outcome {
    Outcome::refused(
        ErrorClass::TrustPolicyUnsafe,
        "the role can be assumed without the ExternalId: its trust policy must demand it",
    )
}

/// AssumeRole through STS with the hub's own principal (the operator's AWS keys).
#[derive(Clone)]
pub struct StsRoles {
    pub settings: Arc<AwsSettings>,
    /// Credentials by (role, ExternalId), until shortly before they expire.
    cache: Arc<Mutex<HashMap<(String, String), TempKeys>>>,
}

impl std::fmt::Debug for StsRoles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StsRoles").finish_non_exhaustive()
    }
}

/// How long before expiry cached role credentials are renewed.
const RENEW_BEFORE_MS: i64 = 5 * 60 * 1000;
/// Most role sessions kept.
const MAX_SESSIONS: usize = 4096;
/// Asked of STS (its minimum is 15 minutes).
const SESSION_SECONDS: i32 = 3600;

impl StsRoles {
    pub fn new(settings: Arc<AwsSettings>) -> Self {
        Self {
            settings,
            cache: Arc::default(),
        }
    }

    /// Credentials for a delivery through `role_arn` with `external_id`: cached, renewed five
    /// minutes before they expire.
    pub async fn session(
        &self,
        role_arn: &str,
        region: &str,
        external_id: &str,
        now_ms: i64,
    ) -> Result<TempKeys, Outcome> {
        let key = (role_arn.to_owned(), external_id.to_owned());
        if let Some(k) = self.cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
            if k.expires_at_ms - RENEW_BEFORE_MS > now_ms {
                return Ok(k);
            }
        }
        let keys = self
            .assume(role_arn, region, Some(external_id))
            .await
            .map_err(|f| match f {
                AssumeFailure::Refused(o) | AssumeFailure::Unreachable(o) => o,
            })?;
        if let Ok(mut cache) = self.cache.lock() {
            if cache.len() >= MAX_SESSIONS {
                cache.clear();
            }
            cache.insert(key, keys.clone());
        }
        Ok(keys)
    }
}

#[async_trait::async_trait]
impl AssumeRole for StsRoles {
    async fn assume(
        &self,
        role_arn: &str,
        region: &str,
        external_id: Option<&str>,
    ) -> Result<TempKeys, AssumeFailure> {
        let Some(principal) = &self.settings.principal else {
            return Err(AssumeFailure::Unreachable(Outcome::refused(
                ErrorClass::SecretUnavailable,
                "the hub has no AWS principal configured (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)",
            )));
        };
        let config = self.settings.sdk_config(region, principal.keys());
        let sts = aws_sdk_sts::Client::new(&config);
        let mut call = sts
            .assume_role()
            .role_arn(role_arn)
            .role_session_name("lerian-streaming-hub")
            .duration_seconds(SESSION_SECONDS);
        if let Some(id) = external_id {
            call = call.external_id(id);
        }
        match call.send().await {
            Ok(out) => {
                let c = out.credentials().ok_or_else(|| {
                    AssumeFailure::Unreachable(Outcome::refused(
                        ErrorClass::ServiceError,
                        "STS answered without credentials",
                    ))
                })?;
                Ok(TempKeys {
                    access_key_id: c.access_key_id().to_owned(),
                    secret_access_key: c.secret_access_key().to_owned(),
                    session_token: c.session_token().to_owned(),
                    expires_at_ms: c.expiration().to_millis().unwrap_or(0),
                })
            }
            Err(e) => {
                let outcome = classify(&e);
                let answered = matches!(e, aws_sdk_sts::error::SdkError::ServiceError(_))
                    && !matches!(
                        outcome.error_class,
                        Some(ErrorClass::ServiceError | ErrorClass::Throttled)
                    );
                Err(if answered {
                    AssumeFailure::Refused(outcome)
                } else {
                    AssumeFailure::Unreachable(outcome)
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in STS with a fixed trust policy (unit tests only).
    struct FakeSts {
        /// Whether an AssumeRole without ExternalId succeeds.
        without: bool,
        /// Whether one with the right ExternalId succeeds.
        with: bool,
        reachable: bool,
    }

    #[async_trait::async_trait]
    impl AssumeRole for FakeSts {
        async fn assume(
            &self,
            _role: &str,
            _region: &str,
            external_id: Option<&str>,
        ) -> Result<TempKeys, AssumeFailure> {
            if !self.reachable {
                return Err(AssumeFailure::Unreachable(Outcome::refused(
                    ErrorClass::ConnectionFailed,
                    "down",
                )));
            }
            let allowed = if external_id.is_some() {
                self.with
            } else {
                self.without
            };
            if allowed {
                Ok(TempKeys {
                    access_key_id: "ASIA".into(),
                    secret_access_key: "s".into(),
                    session_token: "t".into(),
                    expires_at_ms: 0,
                })
            } else {
                Err(AssumeFailure::Refused(Outcome::refused(
                    ErrorClass::AccessDenied,
                    "AccessDenied",
                )))
            }
        }
    }

    const ROLE: &str = "arn:aws:iam::123456789012:role/streaming-hub-delivery";

    #[tokio::test]
    async fn r_cp_7_only_a_role_that_demands_the_external_id_is_trusted() {
        let safe = FakeSts {
            without: false,
            with: true,
            reachable: true,
        };
        assert_eq!(check_trust(&safe, ROLE, "us-east-1").await, Trust::Demanded);
        assert!(assume_hardened(&safe, ROLE, "us-east-1", "x").await.is_ok());

        let open = FakeSts {
            without: true,
            with: true,
            reachable: true,
        };
        assert_eq!(check_trust(&open, ROLE, "us-east-1").await, Trust::Unsafe);
        let refused = assume_hardened(&open, ROLE, "us-east-1", "x")
            .await
            .expect_err("never verified");
        assert_eq!(refused.error_class, Some(ErrorClass::TrustPolicyUnsafe));
        assert!(refused.is_permanent());

        let wrong_id = FakeSts {
            without: false,
            with: false,
            reachable: true,
        };
        let refused = assume_hardened(&wrong_id, ROLE, "us-east-1", "x")
            .await
            .expect_err("the role does not trust this ExternalId");
        assert_eq!(refused.error_class, Some(ErrorClass::AccessDenied));

        let down = FakeSts {
            without: false,
            with: true,
            reachable: false,
        };
        assert!(matches!(
            check_trust(&down, ROLE, "us-east-1").await,
            Trust::Unknown(_)
        ));
    }

    #[test]
    fn r_cp_7_role_arns_and_regions_are_checked() {
        for good in [
            ROLE,
            "arn:aws:iam::123456789012:role/path/to/Hub+Role=1,x.y@z_w-v",
            "arn:aws-us-gov:iam::123456789012:role/r",
        ] {
            assert!(valid_role_arn(good), "{good}");
        }
        for bad in [
            "",
            "arn:aws:iam::123456789012:user/someone",
            "arn:aws:iam::12345678901:role/r",
            "arn:aws:s3:::bucket",
            "arn:aws:iam::123456789012:role/",
            "arn:evil:iam::123456789012:role/r",
            "arn:aws:iam::123456789012:role/has space",
            &format!("arn:aws:iam::123456789012:role/{}", "r".repeat(65)),
        ] {
            assert!(!valid_role_arn(bad), "{bad}");
        }
        assert!(known_region("eu-west-1"));
        assert!(
            !known_region("eu-west-9"),
            "the right shape, no such region"
        );
    }

    #[test]
    fn r_cp_7_temporary_keys_print_nothing_secret() {
        let k = TempKeys {
            access_key_id: "ASIAXYZ".into(),
            secret_access_key: "very-secret".into(),
            session_token: "token-secret".into(),
            expires_at_ms: 1,
        };
        let shown = format!("{k:?}");
        assert!(!shown.contains("very-secret") && !shown.contains("token-secret"));
        assert!(!shown.contains("ASIAXYZ"));
    }
}
