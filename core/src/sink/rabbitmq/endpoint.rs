//! The RabbitMQ endpoint (SPEC §4): `amqp[s]://host[:port]/<vhost>?exchange=<x>&routing_key=<k>`.
//! The vhost is the percent-encoded path (`/` alone, or nothing, is the default vhost `/`); the
//! exchange may be empty (the default exchange, which routes by queue name), but then the routing
//! key names the queue. No credentials in the endpoint: they come sealed, with
//! `PUT …/credential`.

/// Where and how to publish.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RabbitTarget {
    pub tls: bool,
    pub host: String,
    pub port: u16,
    pub vhost: String,
    pub exchange: String,
    pub routing_key: String,
}

/// Longest exchange name or routing key AMQP carries (a short string).
const MAX_NAME: usize = 255;

impl RabbitTarget {
    /// Parses and checks an endpoint; the error says what is wrong, never echoing more than the
    /// endpoint itself.
    pub fn parse(endpoint: &str) -> Result<Self, String> {
        let url = url::Url::parse(endpoint).map_err(|_| "endpoint is not a URL".to_owned())?;
        let tls = match url.scheme() {
            "amqp" => false,
            "amqps" => true,
            _ => return Err("a rabbitmq endpoint uses amqp or amqps".into()),
        };
        if !url.username().is_empty() || url.password().is_some() {
            return Err("credentials do not belong in the endpoint".into());
        }
        if url.fragment().is_some() {
            return Err("a rabbitmq endpoint has no fragment".into());
        }
        let host = match url.host() {
            // amqp is not a scheme the URL standard knows, so its host comes back opaque
            // (percent-encoded, anything goes): only a DNS name can be connected to.
            Some(url::Host::Domain(d)) if is_dns_name(d) => d.to_owned(),
            Some(url::Host::Domain(_)) => {
                return Err("the host is not a DNS name (letters, digits, '-' and '.')".into())
            }
            Some(url::Host::Ipv4(ip)) => ip.to_string(),
            Some(url::Host::Ipv6(ip)) => ip.to_string(),
            _ => return Err("endpoint has no host".into()),
        };
        let port = url.port().unwrap_or(if tls { 5671 } else { 5672 });
        let vhost = match url.path() {
            "" | "/" => "/".to_owned(),
            path => {
                let raw = &path[1..];
                if raw.contains('/') {
                    return Err("the vhost is one path segment (encode a '/' in it as %2F)".into());
                }
                percent_decode(raw)?
            }
        };
        let (mut exchange, mut routing_key) = (None, None);
        for (k, v) in url.query_pairs() {
            let slot = match k.as_ref() {
                "exchange" => &mut exchange,
                "routing_key" => &mut routing_key,
                other => return Err(format!("unknown endpoint parameter {other:?}")),
            };
            if slot.replace(v.into_owned()).is_some() {
                return Err(format!("endpoint parameter {k:?} is given twice"));
            }
        }
        let exchange = exchange.unwrap_or_default();
        let routing_key = routing_key.unwrap_or_default();
        if exchange.is_empty() && routing_key.is_empty() {
            return Err(
                "name an exchange (?exchange=) or, for the default exchange, a queue (?routing_key=)"
                    .into(),
            );
        }
        for (what, v) in [("exchange", &exchange), ("routing_key", &routing_key)] {
            if v.len() > MAX_NAME || v.chars().any(char::is_control) {
                return Err(format!(
                    "{what} is at most {MAX_NAME} bytes without control characters"
                ));
            }
        }
        Ok(Self {
            tls,
            host,
            port,
            vhost,
            exchange,
            routing_key,
        })
    }

    /// The connection URI with the credential in it (never logged, never returned).
    pub fn uri(&self, username: &str, password: &str) -> String {
        let enc = |s: &str| {
            url::form_urlencoded::byte_serialize(s.as_bytes())
                .collect::<String>()
                .replace('+', "%20")
        };
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        format!(
            "{}://{}:{}@{}:{}/{}",
            if self.tls { "amqps" } else { "amqp" },
            enc(username),
            enc(password),
            host,
            self.port,
            enc(&self.vhost)
        )
    }
}

/// A host name as DNS has it: dot-separated labels of 1–63 ASCII letters, digits and hyphens
/// (not at a label's ends), 253 bytes at most; a trailing dot is allowed.
fn is_dns_name(host: &str) -> bool {
    let name = host.strip_suffix('.').unwrap_or(host);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

fn percent_decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or("the vhost has a malformed %-escape")?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "the vhost is not UTF-8".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_sk_1_rabbitmq_endpoints_name_host_vhost_exchange_and_routing_key() {
        let t = RabbitTarget::parse("amqp://mq.example/orders?exchange=events&routing_key=loans")
            .expect("valid");
        assert_eq!(
            (t.tls, t.host.as_str(), t.port, t.vhost.as_str()),
            (false, "mq.example", 5672, "orders")
        );
        assert_eq!(
            (t.exchange.as_str(), t.routing_key.as_str()),
            ("events", "loans")
        );
        let d = RabbitTarget::parse("amqps://mq.example:5000/?routing_key=q1").expect("valid");
        assert_eq!((d.tls, d.port, d.vhost.as_str()), (true, 5000, "/"));
        assert_eq!(d.exchange, "", "the default exchange routes by queue name");
        let enc = RabbitTarget::parse("amqp://h/a%2Fb?exchange=x").expect("valid");
        assert_eq!(enc.vhost, "a/b");
        assert_eq!(
            enc.uri("us er", "p@ss/w:rd"),
            "amqp://us%20er:p%40ss%2Fw%3Ard@h:5672/a%2Fb"
        );
    }

    #[test]
    fn r_sk_1_malformed_rabbitmq_endpoints_are_refused() {
        for bad in [
            "https://mq.example/?exchange=x",
            "amqp://user:pw@mq.example/?exchange=x",
            "amqp://mq.example/",
            "amqp://mq.example/v/extra?exchange=x",
            "amqp://mq.example/?exchange=x&colour=red",
            "amqp://mq.example/?exchange=x&exchange=y",
            "amqp://mq.example/%zz?exchange=x",
            "amqp:///?exchange=x",
            // Found by fuzzing: an opaque host the stored form could not pass again.
            "amqp://%EF%BF%BDq.example/?exchange=x",
            "amqp://mq_example/?exchange=x",
            "amqp://-mq.example/?exchange=x",
        ] {
            assert!(RabbitTarget::parse(bad).is_err(), "{bad} must be refused");
        }
    }
}
