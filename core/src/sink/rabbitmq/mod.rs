//! The RabbitMQ sink (SPEC §4): publish with publisher confirms, `mandatory` (an unroutable
//! message is a failure, not a silent drop), persistent, `ce-*` headers (R-SK-1).
//!
//! - `endpoint`: the endpoint grammar and the connection URI;
//! - `message`: the message of one event;
//! - `classify`: lapin's errors as error classes;
//! - this file: the client — one connection and channel per (destination, credential), reused
//!   across deliveries and dropped on any failure (the next attempt reconnects), the R-SK-2
//!   check before each connect (a private address only through the operator's allow-list,
//!   host and AMQP port), and a time limit on connecting and on each publish.

pub mod classify;
pub mod endpoint;
pub mod message;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::publisher_confirm::Confirmation;
use lapin::{Channel, Connection, ConnectionProperties};
use tokio::sync::Mutex;

use self::classify::{classify, Step};
use self::endpoint::RabbitTarget;
use crate::destination::{refused_because, DestinationPolicy};
use crate::model::SinkKind;
use crate::sink::outcome::{ErrorClass, Outcome};
use crate::sink::EventOut;

/// Time limit of a connect (TCP, TLS, login, channel) and of one publish until its confirm.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// A link to one destination with one credential.
struct Link {
    connection: Connection,
    channel: Channel,
}

/// The RabbitMQ client of a process: cheap to clone.
#[derive(Clone)]
pub struct RabbitSink {
    /// Keyed by a digest of the connection URI (it holds the password).
    links: Arc<Mutex<HashMap<[u8; 32], Arc<Link>>>>,
    policy: Arc<DestinationPolicy>,
    timeout: Duration,
}

impl std::fmt::Debug for RabbitSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RabbitSink")
    }
}

fn key_of(uri: &str) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, uri.as_bytes());
    let mut k = [0; 32];
    k.copy_from_slice(d.as_ref());
    k
}

impl RabbitSink {
    pub fn new(policy: Arc<DestinationPolicy>) -> Self {
        Self {
            links: Arc::default(),
            policy,
            timeout: TIMEOUT,
        }
    }

    /// Publishes one event to `endpoint` with the credential; never panics, never errs: every
    /// failure is an `Outcome`.
    pub async fn send(
        &self,
        endpoint: &str,
        username: &str,
        password: &str,
        ev: &EventOut<'_>,
    ) -> Outcome {
        let started = Instant::now();
        let target = match RabbitTarget::parse(endpoint) {
            Ok(t) => t,
            Err(why) => return Outcome::refused(ErrorClass::InvalidEndpoint, why),
        };
        let uri = target.uri(username, password);
        let key = key_of(&uri);
        let link = match self.link(&target, key, &uri, password).await {
            Ok(l) => l,
            Err(outcome) => return outcome.took(started),
        };
        let outcome = self.publish(&link, &target, ev).await.took(started);
        if !outcome.success && outcome.error_class != Some(ErrorClass::Unroutable) {
            // A failed channel or connection is not reused; a returned message leaves it intact.
            // Only this link is forgotten: another attempt may already have replaced it with a
            // healthy one, and dropping that would fail its publishes in flight into repeats.
            {
                let mut links = self.links.lock().await;
                if links.get(&key).is_some_and(|l| Arc::ptr_eq(l, &link)) {
                    links.remove(&key);
                }
            }
            // A broken connection may never answer a close: bounded.
            let _ =
                tokio::time::timeout(self.timeout, link.connection.close(200, "hub reconnects"))
                    .await;
        }
        outcome
    }

