//! Destination checks (R-SEC-2, R-SK-2): which addresses a tenant's subscription may point at.
//!
//! Pure classification of IPv4 (including the decimal, octal and hex spellings `inet_aton`
//! accepts), IPv6 and IPv4-mapped/-translated IPv6 against tables of IANA's special-purpose
//! ranges (`ipnet`); then the endpoint rules per sink kind, with names resolved by hickory under
//! a time limit (typed failures). The operator allow-list names private hosts a webhook or
//! RabbitMQ subscription may use; SQS and EventBridge never get that exception.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use async_trait::async_trait;
use ipnet::{Ipv4Net, Ipv6Net};

use crate::error::{ApiError, ErrorCode};
use crate::model::SinkKind;

/// Special-purpose IPv4 ranges no tenant destination may be in (IANA's IPv4 Special-Purpose
/// Address Registry, RFC 6890 and its updates, plus the cloud metadata address), most specific
/// first: the first match names the reason.
const REFUSED_V4: &[(&str, &str)] = &[
    ("169.254.169.254/32", "cloud metadata"),
    ("0.0.0.0/8", "unspecified"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "carrier-grade NAT"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local"),
    ("172.16.0.0/12", "private"),
    // Protocol assignments; 192.0.0.192 is Oracle Cloud's metadata service.
    ("192.0.0.0/24", "reserved"),
    ("192.0.2.0/24", "documentation"),
    ("192.88.99.0/24", "6to4 relay anycast"),
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),
];

/// Special-purpose IPv6 ranges (IANA's IPv6 Special-Purpose Address Registry and the
/// deprecated site-local range). The forms that carry an IPv4 address are classified by it
/// first (`embedded_v4`), then refused anyway: the hub never connects through a translator.
const REFUSED_V6: &[(&str, &str)] = &[
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("::ffff:0:0:0/96", "IPv4-translated"),
    ("::/96", "IPv4-compatible"),
    ("64:ff9b::/96", "NAT64"),
    ("64:ff9b:1::/48", "local-use NAT64"),
    ("100::/64", "discard-only"),
    ("2001::/32", "Teredo"),
    ("2001:2::/48", "benchmarking"),
    ("2001:10::/28", "ORCHID"),
    ("2001:db8::/32", "documentation"),
    ("2002::/16", "6to4"),
    ("3fff::/20", "documentation"),
    ("5f00::/16", "segment routing"),
    ("fc00::/7", "unique-local"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local"),
    ("ff00::/8", "multicast"),
];

/// The refused ranges, each with its reason.
type RefusedNets = (Vec<(Ipv4Net, &'static str)>, Vec<(Ipv6Net, &'static str)>);

/// The tables, parsed once.
fn refused_nets() -> &'static RefusedNets {
    static NETS: std::sync::OnceLock<RefusedNets> = std::sync::OnceLock::new();
    NETS.get_or_init(|| {
        // The tables are constants checked by the tests below: a typo fails them, not a user.
        let v4 = REFUSED_V4
            .iter()
            .filter_map(|(net, why)| net.parse().ok().map(|n| (n, *why)))
            .collect();
        let v6 = REFUSED_V6
            .iter()
            .filter_map(|(net, why)| net.parse().ok().map(|n| (n, *why)))
            .collect();
        (v4, v6)
    })
}

/// Why an address is refused, or `None` for a public unicast address.
pub fn refused_because(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => refused_v4(v4),
        IpAddr::V6(v6) => refused_v6(v6),
    }
}

fn refused_v4(ip: Ipv4Addr) -> Option<&'static str> {
    refused_nets()
        .0
        .iter()
        .find(|(net, _)| net.contains(&ip))
        .map(|(_, why)| *why)
}

fn refused_v6(ip: Ipv6Addr) -> Option<&'static str> {
    // IPv4-mapped (`::ffff:a.b.c.d`) reaches the IPv4 address itself: judged as that address.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return refused_v4(v4);
    }
    let range = refused_nets()
        .1
        .iter()
        .find(|(net, _)| net.contains(&ip))
        .map(|(_, why)| *why)?;
    Some(embedded_v4(ip).and_then(refused_v4).unwrap_or(range))
}

