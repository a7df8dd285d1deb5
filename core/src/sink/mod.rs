//! Sinks: how an event leaves the hub. One shape for every kind, shared by the engine's
//! delivery workers and the control plane's probes (ping, verify, credential), so a probe goes
//! through the very code a delivery uses (R-CP-5):
//!
//! - `outcome`: how an attempt ended — success, or a classified [`ErrorClass`] that is
//!   retryable or permanent;
//! - `credential`: queue credentials, write-only, sealed like signing secrets;
//! - a folder (or file) per kind with the same parts: endpoint parsing, the message or request
//!   of one event, the client, and the classification of its failures — `rabbitmq/`, `sqs/`,
//!   `eventbridge/` (the last two share `aws.rs`), `webhook/` (its signatures in
//!   `webhook/signature.rs`);
//! - [`Sinks`] (this file): opens the subscription's sealed secret or credential in memory for
//!   one attempt (R-DI-4) and hands the event to its kind's client.
//!
//! `pull` has no client: a pull subscription takes no jobs and is read by `seq`.

pub mod aws;
pub mod credential;
pub mod eventbridge;
pub mod grant;
pub mod outcome;
pub mod rabbitmq;
pub mod sqs;
pub mod webhook;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use uuid::Uuid;

use self::credential::Credential;
use self::outcome::{ErrorClass, Outcome};
use self::webhook::secrets::SigningSecrets;
use self::webhook::{Attempt, Keys, WebhookClient};
use crate::destination::DestinationPolicy;
use crate::model::{binding, SinkKind, Subscription, DEFAULT_TIMEOUT_MS};
use crate::secrets::{Keyring, Secret};

/// What every sink sends of one event.
#[derive(Debug, Clone)]
pub struct EventOut<'a> {
    /// `ce-id`: stable across attempts.
    pub id: Uuid,
    /// `<resource>.<event>`, without the producer (R-SK-1).
    pub key: &'a str,
    /// The producer (`ce-source`).
    pub source: &'a str,
    pub tenant: &'a str,
    pub schema_version: &'a str,
    /// `ce-time`.
    pub time: &'a str,
    pub subject: Option<&'a str>,
    /// `ce-datacontenttype`; `application/json` when absent.
    pub content_type: Option<&'a str>,
    /// W3C trace context carried by the event (R-TR-5), forwarded by every sink that can.
    pub traceparent: Option<&'a str>,
    pub tracestate: Option<&'a str>,
    pub body: Bytes,
}

impl EventOut<'_> {
    pub fn content_type(&self) -> &str {
        self.content_type.unwrap_or("application/json")
    }
}

/// How a payload travels inside a JSON document (a pull page, an EventBridge detail): as the
/// JSON value itself under `data` when the content type is JSON and the bytes parse, else as
/// base64 under `data_base64`.
pub fn data_field(content_type: &str, payload: &[u8]) -> (&'static str, serde_json::Value) {
    use base64::Engine as _;
    let media = content_type.split(';').next().unwrap_or_default().trim();
    let json = media.eq_ignore_ascii_case("application/json")
        || media.eq_ignore_ascii_case("text/json")
        || media.to_ascii_lowercase().ends_with("+json");
    match json.then(|| serde_json::from_slice(payload).ok()).flatten() {
        Some(value) => ("data", value),
        None => (
            "data_base64",
            base64::engine::general_purpose::STANDARD
                .encode(payload)
                .into(),
        ),
    }
}

/// The secret material of one attempt, opened in memory only.
#[derive(Debug)]
pub enum Material {
    /// A webhook's signing keys (boxed: an HMAC key is large beside a credential).
    Signing(Box<Keys>),
    /// A queue kind's credential.
    Credential(Credential),
}

/// The clients of every push kind; one per process, cheap to clone.
#[derive(Debug, Clone)]
pub struct Sinks {
    pub webhook: WebhookClient,
    pub rabbitmq: rabbitmq::RabbitSink,
    pub sqs: sqs::SqsSink,
    pub eventbridge: eventbridge::EventBridgeSink,
    /// Delegated grants' role sessions (R-CP-7).
    pub roles: grant::StsRoles,
}

impl Sinks {
    pub fn new(policy: Arc<DestinationPolicy>, aws: aws::AwsSettings) -> Result<Self, String> {
        let aws = Arc::new(aws);
        Ok(Self {
            webhook: WebhookClient::new(policy.clone())?,
            rabbitmq: rabbitmq::RabbitSink::new(policy),
            sqs: sqs::SqsSink::new(aws.clone()),
            eventbridge: eventbridge::EventBridgeSink::new(aws.clone()),
            roles: grant::StsRoles::new(aws),
        })
    }