    async fn link(
        &self,
        target: &RabbitTarget,
        key: [u8; 32],
        uri: &str,
        password: &str,
    ) -> Result<Arc<Link>, Outcome> {
        if let Some(l) = self.links.lock().await.get(&key) {
            if l.channel.status().connected() {
                return Ok(l.clone());
            }
        }
        self.check_destination(target).await?;
        let connect = async {
            let connection = Connection::connect(uri, ConnectionProperties::default()).await?;
            let channel = connection.create_channel().await?;
            channel
                .confirm_select(ConfirmSelectOptions::default())
                .await?;
            Ok::<_, lapin::Error>(Link {
                connection,
                channel,
            })
        };
        let link = match tokio::time::timeout(self.timeout, connect).await {
            Ok(Ok(l)) => Arc::new(l),
            Ok(Err(e)) => {
                return Err(Outcome::refused(
                    classify(&e, Step::Connect),
                    redact(&e.to_string(), password),
                ))
            }
            Err(_) => {
                return Err(Outcome::refused(
                    ErrorClass::Timeout,
                    "the broker did not complete the connection in time",
                ))
            }
        };
        let mut links = self.links.lock().await;
        // Another attempt may have connected meanwhile: keep one link per destination.
        let kept = links.entry(key).or_insert_with(|| link.clone()).clone();
        if !Arc::ptr_eq(&kept, &link) {
            let _ =
                tokio::time::timeout(self.timeout, link.connection.close(200, "duplicate link"))
                    .await;
        }
        Ok(kept)
    }

    /// R-SK-2: a RabbitMQ destination may be private only when the operator allow-lists its host
    /// and port.
    async fn check_destination(&self, target: &RabbitTarget) -> Result<(), Outcome> {
        if self
            .policy
            .allows(SinkKind::Rabbitmq, &target.host, target.port)
        {
            return Ok(());
        }
        let addresses = tokio::time::timeout(
            self.timeout,
            tokio::net::lookup_host((target.host.as_str(), target.port)),
        )
        .await;
        let addresses: Vec<_> = match addresses {
            Ok(Ok(a)) => a.collect(),
            Ok(Err(_)) => {
                return Err(Outcome::refused(
                    ErrorClass::ConnectionFailed,
                    format!("{} does not resolve", target.host),
                ))
            }
            Err(_) => {
                return Err(Outcome::refused(
                    ErrorClass::Timeout,
                    "resolving the broker timed out",
                ))
            }
        };
        match addresses.iter().find_map(|a| refused_because(a.ip())) {
            Some(why) => Err(Outcome::refused(
                ErrorClass::DestinationNotAllowed,
                format!("{} resolves to a {why} address", target.host),
            )),
            None => Ok(()),
        }
    }

    async fn publish(&self, link: &Link, target: &RabbitTarget, ev: &EventOut<'_>) -> Outcome {
        let publish = async {
            link.channel
                .basic_publish(
                    &target.exchange,
                    &target.routing_key,
                    BasicPublishOptions {
                        mandatory: true,
                        ..Default::default()
                    },
                    &ev.body,
                    message::properties(ev),
                )
                .await?
                .await
        };
        match tokio::time::timeout(self.timeout, publish).await {
            Ok(Ok(Confirmation::Ack(None))) => Outcome::delivered(None, Duration::ZERO),
            Ok(Ok(Confirmation::Ack(Some(returned)))) => Outcome::refused(
                ErrorClass::Unroutable,
                format!(
                    "the broker returned the message: {} {}",
                    returned.reply_code, returned.reply_text
                ),
            ),
            Ok(Ok(Confirmation::Nack(_))) => Outcome::refused(
                ErrorClass::Rejected,
                "the broker refused the message (nack)",
            ),
            Ok(Ok(Confirmation::NotRequested)) => Outcome::refused(
                ErrorClass::RequestFailed,
                "the channel is not in confirm mode",
            ),
            Ok(Err(e)) => Outcome::refused(classify(&e, Step::Publish), e.to_string()),
            Err(_) => Outcome::refused(
                ErrorClass::Timeout,
                "the broker did not confirm the publish in time",
            ),
        }
    }
}

/// Removes the password from a driver message (some echo the URI).
fn redact(text: &str, password: &str) -> String {
    if password.is_empty() {
        text.to_owned()
    } else {
        text.replace(password, "***")
    }
}
