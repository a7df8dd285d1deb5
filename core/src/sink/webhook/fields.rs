//! An attempt's header fields (R-DI-5, R-DI-12), built and checked once, then given in the form
//! its client takes: a `HeaderMap` for the tokio client (reqwest), or lines written straight
//! into the request by the shards' own HTTP/1.1 (issue 17: no map of sixteen values built, hashed
//! and walked again per attempt on the shards).

use reqwest::header::{HeaderMap, HeaderName, CONTENT_LENGTH, CONTENT_TYPE};
use uuid::Uuid;

use super::header_text::{Cut, HeaderText, Values};
use super::signature;
use super::{
    Attempt, ErrorClass, Keys, Outcome, DELIVERY_ID, EVENT_ID, EVENT_SOURCE, EVENT_TYPE,
    SCHEMA_VERSION, TENANT_ID, TRACEPARENT, TRACESTATE,
};

/// The fields an attempt sends at most: type, length, two ids, four attributes, two trace
/// fields, and six signature fields during a rotation's overlap.
const MOST_FIELDS: usize = 16;

/// The header fields of one attempt: R-DI-5's ids and attributes, R-DI-12's signatures (both
/// during a rotation's overlap), the body's `Content-Type` and `Content-Length`. The
/// `X-Lerian-Delivery-Id` is new for every attempt and the same when one attempt's request is
/// sent again. Every value is written once into one text the values share ([`HeaderText`]) and
/// checked to be a header value when it is built.
pub struct AttemptFields {
    values: Values,
    fields: Vec<(HeaderName, Cut)>,
}

/// Names and lengths only: the values hold the attempt's signatures.
impl std::fmt::Debug for AttemptFields {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<_> = self.fields.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("AttemptFields")
            .field("names", &names)
            .field("values", &self.values)
            .finish()
    }
}

impl AttemptFields {
    /// The fields of attempt `a` signed with `keys`. An event attribute that is not a valid
    /// header value (a control character in `ce-schemaversion`, say, which the verdict lets
    /// through) refuses the attempt for good: no retry can mend the event. A trace context that
    /// is not one is left out instead (R-TR-5: W3C Trace Context discards what it cannot
    /// parse).
    pub fn of(a: &Attempt<'_>, keys: &Keys, delivery_id: Uuid) -> Result<Self, Outcome> {
        let attributes = [
            (EVENT_TYPE, a.event_key),
            (EVENT_SOURCE, a.source),
            (TENANT_ID, a.tenant),
            (SCHEMA_VERSION, a.schema_version),
        ];
        let traces = [(TRACEPARENT, a.traceparent), (TRACESTATE, a.tracestate)];
        let mut text = HeaderText::with_capacity(text_room(a, keys, &attributes, &traces));
        let mut fields = Vec::with_capacity(MOST_FIELDS);
        let content_type = a.content_type.unwrap_or("application/json");
        let content_type = text.push(content_type.as_bytes());
        refused_unless_valid(&text, &CONTENT_TYPE, content_type)?;
        fields.push((CONTENT_TYPE, content_type));
        let length = i64::try_from(a.body.len()).unwrap_or(i64::MAX);
        fields.push((CONTENT_LENGTH, text.number(length)));
        let event_id = text.write(|t| write_uuid(t, a.event_id));
        fields.push((EVENT_ID, event_id));
        fields.push((DELIVERY_ID, text.write(|t| write_uuid(t, delivery_id))));
        for (name, value) in attributes {
            let cut = text.push(value.as_bytes());
            refused_unless_valid(&text, &name, cut)?;
            fields.push((name, cut));
        }
        for (name, value) in traces {
            let Some(value) = value else { continue };
            let cut = text.push(value.as_bytes());
            if is_field_value(text.bytes(cut)) {
                fields.push((name, cut));
            }
        }
        let signed = signature::sign(
            &mut text,
            &keys.current,
            keys.previous.as_ref(),
            event_id,
            a.unix_s,
            &a.body,
        );
        // Digits, base64 and the id: header values by construction.
        fields.extend(signed.headers(event_id));
        let values = text.freeze();
        Ok(Self { values, fields })
    }

