//! Queue credentials (R-CP-6): write-only, taken by `PUT /v1/subscriptions/:id/credential`,
//! sealed like signing secrets (R-SEC-1) in the subscription's `secret`, opened in memory only
//! for one attempt or probe (R-DI-4). `Debug` prints no secret part, and nothing here is ever
//! part of a read, an error or a log line.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::model::SinkKind;

/// A queue kind's credential.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Credential {
    Rabbitmq {
        username: String,
        password: String,
    },
    Aws {
        access_key_id: String,
        secret_access_key: String,
        session_token: Option<String>,
    },
    /// A delegated grant (R-CP-7): no key, a role in the tenant's account to assume with the
    /// subscription's ExternalId. Not secret; sealed in the same place so a subscription has one
    /// way to reach its destination at a time.
    AwsRole {
        role_arn: String,
        region: String,
    },
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::Rabbitmq { username, .. } => f
                .debug_struct("Rabbitmq")
                .field("username", username)
                .finish_non_exhaustive(),
            Credential::Aws { .. } => f.write_str("Aws { .. }"),
            Credential::AwsRole { role_arn, region } => f
                .debug_struct("AwsRole")
                .field("role_arn", role_arn)
                .field("region", region)
                .finish(),
        }
    }
}

/// Longest credential field accepted.
const MAX_FIELD: usize = 4096;

impl Credential {
    /// Reads the body of `PUT …/credential` for a subscription of `kind`.
    pub fn parse(kind: SinkKind, body: &Map<String, Value>) -> Result<Self, ApiError> {
        let field = |name: &str, required: bool| -> Result<Option<String>, ApiError> {
            match body.get(name) {
                None | Some(Value::Null) if !required => Ok(None),
                Some(Value::String(s)) if !s.is_empty() && s.len() <= MAX_FIELD => {
                    Ok(Some(s.clone()))
                }
                _ => Err(ApiError::invalid(format!(
                    "{name} is required: a non-empty string of at most {MAX_FIELD} bytes"
                ))),
            }
        };
        let allowed: &[&str] = match kind {
            SinkKind::Rabbitmq => &["username", "password"],
            SinkKind::Sqs | SinkKind::Eventbridge => {
                &["access_key_id", "secret_access_key", "session_token"]
            }
            SinkKind::Webhook | SinkKind::Pull => {
                return Err(ApiError::invalid(format!(
                    "a {kind} subscription takes no credential"
                )))
            }
        };
        if let Some(k) = body.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(ApiError::invalid(format!(
                "unknown credential field {k:?}; a {kind} credential has {}",
                allowed.join(", ")
            )));
        }
        let need = |name| field(name, true).map(Option::unwrap_or_default);
        Ok(match kind {
            SinkKind::Rabbitmq => Credential::Rabbitmq {
                username: need("username")?,
                password: need("password")?,
            },
            _ => Credential::Aws {
                access_key_id: need("access_key_id")?,
                secret_access_key: need("secret_access_key")?,
                session_token: field("session_token", false)?,
            },
        })
    }

    /// The bytes sealed in the store.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        serde_json::from_slice(bytes).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn r_cp_6_credentials_are_checked_per_kind_and_never_printed() {
        let c = Credential::parse(
            SinkKind::Rabbitmq,
            &obj(json!({"username": "hub", "password": "s3cret-pw"})),
        )
        .expect("valid");
        assert!(!format!("{c:?}").contains("s3cret-pw"));
        assert_eq!(Credential::from_bytes(&c.to_bytes()), Some(c));
        let aws = Credential::parse(
            SinkKind::Sqs,
            &obj(json!({"access_key_id": "AKIA1", "secret_access_key": "very-secret"})),
        )
        .expect("valid");
        assert!(!format!("{aws:?}").contains("very-secret"));
        assert!(!format!("{aws:?}").contains("AKIA1"));

        let refused = [
            (SinkKind::Webhook, json!({"username": "u", "password": "p"})),
            (SinkKind::Pull, json!({"username": "u", "password": "p"})),
            (SinkKind::Rabbitmq, json!({"username": "u"})),
            (SinkKind::Rabbitmq, json!({"username": "u", "password": ""})),
            (SinkKind::Rabbitmq, json!({"username": "u", "password": 5})),
            (
                SinkKind::Rabbitmq,
                json!({"username": "u", "password": "hunter2", "x": 1}),
            ),
            (SinkKind::Sqs, json!({"access_key_id": "a"})),
        ];
        for (kind, body) in refused {
            let e = Credential::parse(kind, &obj(body.clone())).expect_err("refused");
            assert_eq!(e.status(), 422, "{kind} {body}");
            assert!(!e.message.contains("hunter2"), "no secret in errors");
        }
    }
}