    /// Makes exactly one attempt (R-DI-4) to deliver `ev` to `sub`, opening its secret or
    /// credential for this attempt only.
    pub async fn deliver(
        &self,
        keyring: &Keyring,
        sub: &Subscription,
        ev: &EventOut<'_>,
        now_ms: i64,
    ) -> Outcome {
        match open(keyring, sub, now_ms) {
            Ok(material) => self.send(sub, &material, ev, now_ms).await,
            Err(outcome) => outcome,
        }
    }

    /// One attempt with the given material (a credential being onboarded is probed before it
    /// is sealed).
    pub async fn send(
        &self,
        sub: &Subscription,
        material: &Material,
        ev: &EventOut<'_>,
        now_ms: i64,
    ) -> Outcome {
        let endpoint = sub.endpoint.as_deref().unwrap_or_default();
        match (sub.sink_kind, material) {
            (SinkKind::Webhook, Material::Signing(keys)) => {
                self.webhook
                    .send(&webhook_attempt(sub, ev, now_ms), keys)
                    .await
            }
            (
                SinkKind::Rabbitmq,
                Material::Credential(Credential::Rabbitmq { username, password }),
            ) => self.rabbitmq.send(endpoint, username, password, ev).await,
            (
                kind @ (SinkKind::Sqs | SinkKind::Eventbridge),
                Material::Credential(Credential::Aws {
                    access_key_id,
                    secret_access_key,
                    session_token,
                }),
            ) => {
                let keys = aws::Keys {
                    access_key_id,
                    secret_access_key,
                    session_token: session_token.as_deref(),
                };
                self.send_aws(kind, endpoint, keys, ev).await
            }
            (
                kind @ (SinkKind::Sqs | SinkKind::Eventbridge),
                Material::Credential(Credential::AwsRole { role_arn, region }),
            ) => {
                let external_id = grant::external_id(sub);
                match self
                    .roles
                    .session(role_arn, region, &external_id, now_ms)
                    .await
                {
                    Ok(session) => self.send_aws(kind, endpoint, session.keys(), ev).await,
                    Err(outcome) => outcome,
                }
            }
            (kind, _) => Outcome::refused(
                ErrorClass::SecretUnavailable,
                format!("no usable secret or credential for a {kind} subscription"),
            ),
        }
    }
}

impl Sinks {
    async fn send_aws(
        &self,
        kind: SinkKind,
        endpoint: &str,
        keys: aws::Keys<'_>,
        ev: &EventOut<'_>,
    ) -> Outcome {
        if kind == SinkKind::Sqs {
            self.sqs.send(endpoint, keys, ev).await
        } else {
            self.eventbridge.send(endpoint, keys, ev).await
        }
    }
}

/// What a webhook attempt of `ev` to `sub` sends at `now_ms`, for either webhook client.
pub fn webhook_attempt<'a>(sub: &'a Subscription, ev: &EventOut<'a>, now_ms: i64) -> Attempt<'a> {
    Attempt {
        endpoint: sub.endpoint.as_deref().unwrap_or_default(),
        event_id: ev.id,
        event_key: ev.key,
        source: ev.source,
        tenant: ev.tenant,
        schema_version: ev.schema_version,
        content_type: ev.content_type,
        traceparent: ev.traceparent,
        tracestate: ev.tracestate,
        body: ev.body.clone(),
        timeout: webhook_timeout(sub),
        unix_s: now_ms / 1000,
    }
}

fn webhook_timeout(sub: &Subscription) -> Duration {
    Duration::from_millis(u64::from(
        sub.timeout_ms
            .filter(|t| *t > 0)
            .unwrap_or(DEFAULT_TIMEOUT_MS),
    ))
}

/// A webhook subscription's signing keys at `now_ms`, opened in memory (R-DI-4), for a client
/// that sends the webhook itself (the engine's shards), and until when they stay the keys to
/// sign with: the end of a rotation's overlap while the previous secret still signs, otherwise
/// `i64::MAX` (a new secret is a new sealed value, which a cache compares).
pub fn open_signing(
    keyring: &Keyring,
    sub: &Subscription,
    now_ms: i64,
) -> Result<(Keys, i64), Outcome> {
    if sub.sink_kind != SinkKind::Webhook {
        return Err(unavailable(&format!(
            "no usable secret or credential for a {} subscription",
            sub.sink_kind
        )));
    }
    signing_keys(&open_sealed(keyring, sub)?, now_ms)
}