    /// The fields as a map, sharing the values' text.
    pub fn to_map(&self) -> HeaderMap {
        let mut map = HeaderMap::with_capacity(self.fields.len());
        for (name, cut) in &self.fields {
            // Every value was checked when it was written; a failure cannot happen.
            if let Ok(value) = self.values.value(*cut) {
                map.append(name.clone(), value);
            }
        }
        map
    }

    /// Writes each field as an HTTP/1.1 header line, `name: value` and CRLF, names in lower
    /// case.
    pub fn write_lines(&self, out: &mut Vec<u8>) {
        for (name, cut) in &self.fields {
            out.extend_from_slice(name.as_str().as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(self.values.bytes(*cut));
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// Whether `bytes` may be a header field's value: visible ASCII, obs-text, spaces and tabs, the
/// rule `HeaderValue` applies.
fn is_field_value(bytes: &[u8]) -> bool {
    bytes
        .iter()
        .all(|&b| b == b'\t' || (b >= b' ' && b != 0x7f))
}

/// An event attribute as the value of field `name`, refused for good if it is not one.
fn refused_unless_valid(text: &HeaderText, name: &HeaderName, cut: Cut) -> Result<(), Outcome> {
    if is_field_value(text.bytes(cut)) {
        return Ok(());
    }
    Err(Outcome::refused(
        ErrorClass::InvalidMessage,
        format!("the event's {name} is not a valid HTTP header value"),
    ))
}

/// The text an attempt's header values take, so that it is allocated once: the content type,
/// two ids, a length, a timestamp, the signatures, and the event's attributes as they are.
fn text_room(
    a: &Attempt<'_>,
    keys: &Keys,
    attributes: &[(HeaderName, &str)],
    traces: &[(HeaderName, Option<&str>)],
) -> usize {
    const IDS_LENGTH_AND_TIMESTAMP: usize = 2 * uuid::fmt::Hyphenated::LENGTH + 20 + 20;
    // `t=<timestamp>,v1=<signature>` and `v1,<signature>` per secret.
    const PER_SECRET: usize = 2 + 20 + 4 + 44 + 4 + 44;
    let secrets = 1 + usize::from(keys.previous.is_some());
    let given = attributes.iter().map(|(_, v)| v.len()).sum::<usize>()
        + traces
            .iter()
            .filter_map(|(_, v)| *v)
            .map(str::len)
            .sum::<usize>()
        + a.content_type.map_or("application/json".len(), str::len);
    IDS_LENGTH_AND_TIMESTAMP + secrets * PER_SECRET + given
}

/// An id, hyphenated in lower case, written straight into the text.
fn write_uuid(text: &mut bytes::BytesMut, id: Uuid) {
    let mut hyphenated = [0u8; uuid::fmt::Hyphenated::LENGTH];
    text.extend_from_slice(id.hyphenated().encode_lower(&mut hyphenated).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::super::tests::{attempt, keys};
    use super::*;

    #[test]
    fn r_di_5_the_fields_written_as_lines_are_the_fields_of_the_map() {
        let mut a = attempt("http://127.0.0.1:1/hook");
        a.traceparent = Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        a.tracestate = Some("vendor=a\u{1}b");
        let fields = AttemptFields::of(&a, &keys(), Uuid::now_v7()).expect("fields");
        let map = fields.to_map();
        let mut lines = Vec::new();
        fields.write_lines(&mut lines);
        let lines = String::from_utf8(lines).expect("text");
        let from_map: String = map
            .iter()
            .map(|(n, v)| format!("{}: {}\r\n", n, v.to_str().expect("visible")))
            .collect();
        let mut written: Vec<_> = lines.split_inclusive("\r\n").collect();
        let mut mapped: Vec<_> = from_map.split_inclusive("\r\n").collect();
        written.sort_unstable();
        mapped.sort_unstable();
        assert_eq!(written, mapped);
        assert!(lines.contains("traceparent: 00-4bf9"), "{lines}");
        assert!(
            !lines.contains("tracestate"),
            "a bad trace state is left out"
        );
        assert!(map.len() <= MOST_FIELDS);
        assert!(
            !format!("{fields:?}").contains("v1,"),
            "no signature in Debug"
        );
    }
}
