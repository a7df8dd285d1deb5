//! The one error vocabulary of the hub's API (R-CP-18): every code a request can be refused with,
//! and — defined once, here — what each one is on every transport: its HTTP status, its gRPC
//! status code and its GraphQL `extensions.code` (the code itself, as SPEC asks). Handlers name a
//! code, never a status number. Messages never carry secrets or internal details of the store.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// The canonical gRPC status codes (google.rpc.Code), as numbers on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum GrpcCode {
    InvalidArgument = 3,
    DeadlineExceeded = 4,
    NotFound = 5,
    AlreadyExists = 6,
    PermissionDenied = 7,
    ResourceExhausted = 8,
    FailedPrecondition = 9,
    Aborted = 10,
    Unimplemented = 12,
    Internal = 13,
    Unavailable = 14,
    Unauthenticated = 16,
}

/// Declares [`ErrorCode`] from one table: variant, wire code, HTTP status, gRPC code, meaning.
macro_rules! error_codes {
    ($($(#[doc = $doc:literal])* $variant:ident = $code:literal, $http:literal, $grpc:ident;)*) => {
        /// Every code the API answers with. The wire code is what REST puts in `code`, GraphQL in
        /// `extensions.code` and gRPC in `ErrorInfo.reason`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $($(#[doc = $doc])* $variant,)*
        }

        impl ErrorCode {
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)*];

            pub const fn as_str(self) -> &'static str {
                match self { $(ErrorCode::$variant => $code,)* }
            }

            pub const fn http_status(self) -> u16 {
                match self { $(ErrorCode::$variant => $http,)* }
            }

            pub const fn grpc(self) -> GrpcCode {
                match self { $(ErrorCode::$variant => GrpcCode::$grpc,)* }
            }

            /// What the code means, for the OpenAPI document and `hubctl`.
            pub fn meaning(self) -> &'static str {
                match self { $(ErrorCode::$variant => concat!($($doc, )*).trim(),)* }
            }
        }
    };
}

