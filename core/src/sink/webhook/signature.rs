//! Webhook signatures (R-DI-12): HMAC-SHA256 with the subscription's signing secret over
//! `<event-id>.<unix-seconds>.<raw body>`, sent both as `X-Lerian-Signature: t=…,v1=…` and in the
//! Standard Webhooks form (`webhook-id`, `webhook-timestamp`, `webhook-signature: v1,…`) so
//! receivers can verify with off-the-shelf libraries. During a rotation overlap both secrets sign.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use reqwest::header::{HeaderName, HeaderValue, InvalidHeaderValue};
use ring::hmac;

use super::header_text::{Cut, HeaderText};

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

    /// The signature of `<id>.<timestamp>.<body>`, in base64 (44 characters).
    fn sign(&self, id: &[u8], timestamp: &[u8], body: &[u8]) -> [u8; SIGNATURE_CHARS] {
        let mut ctx = hmac::Context::with_key(&self.0);
        for part in [id, b".", timestamp, b".", body] {
            ctx.update(part);
        }
        let mut encoded = [0u8; SIGNATURE_CHARS];
        // A SHA-256 tag is 32 bytes: its base64 fills the 44 characters exactly.
        let _ = STANDARD.encode_slice(ctx.sign().as_ref(), &mut encoded);
        encoded
    }
}

/// A SHA-256 HMAC in base64 with its padding.
const SIGNATURE_CHARS: usize = 44;

/// Where one attempt's signature values lie in its [`HeaderText`].
#[derive(Debug)]
pub struct Signed {
    timestamp: Cut,
    ours: Cut,
    previous: Option<Cut>,
    standard: Cut,
}

/// Signs one attempt (`event_id`, already in `text`, being the value its `X-Lerian-Event-Id`
/// carries) and writes the signature values into `text`: the timestamp, ours (`t=…,v1=…`, and
/// the previous secret's during a rotation's overlap) and the Standard Webhooks form
/// (`v1,<signature>`, space-separated during an overlap).
pub fn sign(
    text: &mut HeaderText,
    current: &SigningKey,
    previous: Option<&SigningKey>,
    event_id: Cut,
    unix_s: i64,
    body: &[u8],
) -> Signed {
    // The digits on the stack too: ours and the signed message repeat them.
    let mut digits = itoa::Buffer::new();
    let t = digits.format(unix_s).as_bytes();
    let timestamp = text.push(t);
    let signature = |text: &HeaderText, key: &SigningKey| key.sign(text.bytes(event_id), t, body);
    let ours_of = |text: &mut HeaderText, signature: &[u8]| {
        text.write(|v| {
            v.extend_from_slice(b"t=");
            v.extend_from_slice(t);
            v.extend_from_slice(b",v1=");
            v.extend_from_slice(signature);
        })
    };
    let now = signature(text, current);
    let old = previous.map(|key| signature(text, key));
    let ours = ours_of(text, &now);
    let previous = old.map(|old| ours_of(text, &old));
    let standard = text.write(|v| {
        v.extend_from_slice(b"v1,");
        v.extend_from_slice(&now);
        if let Some(old) = &old {
            v.extend_from_slice(b" v1,");
            v.extend_from_slice(old);
        }
    });
    Signed {
        timestamp,
        ours,
        previous,
        standard,
    }
}

impl Signed {
    /// The signature headers, `event_id` the cut of the id signed: `(name, value)`.
    pub fn headers(&self, event_id: Cut) -> impl Iterator<Item = (HeaderName, Cut)> {
        [
            Some((WEBHOOK_ID, event_id)),
            Some((WEBHOOK_TIMESTAMP, self.timestamp)),
            Some((LERIAN_TIMESTAMP, self.timestamp)),
            Some((LERIAN_SIGNATURE, self.ours)),
            self.previous.map(|p| (LERIAN_SIGNATURE_PREVIOUS, p)),
            Some((WEBHOOK_SIGNATURE, self.standard)),
        ]
        .into_iter()
        .flatten()
    }
}

/// The signature headers of one attempt, `(name, value)`, `event_id` being the value its
/// `X-Lerian-Event-Id` carries (for a receiver checking what the hub sends; an attempt writes
/// them with its other values, `attempt_headers`). The values are digits, base64 and the id
/// given, so the error (a value that is no header value) is there to be told, not expected.
pub fn headers(
    current: &SigningKey,
    previous: Option<&SigningKey>,
    event_id: &HeaderValue,
    unix_s: i64,
    body: &[u8],
) -> Result<Vec<(HeaderName, HeaderValue)>, InvalidHeaderValue> {
    let mut text = HeaderText::with_capacity(256);
    let id = text.push(event_id.as_bytes());
    let signed = sign(&mut text, current, previous, id, unix_s, body);
    let values = text.freeze();
    signed
        .headers(id)
        .map(|(name, cut)| Ok((name, values.value(cut)?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header<'a>(h: &'a [(HeaderName, HeaderValue)], name: &str) -> &'a str {
        h.iter()
            .find(|(n, _)| n.as_str().eq_ignore_ascii_case(name))
            .map_or("", |(_, v)| v.to_str().unwrap_or_default())
    }

    /// The Standard Webhooks reference vector: a receiver using any of its libraries verifies us.
    #[test]
    fn r_di_12_matches_the_standard_webhooks_reference_signature() {
        let key = SigningKey::from_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").expect("key");
        let h = headers(
            &key,
            None,
            &HeaderValue::from_static("msg_p5jXN8AQM9LWM0D4loKWxJek"),
            1_614_265_330,
            br#"{"test": 2432232314}"#,
        )
        .expect("headers");
        assert_eq!(
            header(&h, "webhook-signature"),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        assert_eq!(
            header(&h, "X-Lerian-Signature"),
            "t=1614265330,v1=g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        assert_eq!(header(&h, "webhook-id"), "msg_p5jXN8AQM9LWM0D4loKWxJek");
        assert_eq!(header(&h, "webhook-timestamp"), "1614265330");
        assert_eq!(header(&h, "x-lerian-timestamp"), "1614265330");
        assert!(!h.iter().any(|(n, _)| *n == LERIAN_SIGNATURE_PREVIOUS));
    }

    #[test]
    fn r_di_12_during_rotation_both_secrets_sign() {
        let new = SigningKey::from_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").expect("key");
        let old = SigningKey::from_secret("whsec_c2VjcmV0LW9sZC1zZWNyZXQtb2xk").expect("key");
        let h =
            headers(&new, Some(&old), &HeaderValue::from_static("e1"), 10, b"{}").expect("headers");
        let both: Vec<&str> = header(&h, "webhook-signature").split(' ').collect();
        assert_eq!(both.len(), 2);
        assert_ne!(both[0], both[1]);
        assert!(header(&h, "X-Lerian-Signature-Previous").starts_with("t=10,v1="));
        let ours = [
            header(&h, "X-Lerian-Signature"),
            header(&h, "X-Lerian-Signature-Previous"),
        ];
        let ours = ours.map(|v| format!("v1,{}", v.trim_start_matches("t=10,v1=")));
        assert_eq!(
            both, ours,
            "the Standard Webhooks form carries our two signatures"
        );
        assert_eq!(
            SigningKey::from_secret("whsec_***").map(|_| ()),
            Err(BadSecret)
        );
        assert_eq!(format!("{new:?}"), "SigningKey(…)");
    }
}
