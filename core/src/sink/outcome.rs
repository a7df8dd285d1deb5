//! How one attempt ended, for every sink: success, or a failure with a classified
//! [`ErrorClass`] that says whether trying again can help (retryable) or not (permanent: the
//! job is dead-lettered at once, with the class as its reason).

use serde::{Deserialize, Serialize};

/// Why an attempt failed. The names are what reads, health and probe answers show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// No answer within the attempt's time limit.
    Timeout,
    /// The connection could not be made (refused, unreachable, name not found).
    ConnectionFailed,
    /// The peer closed or reset the connection instead of answering.
    ConnectionReset,
    TlsError,
    /// A webhook answered a status outside 2xx (3xx aside).
    HttpStatus,
    /// A webhook answered 3xx: redirects are not followed.
    Redirect,
    /// R-SEC-2 / R-SK-2: the destination is (or resolves to) a forbidden address.
    DestinationNotAllowed,
    /// The stored endpoint cannot be used.
    InvalidEndpoint,
    /// Anything else on the way out.
    RequestFailed,
    /// The signing secret or credential could not be opened (or there is none yet).
    SecretUnavailable,
    /// The destination refused the credential.
    AuthenticationFailed,
    /// The credential is known but lacks a permission (vhost, exchange, queue, bus).
    AccessDenied,
    /// The queue, exchange or bus does not exist.
    DestinationMissing,
    /// The broker could not route the message anywhere (mandatory publish returned).
    Unroutable,
    /// The broker refused the message (negative publisher confirm).
    Rejected,
    /// The event is larger than the destination accepts (SQS, EventBridge: 256 KiB).
    PayloadTooLarge,
    /// The destination refused the message as malformed (an AWS validation error), or the event
    /// cannot be put in the destination's form (an attribute that is no valid HTTP header value).
    InvalidMessage,
    /// The destination asks the hub to slow down.
    Throttled,
    /// The destination's service failed on its side (5xx of a cloud API).
    ServiceError,
    /// A delegated grant's role can be assumed without its ExternalId (R-CP-7): its trust
    /// policy leaves the confused-deputy gap open, so the hub will not use it.
    TrustPolicyUnsafe,
}

impl ErrorClass {
    /// Whether trying the same event again can succeed without anyone changing anything.
    /// Permanent failures are dead-lettered at once (a tenant fixes the cause, then replays).
    /// An unroutable message (no queue bound) counts as a missing destination. A refused
    /// credential is not among them: a tenant replaces it with `PUT …/credential`
    /// and the queued events flow on.
    pub fn is_permanent(self) -> bool {
        matches!(
            self,
            ErrorClass::InvalidEndpoint
                | ErrorClass::PayloadTooLarge
                | ErrorClass::InvalidMessage
                | ErrorClass::AccessDenied
                | ErrorClass::DestinationMissing
                | ErrorClass::Unroutable
                | ErrorClass::TrustPolicyUnsafe
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Timeout => "timeout",
            ErrorClass::ConnectionFailed => "connection_failed",
            ErrorClass::ConnectionReset => "connection_reset",
            ErrorClass::TlsError => "tls_error",
            ErrorClass::HttpStatus => "http_status",
            ErrorClass::Redirect => "redirect",
            ErrorClass::DestinationNotAllowed => "destination_not_allowed",
            ErrorClass::InvalidEndpoint => "invalid_endpoint",
            ErrorClass::RequestFailed => "request_failed",
            ErrorClass::SecretUnavailable => "secret_unavailable",
            ErrorClass::AuthenticationFailed => "authentication_failed",
            ErrorClass::AccessDenied => "access_denied",
            ErrorClass::DestinationMissing => "destination_missing",
            ErrorClass::Unroutable => "unroutable",
            ErrorClass::Rejected => "rejected",
            ErrorClass::PayloadTooLarge => "payload_too_large",
            ErrorClass::InvalidMessage => "invalid_message",
            ErrorClass::Throttled => "throttled",
            ErrorClass::ServiceError => "service_error",
            ErrorClass::TrustPolicyUnsafe => "trust_policy_unsafe",
        }
    }
}

impl std::fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How an attempt ended, classified for retries, health and probe answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    pub success: bool,
    /// `None` on success.
    pub error_class: Option<ErrorClass>,
    /// The HTTP status a webhook answered.
    pub status_code: Option<u16>,
    /// A short human description; never a secret, never more than a bounded response prefix.
    pub detail: String,
    pub duration_ms: u64,
}

impl Outcome {
    pub fn delivered(status: Option<u16>, took: std::time::Duration) -> Self {
        Self {
            success: true,
            error_class: None,
            status_code: status,
            detail: String::new(),
            duration_ms: millis(took),
        }
    }

    pub fn failed(
        class: ErrorClass,
        status: Option<u16>,
        detail: impl Into<String>,
        took: std::time::Duration,
    ) -> Self {
        let detail: String = detail.into();
        Self {
            success: false,
            error_class: Some(class),
            status_code: status,
            // Short: the detail is for an operator's eye, not an archive.
            detail: detail.chars().take(256).collect(),
            duration_ms: millis(took),
        }
    }

    /// A failure before anything was sent.
    pub fn refused(class: ErrorClass, detail: impl Into<String>) -> Self {
        Self::failed(class, None, detail, std::time::Duration::ZERO)
    }

    /// The same outcome, timed from `started`.
    pub fn took(mut self, started: std::time::Instant) -> Self {
        self.duration_ms = millis(started.elapsed());
        self
    }

    /// Whether the failure is permanent (see [`ErrorClass::is_permanent`]).
    pub fn is_permanent(&self) -> bool {
        !self.success && self.error_class.is_some_and(ErrorClass::is_permanent)
    }

    /// The class as text, for stored attempt records.
    pub fn class_name(&self) -> Option<String> {
        self.error_class.map(|c| c.as_str().to_owned())
    }
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_di_8_only_failures_no_retry_can_mend_are_permanent() {
        assert!(Outcome::refused(ErrorClass::PayloadTooLarge, "big").is_permanent());
        assert!(!Outcome::refused(ErrorClass::Timeout, "slow").is_permanent());
        assert!(!Outcome::delivered(Some(200), std::time::Duration::ZERO).is_permanent());
        assert_eq!(
            serde_json::to_value(ErrorClass::DestinationMissing).ok(),
            Some(serde_json::json!("destination_missing"))
        );
    }
}
