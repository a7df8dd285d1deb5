//! How the hub's Kafka clients (the ingest and DLQ consumers, the hub-event producer) reach a
//! secured cluster (issue 16): `security.protocol`, the SASL mechanism and credentials, and the
//! CA that signed the brokers' certificates. The password is read from the configuration, handed
//! to librdkafka and never printed.

use rdkafka::ClientConfig;
use serde::Deserialize;

/// The Kafka transport settings, as configured.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KafkaSecurity {
    /// `plaintext` (the default), `ssl`, `sasl_plaintext` or `sasl_ssl`. Env
    /// `STREAMING_HUB_KAFKA_SECURITY_PROTOCOL`.
    pub protocol: Option<String>,
    /// `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`. Env `STREAMING_HUB_KAFKA_SASL_MECHANISM`.
    pub sasl_mechanism: Option<String>,
    /// Env `STREAMING_HUB_KAFKA_SASL_USERNAME`.
    pub sasl_username: Option<String>,
    /// Env `STREAMING_HUB_KAFKA_SASL_PASSWORD`. Never logged.
    pub sasl_password: Option<String>,
    /// PEM file of the CA(s) the brokers' certificates chain to; the system's roots when unset.
    /// Env `STREAMING_HUB_KAFKA_SSL_CA_FILE`.
    pub ssl_ca_file: Option<String>,
}

impl std::fmt::Debug for KafkaSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSecurity")
            .field("protocol", &self.protocol)
            .field("sasl_mechanism", &self.sasl_mechanism)
            .field("sasl_username", &self.sasl_username)
            .field(
                "sasl_password",
                &self.sasl_password.as_ref().map(|_| "<set>"),
            )
            .field("ssl_ca_file", &self.ssl_ca_file)
            .finish()
    }
}

const PROTOCOLS: [&str; 4] = ["plaintext", "ssl", "sasl_plaintext", "sasl_ssl"];
const MECHANISMS: [&str; 3] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

impl KafkaSecurity {
    fn protocol(&self) -> String {
        self.protocol
            .as_deref()
            .unwrap_or("plaintext")
            .to_ascii_lowercase()
    }

    /// The settings make sense together: a known protocol; SASL with a known mechanism and both
    /// credentials; a CA file only with TLS, and readable.
    pub fn validate(&self) -> Result<(), String> {
        let protocol = self.protocol();
        if !PROTOCOLS.contains(&protocol.as_str()) {
            return Err(format!(
                "STREAMING_HUB_KAFKA_SECURITY_PROTOCOL is one of {}, not {protocol:?}",
                PROTOCOLS.join(", ")
            ));
        }
        let sasl = protocol.starts_with("sasl_");
        if sasl {
            let mechanism = self.sasl_mechanism.as_deref().unwrap_or("PLAIN");
            if !MECHANISMS.contains(&mechanism) {
                return Err(format!(
                    "STREAMING_HUB_KAFKA_SASL_MECHANISM is one of {}, not {mechanism:?}",
                    MECHANISMS.join(", ")
                ));
            }
            if self.sasl_username.is_none() || self.sasl_password.is_none() {
                return Err("SASL needs STREAMING_HUB_KAFKA_SASL_USERNAME and _PASSWORD".into());
            }
        } else if self.sasl_username.is_some() || self.sasl_password.is_some() {
            return Err(format!(
                "SASL credentials are set but the security protocol is {protocol}"
            ));
        }
        if let Some(ca) = &self.ssl_ca_file {
            if !protocol.ends_with("ssl") {
                return Err(format!(
                    "a CA file is set but the security protocol is {protocol}"
                ));
            }
            std::fs::metadata(ca).map_err(|e| format!("the Kafka CA file {ca}: {e}"))?;
        }
        Ok(())
    }

    /// Sets the transport on a librdkafka client configuration.
    pub fn apply(&self, config: &mut ClientConfig) {
        let protocol = self.protocol();
        config.set("security.protocol", &protocol);
        if protocol.starts_with("sasl_") {
            config.set(
                "sasl.mechanism",
                self.sasl_mechanism.as_deref().unwrap_or("PLAIN"),
            );
            if let (Some(user), Some(password)) = (&self.sasl_username, &self.sasl_password) {
                config
                    .set("sasl.username", user)
                    .set("sasl.password", password);
            }
        }
        if let Some(ca) = &self.ssl_ca_file {
            config.set("ssl.ca.location", ca);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sasl_ssl() -> KafkaSecurity {
        KafkaSecurity {
            protocol: Some("SASL_SSL".into()),
            sasl_mechanism: Some("SCRAM-SHA-512".into()),
            sasl_username: Some("hub".into()),
            sasl_password: Some("s3cret-value".into()),
            ssl_ca_file: None,
        }
    }

    #[test]
    fn r_op_3_kafka_security_settings_are_checked_and_the_password_never_printed() {
        assert!(KafkaSecurity::default().validate().is_ok(), "plaintext");
        assert!(sasl_ssl().validate().is_ok());
        let printed = format!("{:?}", sasl_ssl());
        assert!(!printed.contains("s3cret-value"), "{printed}");
        for (bad, says) in [
            (
                KafkaSecurity {
                    protocol: Some("tls".into()),
                    ..KafkaSecurity::default()
                },
                "SECURITY_PROTOCOL",
            ),
            (
                KafkaSecurity {
                    sasl_password: None,
                    ..sasl_ssl()
                },
                "_PASSWORD",
            ),
            (
                KafkaSecurity {
                    sasl_mechanism: Some("GSSAPI".into()),
                    ..sasl_ssl()
                },
                "MECHANISM",
            ),
            (
                KafkaSecurity {
                    sasl_username: Some("hub".into()),
                    ..KafkaSecurity::default()
                },
                "plaintext",
            ),
            (
                KafkaSecurity {
                    ssl_ca_file: Some("/nonexistent/ca.pem".into()),
                    ..sasl_ssl()
                },
                "CA file",
            ),
        ] {
            let e = bad.validate().expect_err(says);
            assert!(e.contains(says), "{e}");
            assert!(!e.contains("s3cret-value"));
        }
    }
}
