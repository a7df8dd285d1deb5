//! A record as ingest holds it between the Kafka client (or an HTTP request) and its verdict.
//!
//! Its headers lie in one buffer with a span per header, not a `String` and a `Vec` each: a
//! CloudEvent carries ten or more headers, and two allocations per header were a third of
//! ingest's allocations (issue 17: the ingest-backlog profile was allocation and copies). The
//! topic is shared by every record of its partition.

use std::sync::Arc;

/// A record copied out of the Kafka client (or built from an HTTP request).
#[derive(Debug, Clone)]
pub struct RecordIn {
    pub topic: Arc<str>,
    pub partition: i32,
    /// -1 for HTTP ingest.
    pub offset: i64,
    pub headers: RecordHeaders,
    /// Moved into the accepted event, not copied.
    pub value: Vec<u8>,
}

/// Headers in arrival order, repeats kept (the verdict decides which occurrence counts).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordHeaders {
    /// Each header's key then its value, one after another.
    bytes: Vec<u8>,
    spans: Vec<Span>,
}

/// Where a header lies in `bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    key_start: u32,
    key_len: u32,
    /// `NULL` for a header without a value (Kafka allows it).
    value_len: u32,
}

const NULL: u32 = u32::MAX;

impl RecordHeaders {
    /// Room for `headers` headers of `bytes` bytes in all, so that copying them allocates twice.
    pub fn with_capacity(headers: usize, bytes: usize) -> Self {
        Self {
            bytes: Vec::with_capacity(bytes),
            spans: Vec::with_capacity(headers),
        }
    }

    /// Appends a header. Spans are 32-bit: Kafka and HTTP ingest bound a record far below 4 GiB.
    pub fn push(&mut self, key: &[u8], value: Option<&[u8]>) {
        let key_start = self.offset();
        self.bytes.extend_from_slice(key);
        let key_len = self.offset() - key_start;
        let value_len = match value {
            Some(v) => {
                let start = self.offset();
                self.bytes.extend_from_slice(v);
                (self.offset() - start).min(NULL - 1)
            }
            None => NULL,
        };
        self.spans.push(Span {
            key_start,
            key_len,
            value_len,
        });
    }

    fn offset(&self) -> u32 {
        u32::try_from(self.bytes.len()).unwrap_or(NULL - 1)
    }

    /// Each header's key and value, in arrival order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&[u8], Option<&[u8]>)> + '_ {
        self.spans.iter().map(|s| {
            let key_end = s.key_start as usize + s.key_len as usize;
            let key = &self.bytes[s.key_start as usize..key_end];
            let value =
                (s.value_len != NULL).then(|| &self.bytes[key_end..key_end + s.value_len as usize]);
            (key, value)
        })
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }
}

impl<K: AsRef<[u8]>, V: AsRef<[u8]>> FromIterator<(K, Option<V>)> for RecordHeaders {
    fn from_iter<I: IntoIterator<Item = (K, Option<V>)>>(headers: I) -> Self {
        let mut out = Self::default();
        for (k, v) in headers {
            out.push(k.as_ref(), v.as_ref().map(AsRef::as_ref));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_in_2_headers_come_back_in_order_with_repeats_and_null_values() {
        let headers: RecordHeaders = [
            ("ce-id", Some("a")),
            ("ce-empty", Some("")),
            ("ce-null", None),
            ("ce-id", Some("b")),
        ]
        .into_iter()
        .collect();
        let seen: Vec<_> = headers.iter().collect();
        assert_eq!(
            seen,
            vec![
                (&b"ce-id"[..], Some(&b"a"[..])),
                (&b"ce-empty"[..], Some(&b""[..])),
                (&b"ce-null"[..], None),
                (&b"ce-id"[..], Some(&b"b"[..])),
            ]
        );
        assert_eq!(headers.len(), 4);
        assert_eq!(
            headers.iter().next_back().map(|h| h.1),
            Some(Some(&b"b"[..]))
        );
    }

    #[test]
    fn r_in_2_no_headers_is_empty() {
        let headers = RecordHeaders::with_capacity(4, 64);
        assert!(headers.is_empty());
        assert_eq!(headers.iter().count(), 0);
    }
}