/// The IPv4 address NAT64 (`64:ff9b::/96`), IPv4-compatible (`::/96`) and 6to4 (`2002::/16`)
/// addresses carry, to name the more telling reason (`64:ff9b::a9fe:a9fe` is cloud metadata).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let pair = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    match s {
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(pair(hi, lo)),
        // `::` and `::1` are themselves, not IPv4-compatible forms.
        [0, 0, 0, 0, 0, 0, hi, lo] if hi != 0 => Some(pair(hi, lo)),
        [0x2002, hi, lo, ..] => Some(pair(hi, lo)),
        _ => None,
    }
}

/// Parses the IPv4 spellings `inet_aton` accepts: 1 to 4 parts, each decimal, octal (`0` prefix)
/// or hex (`0x` prefix), the last filling the remaining bytes (`127.1`, `2130706433`,
/// `0x7f.0.0.1`, `0177.0.0.1`). An attacker writes loopback this way to slip past a naive check.
pub fn parse_ipv4_loose(host: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = host.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut values = Vec::with_capacity(parts.len());
    for p in &parts {
        let v = if let Some(hex) = p.strip_prefix("0x").or_else(|| p.strip_prefix("0X")) {
            u64::from_str_radix(hex, 16).ok()?
        } else if p.len() > 1 && p.starts_with('0') {
            u64::from_str_radix(&p[1..], 8).ok()?
        } else {
            p.parse::<u64>().ok()?
        };
        values.push(v);
    }
    let (last, head) = values.split_last()?;
    let mut addr: u64 = 0;
    for (i, v) in head.iter().enumerate() {
        if *v > 255 {
            return None;
        }
        addr |= v << (24 - 8 * i);
    }
    let room = 32 - 8 * head.len();
    if *last >= (1u64 << room) {
        return None;
    }
    addr |= last;
    Some(Ipv4Addr::from(u32::try_from(addr).ok()?))
}

/// Why a name could not be resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolveError {
    /// The name does not exist: the tenant's mistake (422).
    NotFound,
    /// The resolver failed (503).
    Unavailable,
    /// The resolver did not answer in time (504).
    Timeout,
}

#[async_trait]
pub trait Resolver: Send + Sync + std::fmt::Debug {
    async fn resolve(&self, host: &str, port: u16) -> Result<Vec<IpAddr>, ResolveError>;
}

/// The system's DNS servers (`/etc/resolv.conf`, and the hosts file) through hickory, under a
/// time limit: a failure comes back typed, so a missing name (NXDOMAIN, or no address records)
/// is the tenant's 422, a timeout 504 and anything else the resolver's 503.
#[derive(Clone)]
pub struct DnsResolver {
    inner: std::sync::Arc<hickory_resolver::TokioResolver>,
    timeout: Duration,
}

impl std::fmt::Debug for DnsResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DnsResolver")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl DnsResolver {
    /// The system's configuration; without a readable one, a resolver that answers only from
    /// the hosts file would hide the problem, so this fails and says why.
    pub fn system(timeout: Duration) -> Result<Self, String> {
        let mut builder = hickory_resolver::TokioResolver::builder_tokio()
            .map_err(|e| format!("reading the system's DNS configuration: {e}"))?;
        builder.options_mut().timeout = timeout;
        builder.options_mut().attempts = 1;
        Ok(Self {
            inner: std::sync::Arc::new(builder.build()),
            timeout,
        })
    }
}

/// A hickory failure as the API's three outcomes.
fn classify_dns_failure(e: &hickory_resolver::ResolveError) -> ResolveError {
    use hickory_resolver::proto::ProtoErrorKind;
    if e.is_nx_domain() || e.is_no_records_found() {
        return ResolveError::NotFound;
    }
    match e.proto().map(|p| p.kind()) {
        Some(ProtoErrorKind::Timeout) => ResolveError::Timeout,
        _ => ResolveError::Unavailable,
    }
}