/// The signing keys an opened webhook secret gives at `now_ms`, and until when (`open_signing`).
fn signing_keys(secret: &Secret, now_ms: i64) -> Result<(Keys, i64), Outcome> {
    let malformed = || unavailable("the signing secret is malformed");
    let secrets = SigningSecrets::parse(&secret.0).ok_or_else(malformed)?;
    let keys = secrets.keys(now_ms).map_err(|_| malformed())?;
    let until = match (&keys.previous, secrets.previous_until_ms) {
        (Some(_), Some(end)) => end,
        _ => i64::MAX,
    };
    Ok((keys, until))
}

/// An attempt or probe that cannot start for want of its secret or credential.
fn unavailable(why: &str) -> Outcome {
    Outcome::refused(ErrorClass::SecretUnavailable, why)
}

/// The master key id `sub`'s secret or credential is sealed under, when `keyring` does not hold
/// it: a process deployed without the key material the others use (R-SEC-1).
pub fn missing_key<'s>(keyring: &Keyring, sub: &'s Subscription) -> Option<&'s str> {
    sub.secret
        .as_ref()
        .map(|s| s.key_id.as_str())
        .filter(|k| !keyring.holds(k))
}

/// Opens the subscription's sealed secret: the signing keys of `now_ms` for a webhook (both
/// during a rotation overlap), the credential for a queue kind.
pub fn open(keyring: &Keyring, sub: &Subscription, now_ms: i64) -> Result<Material, Outcome> {
    let secret = open_sealed(keyring, sub)?;
    match sub.sink_kind {
        SinkKind::Webhook => {
            signing_keys(&secret, now_ms).map(|(keys, _)| Material::Signing(Box::new(keys)))
        }
        _ => Credential::from_bytes(secret.0.as_bytes())
            .map(Material::Credential)
            .ok_or_else(|| unavailable("the credential is malformed")),
    }
}

/// The subscription's sealed secret or credential, opened.
fn open_sealed(keyring: &Keyring, sub: &Subscription) -> Result<Secret, Outcome> {
    let sealed = sub.secret.as_ref().ok_or_else(|| {
        unavailable(match sub.sink_kind {
            SinkKind::Webhook => "the subscription has no signing secret",
            _ => "the subscription has no credential yet (PUT …/credential)",
        })
    })?;
    if let Some(key_id) = missing_key(keyring, sub) {
        return Err(Outcome::refused(
            ErrorClass::SecretUnavailable,
            format!(
                "sealed under master key {key_id:?}, which this process does not hold \
                 (STREAMING_HUB_MASTER_KEYS)"
            ),
        ));
    }
    keyring
        .open(sealed, &binding(sub))
        .map_err(|_| unavailable("the secret could not be opened"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{SinkKind, VerificationState};

    fn subscription(kind: SinkKind) -> Subscription {
        Subscription {
            verification_state: VerificationState::Active,
            ..Subscription::new("t", "s", kind, 0)
        }
    }

    #[test]
    fn r_di_4_an_attempt_opens_its_own_subscriptions_secret_or_credential_in_memory() {
        let keyring =
            Keyring::parse(&Keyring::generate_spec("k1").expect("spec")).expect("keyring");
        let mut queue = subscription(SinkKind::Rabbitmq);
        let cred = Credential::Rabbitmq {
            username: "u".into(),
            password: "p".into(),
        };
        assert!(open(&keyring, &queue, 0).is_err(), "no credential yet");
        queue.secret = Some(
            keyring
                .seal(&cred.to_bytes(), &binding(&queue))
                .expect("seal"),
        );
        match open(&keyring, &queue, 0) {
            Ok(Material::Credential(c)) => assert_eq!(c, cred),
            other => panic!("expected the credential, got {other:?}"),
        }
        let mut hook = subscription(SinkKind::Webhook);
        let secret = keyring.new_signing_secret().expect("secret");
        hook.secret = Some(
            keyring
                .seal(secret.0.as_bytes(), &binding(&hook))
                .expect("seal"),
        );
        assert!(matches!(open(&keyring, &hook, 0), Ok(Material::Signing(_))));
        // A sealed value copied onto another subscription does not open there.
        let mut other = subscription(SinkKind::Rabbitmq);
        other.secret = queue.secret.clone();
        let refused = open(&keyring, &other, 0).expect_err("bound to its subscription");
        assert_eq!(refused.error_class, Some(ErrorClass::SecretUnavailable));
    }
}
