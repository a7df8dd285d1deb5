//! Webhook signatures (R-DI-12): HMAC-SHA256 with the subscription's signing secret over
//! `<event-id>.<unix-seconds>.<raw body>`, sent both as `X-Lerian-Signature: t=…,v1=…` and in the
//! Standard Webhooks form (`webhook-id`, `webhook-timestamp`, `webhook-signature: v1,…`) so
//! receivers can verify with off-the-shelf libraries. During a rotation overlap both secrets sign.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use reqwest::header::HeaderName;
use ring::hmac;

/// The signature headers' names, checked at compile time (an HTTP/1 name is case-insensitive and
/// goes out in lower case whatever it is written as; a constant costs no parsing per attempt).
pub const WEBHOOK_ID: HeaderName = HeaderName::from_static("webhook-id");
pub const WEBHOOK_TIMESTAMP: HeaderName = HeaderName::from_static("webhook-timestamp");
pub const WEBHOOK_SIGNATURE: HeaderName = HeaderName::from_static("webhook-signature");
pub const LERIAN_TIMESTAMP: HeaderName = HeaderName::from_static("x-lerian-timestamp");
pub const LERIAN_SIGNATURE: HeaderName = HeaderName::from_static("x-lerian-signature");
pub const LERIAN_SIGNATURE_PREVIOUS: HeaderName =
    HeaderName::from_static("x-lerian-signature-previous");

/// A signing secret as issued (`whsec_` + base64 key); the key is the decoded part.
#[derive(Clone)]
pub struct SigningKey(hmac::Key);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey(…)")
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("a signing secret is whsec_ followed by base64")]
pub struct BadSecret;

impl SigningKey {
    pub fn from_secret(secret: &str) -> Result<Self, BadSecret> {
        let b64 = secret.strip_prefix("whsec_").unwrap_or(secret);
        let raw = STANDARD.decode(b64).map_err(|_| BadSecret)?;
        if raw.is_empty() {
            return Err(BadSecret);
        }
        Ok(Self(hmac::Key::new(hmac::HMAC_SHA256, &raw)))
    }

    fn sign(&self, id: &str, unix_s: i64, body: &[u8]) -> String {
        let mut ctx = hmac::Context::with_key(&self.0);
        ctx.update(id.as_bytes());
        ctx.update(b".");
        ctx.update(unix_s.to_string().as_bytes());
        ctx.update(b".");
        ctx.update(body);
        STANDARD.encode(ctx.sign().as_ref())
    }
}

/// The signature headers of one attempt, `(name, value)`.
pub fn headers(
    current: &SigningKey,
    previous: Option<&SigningKey>,
    event_id: &str,
    unix_s: i64,
    body: &[u8],
) -> Vec<(HeaderName, String)> {
    let now = current.sign(event_id, unix_s, body);
    let mut standard = format!("v1,{now}");
    let mut out = vec![
        (WEBHOOK_ID, event_id.to_owned()),
        (WEBHOOK_TIMESTAMP, unix_s.to_string()),
        (LERIAN_TIMESTAMP, unix_s.to_string()),
        (LERIAN_SIGNATURE, format!("t={unix_s},v1={now}")),
    ];
    if let Some(prev) = previous {
        let old = prev.sign(event_id, unix_s, body);
        standard.push_str(&format!(" v1,{old}"));
        out.push((LERIAN_SIGNATURE_PREVIOUS, format!("t={unix_s},v1={old}")));
    }
    out.push((WEBHOOK_SIGNATURE, standard));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header<'a>(h: &'a [(HeaderName, String)], name: &str) -> &'a str {
        h.iter()
            .find(|(n, _)| n.as_str().eq_ignore_ascii_case(name))
            .map_or("", |(_, v)| v.as_str())
    }

    /// The Standard Webhooks reference vector: a receiver using any of its libraries verifies us.
    #[test]
    fn r_di_12_matches_the_standard_webhooks_reference_signature() {
        let key = SigningKey::from_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").expect("key");
        let h = headers(
            &key,
            None,
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1_614_265_330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(
            header(&h, "webhook-signature"),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        assert_eq!(
            header(&h, "X-Lerian-Signature"),
            "t=1614265330,v1=g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        assert_eq!(header(&h, "webhook-id"), "msg_p5jXN8AQM9LWM0D4loKWxJek");
        assert!(!h.iter().any(|(n, _)| *n == LERIAN_SIGNATURE_PREVIOUS));
    }

    #[test]
    fn r_di_12_during_rotation_both_secrets_sign() {
        let new = SigningKey::from_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").expect("key");
        let old = SigningKey::from_secret("whsec_c2VjcmV0LW9sZC1zZWNyZXQtb2xk").expect("key");
        let h = headers(&new, Some(&old), "e1", 10, b"{}");
        let both: Vec<&str> = header(&h, "webhook-signature").split(' ').collect();
        assert_eq!(both.len(), 2);
        assert_ne!(both[0], both[1]);
        assert!(header(&h, "X-Lerian-Signature-Previous").starts_with("t=10,v1="));
        assert_eq!(
            SigningKey::from_secret("whsec_***").map(|_| ()),
            Err(BadSecret)
        );
        assert_eq!(format!("{new:?}"), "SigningKey(…)");
    }
}