#[async_trait]
impl Resolver for DnsResolver {
    async fn resolve(&self, host: &str, _port: u16) -> Result<Vec<IpAddr>, ResolveError> {
        // hickory's own timeout is per query; this bounds the whole lookup (A and AAAA).
        let lookup = self.inner.lookup_ip(host);
        match tokio::time::timeout(self.timeout.saturating_mul(2), lookup).await {
            Err(_) => Err(ResolveError::Timeout),
            Ok(Err(e)) => Err(classify_dns_failure(&e)),
            Ok(Ok(found)) => {
                let ips: Vec<IpAddr> = found.iter().collect();
                if ips.is_empty() {
                    Err(ResolveError::NotFound)
                } else {
                    Ok(ips)
                }
            }
        }
    }
}

/// The operator's destination policy.
#[derive(Debug, Clone, Default)]
pub struct DestinationPolicy {
    /// Hosts (`host` for webhooks, `host:port` for RabbitMQ) that may be private. Lower-case.
    pub allow: HashSet<String>,
}

impl DestinationPolicy {
    /// Whether `host` is allow-listed for `kind` on some port: the connect-time check of a
    /// webhook (which sees a name, not the port) uses this.
    pub fn allows_host(&self, kind: SinkKind, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        let host = host.trim_start_matches('[').trim_end_matches(']');
        kind == SinkKind::Webhook
            && (self.allow.contains(host)
                || self.allow.iter().any(|a| {
                    a.rsplit_once(':').is_some_and(|(h, p)| {
                        h.trim_start_matches('[').trim_end_matches(']') == host
                            && p.parse::<u16>().is_ok()
                    })
                }))
    }

    /// Whether `host:port` is allow-listed for `kind` (webhooks: the host alone suffices).
    pub fn allows(&self, kind: SinkKind, host: &str, port: u16) -> bool {
        let host = host.to_ascii_lowercase();
        match kind {
            SinkKind::Webhook => {
                self.allow.contains(&host) || self.allow.contains(&format!("{host}:{port}"))
            }
            SinkKind::Rabbitmq => self.allow.contains(&format!("{host}:{port}")),
            _ => false,
        }
    }
}

fn not_allowed(why: &str) -> ApiError {
    ApiError::new(
        ErrorCode::DestinationNotAllowed,
        format!("the destination is {why}"),
    )
}

fn invalid_endpoint(why: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::InvalidEndpoint, why)
}

/// Checks `endpoint` for a subscription of `kind` — its shape, then every address it names or
/// resolves to — and gives it in the one form the hub stores and uses (issue 16): a URL as the
/// URL parser reads it (host lower-cased, default port dropped, `/` for an empty path), so what
/// a read shows is what deliveries call. A spelling the parser would silently repair is refused
/// instead: whitespace or control characters anywhere (a CRLF inside, a leading space), or a
/// scheme not followed by `//` (`https:host`). Nothing is written before this passes.
pub async fn check_endpoint(
    policy: &DestinationPolicy,
    resolver: &dyn Resolver,
    kind: SinkKind,
    endpoint: Option<&str>,
) -> Result<Option<String>, ApiError> {
    let Some(endpoint) = endpoint else {
        return check_endpoint_as_sent(policy, resolver, kind, None)
            .await
            .map(|_| None);
    };
    if endpoint
        .chars()
        .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(invalid_endpoint(
            "an endpoint has no spaces or control characters",
        ));
    }
    match check_endpoint_as_sent(policy, resolver, kind, Some(endpoint)).await? {
        Some(url) => {
            if !endpoint[url.scheme().len()..].starts_with("://") {
                return Err(invalid_endpoint(format!(
                    "write the endpoint as {}://host/…",
                    url.scheme()
                )));
            }
            // Stored as used, encoded: the limit holds for that form too (found by fuzzing:
            // a short text of non-ASCII characters grows ninefold once percent-encoded, and a
            // stored form over the limit would not pass its own check again).
            let stored = url.to_string();
            if stored.len() > MAX_ENDPOINT {
                return Err(invalid_endpoint(format!(
                    "endpoint is longer than {MAX_ENDPOINT} characters once percent-encoded"
                )));
            }
            Ok(Some(stored))
        }
        None => Ok(Some(endpoint.to_owned())),
    }
}

