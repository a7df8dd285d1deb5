//! An attempt's header values, written one after another into one buffer and cut from it once
//! it is frozen: every value shares that buffer, so an attempt's ids, attributes, length and
//! signatures cost two allocations where each value was one of its own and a copy or two
//! (issue 17: an attempt made fifteen allocations for its headers; the allocator was ~8 % of
//! the hub's cycles under a backlog).

use bytes::{Bytes, BytesMut};
use reqwest::header::{HeaderValue, InvalidHeaderValue};

/// The text being written.
pub struct HeaderText(BytesMut);

/// Where one value lies in its [`HeaderText`].
#[derive(Debug, Clone, Copy)]
pub struct Cut {
    start: usize,
    end: usize,
}

impl HeaderText {
    /// Room for `bytes` of values; more grows the buffer (correct, one copy more).
    pub fn with_capacity(bytes: usize) -> Self {
        Self(BytesMut::with_capacity(bytes))
    }

    /// Appends `bytes` as one value.
    pub fn push(&mut self, bytes: &[u8]) -> Cut {
        self.write(|text| text.extend_from_slice(bytes))
    }

    /// Appends a number in decimal as one value.
    pub fn number(&mut self, n: i64) -> Cut {
        self.push(itoa::Buffer::new().format(n).as_bytes())
    }

    /// Appends what `write` writes as one value.
    pub fn write(&mut self, write: impl FnOnce(&mut BytesMut)) -> Cut {
        let start = self.0.len();
        write(&mut self.0);
        Cut {
            start,
            end: self.0.len(),
        }
    }

    /// A value written so far.
    pub fn bytes(&self, cut: Cut) -> &[u8] {
        &self.0[cut.start..cut.end]
    }

    /// The text, ready to be cut into values.
    pub fn freeze(self) -> Values {
        Values(self.0.freeze())
    }
}

/// A frozen [`HeaderText`].
pub struct Values(Bytes);

/// Lengths only: the text holds an attempt's signatures.
impl std::fmt::Debug for HeaderText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HeaderText({} bytes)", self.0.len())
    }
}

impl std::fmt::Debug for Values {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Values({} bytes)", self.0.len())
    }
}

impl Values {
    /// The bytes of the value at `cut`.
    pub fn bytes(&self, cut: Cut) -> &[u8] {
        &self.0[cut.start..cut.end]
    }

    /// The value at `cut`, sharing the text (no copy), if it is a valid header value.
    pub fn value(&self, cut: Cut) -> Result<HeaderValue, InvalidHeaderValue> {
        HeaderValue::from_maybe_shared(self.0.slice(cut.start..cut.end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_di_5_values_cut_from_one_text_read_as_written_and_bad_ones_are_refused() {
        let mut text = HeaderText::with_capacity(4);
        let id = text.push(b"evt-1");
        let length = text.number(1024);
        let empty = text.push(b"");
        let bad = text.push(b"a\nb");
        let grown = text.push(&[b'x'; 300]);
        assert_eq!(text.bytes(length), b"1024");
        let values = text.freeze();
        assert_eq!(values.value(id).expect("id"), "evt-1");
        assert_eq!(values.value(length).expect("length"), "1024");
        assert_eq!(values.value(empty).expect("empty"), "");
        assert!(values.value(bad).is_err());
        assert_eq!(values.value(grown).expect("grown").len(), 300);
    }
}