error_codes! {
    /// The request is malformed: a header, parameter or body that cannot be read.
    BadRequest = "bad_request", 400, InvalidArgument;
    /// A mutation came without its `X-Idempotency` key (R-CP-13).
    MissingIdempotencyKey = "missing_idempotency_key", 400, InvalidArgument;
    /// No token, or a token that is not valid (signature, expiry, audience, issuer).
    Unauthorized = "unauthorized", 401, Unauthenticated;
    /// The token is valid but lacks the permission the operation needs.
    Forbidden = "forbidden", 403, PermissionDenied;
    /// `POST /ingest/hub`: the hub's own source, which producers may not write (R-SEC-4).
    SourceReserved = "source_reserved", 403, PermissionDenied;
    /// A partner's call through the gateway relay, refused: no relay is configured, or the
    /// operation is not one relayed for partners (R-CP-17).
    DelegatedRelayRefused = "delegated_relay_refused", 403, PermissionDenied;
    /// No subscription of this tenant has that id (another tenant's reads as absent, R-SEC-3).
    SubscriptionNotFound = "subscription_not_found", 404, NotFound;
    /// `POST /ingest/<source>` on a hub whose HTTP ingest is off (R-SEC-4: the default when
    /// Kafka is configured; `STREAMING_HUB_HTTP_INGEST=true` turns it on).
    HttpIngestOff = "http_ingest_off", 404, NotFound;
    /// No such route.
    RouteNotFound = "route_not_found", 404, NotFound;
    /// The route exists, but not with this method.
    MethodNotAllowed = "method_not_allowed", 405, Unimplemented;
    /// A mutation's key is already taken: the same key with another request, or one still running.
    IdempotencyConflict = "idempotency_conflict", 409, AlreadyExists;
    /// An earlier request with this key may have taken effect without a recorded outcome; the
    /// key cannot be replayed (R-CP-13: 409 on later sends).
    IdempotencyOutcomeUnrecorded = "idempotency_outcome_unrecorded", 409, Aborted;
    /// The change may have taken effect, but its outcome could not be recorded (R-CP-13: 500 on
    /// the send that failed). SPEC gives both situations one wire code.
    IdempotencyOutcomeUnrecordedNow = "idempotency_outcome_unrecorded", 500, Internal;
    /// Another live subscription of this tenant has that name.
    SubscriptionNameTaken = "subscription_name_taken", 409, AlreadyExists;
    /// The subscription kept changing under concurrent writes; retry.
    SubscriptionContended = "subscription_contended", 409, Aborted;
    /// The hub stopped the subscription (auto-disable); verify it to re-enable (R-DI-10).
    SubscriptionStoppedByHub = "subscription_stopped_by_hub", 409, FailedPrecondition;
    /// `If-Match` names a revision that is no longer current (R-CP-10).
    SubscriptionChanged = "subscription_changed", 412, FailedPrecondition;
    /// The body is larger than the API takes.
    PayloadTooLarge = "payload_too_large", 413, ResourceExhausted;
    /// The request's body did not arrive within the listener's body timeout (a slow or stalled
    /// client).
    RequestTimeout = "request_timeout", 408, DeadlineExceeded;
    /// The request's headers are larger than the API takes.
    HeadersTooLarge = "headers_too_large", 431, ResourceExhausted;
    /// Ingest holds back because delivery is behind the operator's bound; nothing was stored:
    /// send again after `Retry-After` seconds.
    IngestThrottled = "ingest_throttled", 429, ResourceExhausted;
    /// The body's content type is not one the route reads.
    UnsupportedMediaType = "unsupported_media_type", 415, InvalidArgument;
    /// An ingested record broke the event contract; it was quarantined, not accepted (R-IN-3).
    Quarantined = "quarantined", 400, InvalidArgument;
    /// The body is well formed but breaks a rule of the resource.
    ValidationFailed = "validation_failed", 422, InvalidArgument;
    /// An event type (key, origin, major) that is not in the catalog (R-CP-15).
    UnknownEventType = "unknown_event_type", 422, InvalidArgument;
    /// An endpoint that does not fit its `sink_kind` (R-SEC-2).
    InvalidEndpoint = "invalid_endpoint", 422, InvalidArgument;
    /// The destination is an address the hub refuses to reach (R-SEC-2).
    DestinationNotAllowed = "destination_not_allowed", 422, InvalidArgument;
    /// The destination's name does not exist (R-SEC-2).
    DestinationUnresolvable = "destination_unresolvable", 422, InvalidArgument;
    /// The destination did not accept the probe; nothing was stored (R-CP-6, R-CP-10).
    DestinationProbeFailed = "destination_probe_failed", 422, FailedPrecondition;
    /// Events are read only from a pull subscription (R-CP-14).
    NotAPullSubscription = "not_a_pull_subscription", 422, FailedPrecondition;
    /// Only a webhook subscription has a signing secret to rotate (R-CP-9).
    RotationUnsupported = "rotation_unsupported", 422, FailedPrecondition;
    /// Delegated grants are for `sqs` and `eventbridge` subscriptions only (R-CP-7).
    GrantUnsupported = "grant_unsupported", 422, FailedPrecondition;
    /// The role can be assumed without the subscription's ExternalId: its trust policy leaves
    /// the confused-deputy gap open; nothing was stored (R-CP-7).
    TrustPolicyUnsafe = "trust_policy_unsafe", 422, FailedPrecondition;
    /// AWS STS could not answer the grant's trust check; nothing was stored (R-CP-7).
    StsUnavailable = "sts_unavailable", 500, Unavailable;
    /// The operator configured no AWS principal for delegated grants (R-CP-7).
    DelegatedGrantsUnconfigured = "delegated_grants_unconfigured", 503, Unavailable;
    /// What was asked is served where an engine runs (the standalone hub), not by a control
    /// process on its own.
    ServedByTheEngine = "served_by_the_engine", 501, Unimplemented;
    /// The store could not be reached: the request fails closed, nothing is promised.
    StoreUnavailable = "store_unavailable", 503, Unavailable;
    /// The resolver failed; retry (R-SEC-2).
    DnsUnavailable = "dns_unavailable", 503, Unavailable;
    /// The resolver did not answer in time; retry (R-SEC-2).
    DnsTimeout = "dns_timeout", 504, DeadlineExceeded;
    /// A fault of the hub's own; the message says no more than that.
    InternalError = "internal_error", 500, Internal;
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    /// Extra fields some codes carry (e.g. `error_class`, `status_code` of a failed probe).
    pub extra: Option<serde_json::Value>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            extra: None,
        }
    }

    /// The HTTP status of its code.
    pub fn status(&self) -> u16 {
        self.code.http_status()
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadRequest, message)
    }
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unauthorized, message)
    }
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Forbidden, message)
    }
    pub fn not_found() -> Self {
        Self::new(ErrorCode::SubscriptionNotFound, "no such subscription")
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::ValidationFailed, message)
    }
    /// The store could not be reached: the request fails (fail closed), nothing is promised.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::StoreUnavailable, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InternalError, message)
    }
}

