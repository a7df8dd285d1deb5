//! The one error vocabulary of the control plane (R-CP-18): a stable `code`, an HTTP status and a
//! human message. REST renders it as `{"code": "...", "message": "..."}`; GraphQL and gRPC will map
//! the same codes. Messages never carry secrets or internal details of the store.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
    /// Extra fields some codes carry (e.g. `error_class`, `status_code` of a failed probe).
    pub extra: Option<serde_json::Value>,
}

impl ApiError {
    pub fn new(status: u16, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            extra: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "bad_request", message)
    }
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(401, "unauthorized", message)
    }
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "forbidden", message)
    }
    pub fn not_found() -> Self {
        Self::new(404, "subscription_not_found", "no such subscription")
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(422, "validation_failed", message)
    }
    /// The store could not be reached: the request fails (fail closed), nothing is promised.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "store_unavailable", message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "internal_error", message)
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
            code: self.code,
            message: &self.message,
            extra: self.extra.as_ref(),
        })
        .unwrap_or_default()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (
            status,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            self.body(),
        )
            .into_response()
    }
}