/// Longest endpoint, as sent and as stored.
const MAX_ENDPOINT: usize = 2048;

/// The shape and address rules of [`check_endpoint`], on the endpoint as sent; a webhook's or
/// RabbitMQ's endpoint comes back parsed.
async fn check_endpoint_as_sent(
    policy: &DestinationPolicy,
    resolver: &dyn Resolver,
    kind: SinkKind,
    endpoint: Option<&str>,
) -> Result<Option<url::Url>, ApiError> {
    let endpoint = match (kind, endpoint) {
        (SinkKind::Pull, None) => return Ok(None),
        (SinkKind::Pull, Some(_)) => {
            return Err(invalid_endpoint("a pull subscription has no endpoint"))
        }
        (_, None) => return Err(invalid_endpoint("endpoint is required")),
        (_, Some(e)) => e,
    };
    if endpoint.len() > MAX_ENDPOINT {
        return Err(invalid_endpoint(format!(
            "endpoint is longer than {MAX_ENDPOINT} characters"
        )));
    }
    // SQS and EventBridge name a region, an account and a queue or bus; the hub calls that
    // region's AWS endpoint, never a host the tenant names (R-SK-2): nothing to resolve.
    match kind {
        SinkKind::Sqs => {
            return crate::sink::sqs::endpoint::SqsTarget::parse(endpoint)
                .map(|_| None)
                .map_err(invalid_endpoint)
        }
        SinkKind::Eventbridge => {
            return crate::sink::eventbridge::endpoint::BusTarget::parse(endpoint)
                .map(|_| None)
                .map_err(invalid_endpoint)
        }
        _ => {}
    }
    if kind == SinkKind::Rabbitmq {
        crate::sink::rabbitmq::endpoint::RabbitTarget::parse(endpoint).map_err(invalid_endpoint)?;
    }
    let url = url::Url::parse(endpoint).map_err(|_| invalid_endpoint("endpoint is not a URL"))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid_endpoint(
            "credentials do not belong in the endpoint",
        ));
    }
    let schemes: &[&str] = match kind {
        SinkKind::Webhook => &["https", "http"],
        SinkKind::Rabbitmq => &["amqps", "amqp"],
        SinkKind::Sqs | SinkKind::Eventbridge => &["https"],
        SinkKind::Pull => &[],
    };
    if !schemes.contains(&url.scheme()) {
        return Err(invalid_endpoint(format!(
            "a {kind} endpoint uses {}",
            schemes.join(" or ")
        )));
    }
    if url.port() == Some(0) {
        return Err(invalid_endpoint("port 0 is not a destination"));
    }
    let port = url.port_or_known_default().unwrap_or(match url.scheme() {
        "amqps" => 5671,
        "amqp" => 5672,
        _ => 443,
    });
    let host = match url.host() {
        Some(url::Host::Domain(d)) => d.to_owned(),
        Some(url::Host::Ipv4(ip)) => ip.to_string(),
        Some(url::Host::Ipv6(ip)) => ip.to_string(),
        None => return Err(invalid_endpoint("endpoint has no host")),
    };
    let allowed = policy.allows(kind, &host, port);
    if kind == SinkKind::Webhook && url.scheme() == "http" && !allowed {
        return Err(invalid_endpoint("a webhook endpoint must use https"));
    }
    if allowed {
        return Ok(Some(url));
    }
    let literal = match url.host() {
        Some(url::Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
        Some(url::Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
        Some(url::Host::Domain(d)) => parse_ipv4_loose(d).map(IpAddr::V4),
        None => None,
    };
    let addresses = match literal {
        Some(ip) => vec![ip],
        None => resolver.resolve(&host, port).await.map_err(|e| match e {
            ResolveError::NotFound => ApiError::new(
                ErrorCode::DestinationUnresolvable,
                format!("{host} does not resolve"),
            ),
            ResolveError::Unavailable => {
                ApiError::new(ErrorCode::DnsUnavailable, "the resolver failed; retry")
            }
            ResolveError::Timeout => ApiError::new(
                ErrorCode::DnsTimeout,
                "the resolver did not answer in time; retry",
            ),
        })?,
    };
    for ip in addresses {
        if let Some(why) = refused_because(ip) {
            return Err(not_allowed(why));
        }
    }
    Ok(Some(url))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_sec_2_every_private_class_is_refused_and_public_passes() {
        for (ip, why) in [
            ("127.0.0.1", "loopback"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("169.254.1.1", "link-local"),
            ("169.254.169.254", "cloud metadata"),
            ("100.64.0.1", "carrier-grade NAT"),
            ("224.0.0.1", "multicast"),
            ("0.0.0.0", "unspecified"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fe80::1", "link-local"),
            ("fd00:ec2::254", "unique-local"),
            ("ff02::1", "multicast"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:169.254.169.254", "cloud metadata"),
            ("64:ff9b::a9fe:a9fe", "cloud metadata"),
            ("64:ff9b::808:808", "NAT64"),
            ("64:ff9b:1::1", "local-use NAT64"),
            ("::ffff:0:a00:1", "IPv4-translated"),
            ("::7f00:1", "loopback"),
            ("2002:c0a8:101::1", "private"),
            ("2002:808:808::1", "6to4"),
            ("2001:0:4136:e378::1", "Teredo"),
            ("2001:2::1", "benchmarking"),
            ("2001:db8::1", "documentation"),
            ("3fff::1", "documentation"),
            ("100::1", "discard-only"),
            ("fec0::1", "site-local"),
            ("192.0.2.1", "documentation"),
            ("198.51.100.7", "documentation"),
            ("203.0.113.9", "documentation"),
            ("192.88.99.1", "6to4 relay anycast"),
            ("192.0.0.192", "reserved"),
            ("198.18.0.1", "benchmarking"),
            ("198.19.255.255", "benchmarking"),
            ("255.255.255.255", "reserved"),
            ("239.1.1.1", "multicast"),
        ] {
            let parsed: IpAddr = ip.parse().expect(ip);
            assert_eq!(refused_because(parsed), Some(why), "{ip}");
        }
        for ip in [
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "::ffff:1.1.1.1",
            "192.0.1.1",
            "198.20.0.1",
            "2001:4860::8888",
            "2003::1",
            "2a00:1450::1",
        ] {
            assert_eq!(refused_because(ip.parse().expect(ip)), None, "{ip}");
        }
    }

    /// R-SEC-2 (issue 16): the resolver's failures are told apart by their kind, never by
    /// message text: a name that does not exist (NXDOMAIN) or has no address records is the
    /// tenant's (422), a timeout 504, anything else the resolver's (503).
    #[test]
    fn r_sec_2_dns_failures_are_classified_by_kind() {
        use hickory_resolver::proto::op::{Query, ResponseCode};
        use hickory_resolver::proto::{ProtoError, ProtoErrorKind};
        let no_records = |code| {
            let e =
                ProtoError::nx_error(Box::<Query>::default(), None, None, None, code, true, None);
            hickory_resolver::ResolveError::from(e)
        };
        let of =
            |kind: ProtoErrorKind| hickory_resolver::ResolveError::from(ProtoError::from(kind));
        assert_eq!(
            classify_dns_failure(&no_records(ResponseCode::NXDomain)),
            ResolveError::NotFound
        );
        assert_eq!(
            classify_dns_failure(&no_records(ResponseCode::NoError)),
            ResolveError::NotFound
        );
        assert_eq!(
            classify_dns_failure(&of(ProtoErrorKind::Timeout)),
            ResolveError::Timeout
        );
        assert_eq!(
            classify_dns_failure(&of(ProtoErrorKind::NoConnections)),
            ResolveError::Unavailable
        );
        assert_eq!(
            classify_dns_failure(&of(ProtoErrorKind::Busy)),
            ResolveError::Unavailable
        );
    }

    /// The range tables parse whole: a typo would silently open a range.
    #[test]
    fn r_sec_2_every_refused_range_parses() {
        let (v4, v6) = refused_nets();
        assert_eq!(v4.len(), REFUSED_V4.len());
        assert_eq!(v6.len(), REFUSED_V6.len());
    }

    #[test]
    fn r_sec_2_ipv4_in_decimal_octal_and_hex_is_read_as_inet_aton_does() {
        let lo = Some(Ipv4Addr::new(127, 0, 0, 1));
        for form in [
            "2130706433",
            "0x7f000001",
            "0177.0.0.1",
            "0x7f.0.0.1",
            "127.1",
            "127.0.1",
        ] {
            assert_eq!(parse_ipv4_loose(form), lo, "{form}");
        }
        assert_eq!(
            parse_ipv4_loose("169.254.43518"),
            Some(Ipv4Addr::new(169, 254, 169, 254))
        );
        for not_ip in ["example.com", "1.2.3.4.5", "256.0.0.1", "08.0.0.1", ""] {
            assert_eq!(parse_ipv4_loose(not_ip), None, "{not_ip}");
        }
    }

    #[derive(Debug)]
    struct Fixed(Result<Vec<IpAddr>, ResolveError>);

    #[async_trait]
    impl Resolver for Fixed {
        async fn resolve(&self, _: &str, _: u16) -> Result<Vec<IpAddr>, ResolveError> {
            self.0.clone()
        }
    }

    async fn check(kind: SinkKind, endpoint: &str, r: Fixed) -> Result<(), ApiError> {
        check_endpoint(&DestinationPolicy::default(), &r, kind, Some(endpoint))
            .await
            .map(drop)
    }

    /// Issue 16: the endpoint is stored as it is used; a spelling the URL parser would repair
    /// silently is refused.
    #[tokio::test]
    async fn r_sec_2_endpoints_are_kept_in_the_form_used_and_silent_repairs_refused() {
        let policy = DestinationPolicy::default();
        let normal = |kind, e: &'static str| {
            let policy = policy.clone();
            async move { check_endpoint(&policy, &public(), kind, Some(e)).await }
        };
        for (kind, sent, kept) in [
            (
                SinkKind::Webhook,
                "https://Example.COM:443",
                "https://example.com/",
            ),
            (
                SinkKind::Webhook,
                "https://example.com/a/../hook?x=1",
                "https://example.com/hook?x=1",
            ),
            (
                SinkKind::Webhook,
                "https://bücher.example/h",
                "https://xn--bcher-kva.example/h",
            ),
            (
                SinkKind::Rabbitmq,
                "amqps://mq.example:5671/vh?exchange=x",
                "amqps://mq.example:5671/vh?exchange=x",
            ),
            (
                SinkKind::Sqs,
                "arn:aws:sqs:us-east-1:123456789012:q",
                "arn:aws:sqs:us-east-1:123456789012:q",
            ),
        ] {
            let got = normal(kind, sent).await.expect(sent);
            assert_eq!(got.as_deref(), Some(kept), "{sent}");
        }
        for (kind, sent) in [
            (SinkKind::Webhook, "https://example.com/ho\r\nok"),
            (SinkKind::Webhook, " https://example.com/hook"),
            (SinkKind::Webhook, "https://example.com/hook "),
            (SinkKind::Webhook, "https://exa\tmple.com/"),
            (SinkKind::Webhook, "https:example.com/hook"),
            (SinkKind::Webhook, "https:/example.com/hook"),
            (SinkKind::Webhook, "https://example.com:0/hook"),
            (SinkKind::Rabbitmq, "amqp:mq.example/?routing_key=k"),
            (
                SinkKind::Eventbridge,
                "arn:aws:events:us-east-1:123456789012:event-bus/b?endpoint=https://10.0.0.1",
            ),
            (SinkKind::Sqs, "arn:aws:sqs:us-east-1:123456789012:q\n"),
        ] {
            let e = normal(kind, sent).await.expect_err(sent);
            assert_eq!(e.code.as_str(), "invalid_endpoint", "{sent:?}");
        }
        assert_eq!(
            check_endpoint(&policy, &public(), SinkKind::Pull, None)
                .await
                .expect("pull"),
            None
        );
    }

    fn public() -> Fixed {
        Fixed(Ok(vec!["93.184.216.34".parse().expect("ip")]))
    }

    #[tokio::test]
    async fn r_sec_2_endpoint_rules_and_resolver_outcomes() {
        let code = |r: Result<(), ApiError>| r.map_or_else(|e| e.code.as_str(), |_| "ok");
        assert_eq!(
            code(check(SinkKind::Webhook, "https://example.com/hook", public()).await),
            "ok"
        );
        assert_eq!(
            code(check(SinkKind::Webhook, "http://example.com/hook", public()).await),
            "invalid_endpoint"
        );
        assert_eq!(
            code(check(SinkKind::Webhook, "ftp://example.com", public()).await),
            "invalid_endpoint"
        );
        assert_eq!(
            code(check(SinkKind::Webhook, "https://user:pw@example.com", public()).await),
            "invalid_endpoint"
        );
        assert_eq!(
            code(check(SinkKind::Webhook, "https://2130706433/", public()).await),
            "destination_not_allowed"
        );
        assert_eq!(
            code(check(SinkKind::Webhook, "https://[::ffff:7f00:1]/", public()).await),
            "destination_not_allowed"
        );
        let private = Fixed(Ok(vec!["10.0.0.5".parse().expect("ip")]));
        assert_eq!(
            code(check(SinkKind::Webhook, "https://internal.example/", private).await),
            "destination_not_allowed"
        );
        let e = check(
            SinkKind::Webhook,
            "https://nope.example/",
            Fixed(Err(ResolveError::NotFound)),
        )
        .await
        .expect_err("nx");
        assert_eq!(
            (e.status(), e.code.as_str()),
            (422, "destination_unresolvable")
        );
        let e = check(
            SinkKind::Webhook,
            "https://a.example/",
            Fixed(Err(ResolveError::Unavailable)),
        )
        .await
        .expect_err("503");
        assert_eq!((e.status(), e.code.as_str()), (503, "dns_unavailable"));
        let e = check(
            SinkKind::Webhook,
            "https://a.example/",
            Fixed(Err(ResolveError::Timeout)),
        )
        .await
        .expect_err("504");
        assert_eq!((e.status(), e.code.as_str()), (504, "dns_timeout"));
        assert_eq!(
            code(
                check(
                    SinkKind::Sqs,
                    "arn:aws:sqs:us-east-1:123456789012:q",
                    public()
                )
                .await
            ),
            "ok"
        );
        assert_eq!(
            code(check(SinkKind::Eventbridge, "arn:aws:sqs:us-east-1:1:q", public()).await),
            "invalid_endpoint"
        );
        assert_eq!(
            code(
                check(
                    SinkKind::Rabbitmq,
                    "amqps://mq.example:5671/vh?exchange=x",
                    public()
                )
                .await
            ),
            "ok"
        );
        assert_eq!(
            code(
                check_endpoint(
                    &DestinationPolicy::default(),
                    &public(),
                    SinkKind::Pull,
                    Some("https://x")
                )
                .await
                .map(drop)
            ),
            "invalid_endpoint"
        );
    }

    #[tokio::test]
    async fn r_sk_2_the_allow_list_opens_private_hosts_for_webhooks_and_rabbitmq_only() {
        let policy = DestinationPolicy {
            allow: ["127.0.0.1".to_owned(), "127.0.0.1:5672".to_owned()].into(),
        };
        let lo = Fixed(Ok(vec!["127.0.0.1".parse().expect("ip")]));
        assert!(check_endpoint(
            &policy,
            &lo,
            SinkKind::Webhook,
            Some("http://127.0.0.1:9000/h")
        )
        .await
        .is_ok());
        assert!(check_endpoint(
            &policy,
            &lo,
            SinkKind::Rabbitmq,
            Some("amqp://127.0.0.1:5672/?exchange=x")
        )
        .await
        .is_ok());
        assert!(
            check_endpoint(
                &policy,
                &lo,
                SinkKind::Rabbitmq,
                Some("amqp://127.0.0.1:15672/?exchange=x")
            )
            .await
            .is_err(),
            "port counts"
        );
        assert!(
            check_endpoint(&policy, &lo, SinkKind::Sqs, Some("https://127.0.0.1/q"))
                .await
                .is_err(),
            "never for SQS"
        );
    }
}
