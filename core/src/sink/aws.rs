//! What the SQS and EventBridge sinks share (both SDKs share the smithy runtime, so its error
//! types are named through `aws_sdk_sqs` for both): the region grammar (a tenant's region only ever
//! names a subdomain of `amazonaws.com`, so neither sink can be pointed at a private address,
//! R-SK-2), the SDK client for a (region, credential) pair, and the classification of AWS errors.
//!
//! The operator may send every AWS call to another endpoint (an emulator, a VPC endpoint):
//! `STREAMING_HUB_AWS_ENDPOINT_URL`. A tenant never can.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};

use crate::sink::outcome::{ErrorClass, Outcome};

/// Time limit of one AWS call (connect included). The SDK's own retries are off: the hub's
/// curve retries (R-DI-6).
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// The operator's AWS settings.
#[derive(Debug, Clone, Default)]
pub struct AwsSettings {
    /// Every AWS call goes here instead of the region's endpoint (an emulator in tests).
    pub endpoint_url: Option<String>,
    /// The hub's own AWS keys: the principal that assumes tenants' roles (R-CP-7).
    pub principal: Option<OwnedKeys>,
    /// The hub principal's ARN, as tenants' trust policies name it (R-CP-7).
    pub principal_arn: Option<String>,
    /// Where the delegated-grant CloudFormation template is published (R-CP-7's link).
    pub grant_template_url: String,
}

/// An access key pair held by the process (the hub's own principal).
#[derive(Clone)]
pub struct OwnedKeys {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

impl std::fmt::Debug for OwnedKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OwnedKeys(…)")
    }
}

impl OwnedKeys {
    pub fn keys(&self) -> Keys<'_> {
        Keys {
            access_key_id: &self.access_key_id,
            secret_access_key: &self.secret_access_key,
            session_token: self.session_token.as_deref(),
        }
    }
}

impl AwsSettings {
    /// The SDK configuration of calls in `region` with `keys`: the hub's time limit, no SDK
    /// retries, and the operator's endpoint when set.
    pub fn sdk_config(&self, region: &str, keys: Keys<'_>) -> aws_types::SdkConfig {
        let credentials = aws_sdk_sqs::config::Credentials::new(
            keys.access_key_id,
            keys.secret_access_key,
            keys.session_token.map(str::to_owned),
            None,
            "streaming-hub",
        );
        let mut config = aws_types::SdkConfig::builder()
            .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
            .region(aws_types::region::Region::new(region.to_owned()))
            .credentials_provider(aws_types::sdk_config::SharedCredentialsProvider::new(
                credentials,
            ))
            .retry_config(aws_types::sdk_config::RetryConfig::disabled())
            .timeout_config(
                aws_types::sdk_config::TimeoutConfig::builder()
                    .operation_timeout(TIMEOUT)
                    .build(),
            );
        if let Some(url) = &self.endpoint_url {
            config = config.endpoint_url(url);
        }
        config.build()
    }
}

/// Whether `region` is an AWS region name (`us-east-1`, `us-gov-west-1`, `ap-southeast-3`).
pub fn valid_region(region: &str) -> bool {
    let parts: Vec<&str> = region.split('-').collect();
    parts.len() >= 3
        && parts[0].len() == 2
        && parts[..parts.len() - 1]
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_lowercase()))
        && parts[parts.len() - 1].chars().all(|c| c.is_ascii_digit())
        && !parts[parts.len() - 1].is_empty()
}

/// Whether `account` is a 12-digit AWS account id.
pub fn valid_account(account: &str) -> bool {
    account.len() == 12 && account.chars().all(|c| c.is_ascii_digit())
}

/// An access key pair, as opened from the sealed credential.
#[derive(Clone, Copy)]
pub struct Keys<'a> {
    pub access_key_id: &'a str,
    pub secret_access_key: &'a str,
    pub session_token: Option<&'a str>,
}

impl std::fmt::Debug for Keys<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keys(…)")
    }
}

impl Keys<'_> {
    /// The cache key of a client: region and credential, digested (it holds the secret).
    pub fn digest(&self, region: &str) -> [u8; 32] {
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        for part in [
            region,
            self.access_key_id,
            self.secret_access_key,
            self.session_token.unwrap_or_default(),
        ] {
            ctx.update(&(part.len() as u64).to_be_bytes());
            ctx.update(part.as_bytes());
        }
        let mut k = [0; 32];
        k.copy_from_slice(ctx.finish().as_ref());
        k
    }
}

/// Clients per (region, credential), built once and reused (each holds a connection pool).
pub struct ClientCache<C> {
    clients: Mutex<HashMap<[u8; 32], C>>,
}

impl<C> Default for ClientCache<C> {
    fn default() -> Self {
        Self {
            clients: Mutex::new(HashMap::new()),
        }
    }
}

impl<C> std::fmt::Debug for ClientCache<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientCache")
    }
}

/// Most clients kept: a hub with more (region, credential) pairs than this rebuilds some.
const MAX_CLIENTS: usize = 4096;

impl<C: Clone> ClientCache<C> {
    pub fn get_or(&self, key: [u8; 32], build: impl FnOnce() -> C) -> C {
        let Ok(mut clients) = self.clients.lock() else {
            return build();
        };
        if let Some(c) = clients.get(&key) {
            return c.clone();
        }
        if clients.len() >= MAX_CLIENTS {
            clients.clear();
        }
        clients.entry(key).or_insert_with(build).clone()
    }
}