#[derive(Serialize)]
struct Body<'a> {
    code: &'a str,
    message: &'a str,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    extra: Option<&'a serde_json::Value>,
}

impl ApiError {
    /// The JSON body (also what an idempotent replay stores).
    pub fn body(&self) -> Vec<u8> {
        serde_json::to_vec(&Body {
            code: self.code.as_str(),
            message: &self.message,
            extra: self.extra.as_ref(),
        })
        .unwrap_or_default()
    }
}

impl ApiError {
    /// Status and JSON body, for handlers that answer `(StatusCode, Json)` on both paths.
    pub fn as_reply(&self) -> (StatusCode, axum::Json<serde_json::Value>) {
        let body = serde_json::from_slice(&self.body()).unwrap_or_default();
        (
            StatusCode::from_u16(self.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            axum::Json(body),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (
            status,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            self.body(),
        )
            .into_response()
    }
}

/// Most bytes of request headers (names and values) a listener reads; more is a 431
/// `headers_too_large` in the error shape. (hyper refuses far larger heads itself, with a bare
/// 431, before any of this code runs: its read buffer is about 400 KiB.)
pub const MAX_HEADER_BYTES: usize = 32 * 1024;

/// Refuses a request whose headers exceed [`MAX_HEADER_BYTES`] with the error shape.
pub async fn limit_headers(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let size: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum();
    if size > MAX_HEADER_BYTES {
        return ApiError::new(
            ErrorCode::HeadersTooLarge,
            format!("the request's headers exceed {MAX_HEADER_BYTES} bytes"),
        )
        .into_response();
    }
    next.run(request).await
}

/// Puts what the HTTP framework answers by itself (an unknown route or method, a query or body it
/// could not read, a body over its limit) into the error shape, with the code of its status: every
/// error a client gets is `{"code", "message"}`. Answers already in JSON are left as they are.
pub async fn json_errors(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if is_json || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let code = match status.as_u16() {
        401 => ErrorCode::Unauthorized,
        403 => ErrorCode::Forbidden,
        404 => ErrorCode::RouteNotFound,
        405 => ErrorCode::MethodNotAllowed,
        413 => ErrorCode::PayloadTooLarge,
        415 => ErrorCode::UnsupportedMediaType,
        422 => ErrorCode::ValidationFailed,
        431 => ErrorCode::HeadersTooLarge,
        400..=499 => ErrorCode::BadRequest,
        _ => ErrorCode::InternalError,
    };
    // The framework's own words say what it could not read (never a secret: they describe the
    // request's shape); a server error keeps them out.
    let said = match axum::body::to_bytes(response.into_body(), 2048).await {
        Ok(b) if code != ErrorCode::InternalError => String::from_utf8_lossy(&b).trim().to_owned(),
        _ => String::new(),
    };
    let message = if said.is_empty() {
        code.meaning().to_owned()
    } else {
        said
    };
    ApiError::new(code, message).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// R-CP-18: one wire code means one status on every transport — but for the one SPEC
    /// decided otherwise (R-CP-13: `idempotency_outcome_unrecorded` is 500 when it happens, 409
    /// on later sends).
    #[test]
    fn r_cp_18_a_wire_code_has_one_status_per_transport() {
        let mut seen: HashMap<&str, (u16, GrpcCode)> = HashMap::new();
        for &code in ErrorCode::ALL {
            assert!(!code.meaning().is_empty(), "{code} is documented");
            let now = (code.http_status(), code.grpc());
            match seen.insert(code.as_str(), now) {
                Some(before) if before != now => assert_eq!(
                    code.as_str(),
                    "idempotency_outcome_unrecorded",
                    "{code}: {before:?} and {now:?}"
                ),
                _ => {}
            }
            assert!((400..600).contains(&code.http_status()), "{code}");
        }
    }

    #[test]
    fn r_cp_18_the_body_is_code_and_message() {
        let e = ApiError::new(ErrorCode::SubscriptionChanged, "stale");
        let body: serde_json::Value = serde_json::from_slice(&e.body()).expect("json");
        assert_eq!(
            body,
            serde_json::json!({"code": "subscription_changed", "message": "stale"})
        );
        assert_eq!(e.status(), 412);
    }
}