/// An AWS sink's clients: the operator's settings and a client per (region, credential).
pub struct AwsClients<C> {
    pub settings: Arc<AwsSettings>,
    cache: Arc<ClientCache<C>>,
}

impl<C> Clone for AwsClients<C> {
    fn clone(&self) -> Self {
        Self {
            settings: self.settings.clone(),
            cache: self.cache.clone(),
        }
    }
}

impl<C> std::fmt::Debug for AwsClients<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsClients")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl<C: Clone> AwsClients<C> {
    pub fn new(settings: Arc<AwsSettings>) -> Self {
        Self {
            settings,
            cache: Arc::default(),
        }
    }

    /// The client of `region` and `keys`, built with `build` on first use.
    pub fn get(&self, region: &str, keys: Keys<'_>, build: fn(&aws_types::SdkConfig) -> C) -> C {
        self.cache.get_or(keys.digest(region), || {
            build(&self.settings.sdk_config(region, keys))
        })
    }
}

/// Classifies an SDK failure: the service's error code when it answered, else how the call
/// failed on the way.
pub fn classify<E, R>(e: &SdkError<E, R>) -> Outcome
where
    E: ProvideErrorMetadata + std::error::Error,
    R: std::fmt::Debug,
{
    let (class, detail) = match e {
        SdkError::TimeoutError(_) => (ErrorClass::Timeout, "the call timed out".to_owned()),
        SdkError::DispatchFailure(d) if d.is_timeout() => {
            (ErrorClass::Timeout, "the call timed out".to_owned())
        }
        SdkError::DispatchFailure(d) if d.is_io() => (
            ErrorClass::ConnectionFailed,
            "the AWS endpoint could not be reached".to_owned(),
        ),
        SdkError::ServiceError(ctx) => {
            let err = ctx.err();
            let code = err.code().unwrap_or_default();
            (
                by_code(code, false),
                format!("{code}: {}", err.message().unwrap_or_default()),
            )
        }
        SdkError::ResponseError(_) => (
            ErrorClass::ServiceError,
            "the service's answer could not be read".to_owned(),
        ),
        other => (ErrorClass::RequestFailed, other.to_string()),
    };
    Outcome::refused(class, detail)
}

/// An AWS error code as an error class (`server`: the service reported a fault on its side).
pub fn by_code(code: &str, server: bool) -> ErrorClass {
    match code {
        "AccessDenied"
        | "AccessDeniedException"
        | "AuthorizationError"
        | "KMS.AccessDeniedException"
        | "KmsAccessDenied"
        | "NotAuthorizedException" => ErrorClass::AccessDenied,
        "AWS.SimpleQueueService.NonExistentQueue"
        | "QueueDoesNotExist"
        | "NonExistentQueue"
        | "ResourceNotFoundException" => ErrorClass::DestinationMissing,
        "Throttling"
        | "ThrottlingException"
        | "RequestThrottled"
        | "RequestThrottledException"
        | "TooManyRequestsException"
        | "LimitExceededException" => ErrorClass::Throttled,
        "InvalidClientTokenId"
        | "UnrecognizedClientException"
        | "SignatureDoesNotMatch"
        | "InvalidSignatureException"
        | "IncompleteSignature"
        | "ExpiredToken"
        | "ExpiredTokenException"
        | "MissingAuthenticationToken" => ErrorClass::AuthenticationFailed,
        "InvalidMessageContents"
        | "ValidationException"
        | "InvalidParameterValue"
        | "InvalidAttributeValue"
        | "InvalidArgument"
        | "InvalidEventPatternException" => ErrorClass::InvalidMessage,
        "InternalFailure"
        | "InternalError"
        | "InternalException"
        | "ServiceUnavailable"
        | "ServiceUnavailableException" => ErrorClass::ServiceError,
        _ if server => ErrorClass::ServiceError,
        _ => ErrorClass::RequestFailed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_sk_2_aws_regions_only_name_aws_regions() {
        for good in ["us-east-1", "eu-west-3", "us-gov-west-1", "ap-southeast-3"] {
            assert!(valid_region(good), "{good}");
        }
        for bad in [
            "",
            "us",
            "us-east",
            "US-EAST-1",
            "us-east-1.evil.com",
            "127.0.0.1",
            "us-east-x",
            "a-b-1",
        ] {
            assert!(!valid_region(bad), "{bad}");
        }
        assert!(valid_account("123456789012"));
        assert!(!valid_account("12345678901a"));
    }

    #[test]
    fn r_di_8_aws_error_codes_are_classified_retryable_or_permanent() {
        assert!(by_code("AccessDeniedException", false).is_permanent());
        assert!(by_code("AWS.SimpleQueueService.NonExistentQueue", false).is_permanent());
        assert!(by_code("ResourceNotFoundException", false).is_permanent());
        assert!(by_code("InvalidMessageContents", false).is_permanent());
        assert!(!by_code("ThrottlingException", false).is_permanent());
        assert!(!by_code("InternalFailure", false).is_permanent());
        assert_eq!(by_code("Whatever", true), ErrorClass::ServiceError);
        assert_eq!(
            by_code("ExpiredToken", false),
            ErrorClass::AuthenticationFailed
        );
    }
}
