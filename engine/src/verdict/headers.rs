//! Collects a record's CloudEvents attributes from its headers into fixed slots.
//!
//! Rules (R-IN-2): attribute names are matched without regard to ASCII case; `ce-` and the Kafka
//! binding's `ce_` prefix are both accepted and `ce-` wins when both appear; when a header
//! repeats, its last occurrence wins. Unknown headers are ignored.

use super::reason::Attr;

const SLOTS: usize = Attr::ALL.len();

/// The raw bytes of each known attribute, borrowed from the record.
#[derive(Debug, Default)]
pub struct CeHeaders<'a> {
    dash: [Option<&'a [u8]>; SLOTS],
    underscore: [Option<&'a [u8]>; SLOTS],
}

impl<'a> CeHeaders<'a> {
    /// Reads every header once. A header with a null value counts as absent but still replaces
    /// an earlier occurrence (last one wins).
    pub fn collect<I>(headers: I) -> Self
    where
        I: IntoIterator<Item = (&'a [u8], Option<&'a [u8]>)>,
    {
        let mut out = Self::default();
        for (key, value) in headers {
            if let Some((attr, dash)) = classify(key) {
                let slots = if dash {
                    &mut out.dash
                } else {
                    &mut out.underscore
                };
                slots[attr.slot()] = value;
            }
        }
        out
    }

    /// The attribute's bytes, `ce-` taking precedence over `ce_`.
    pub fn get(&self, attr: Attr) -> Option<&'a [u8]> {
        self.dash[attr.slot()].or(self.underscore[attr.slot()])
    }
}

/// Which attribute a header key names, and whether it used the `ce-` form (or is unprefixed).
fn classify(key: &[u8]) -> Option<(Attr, bool)> {
    if key.len() > 3 && key[0].eq_ignore_ascii_case(&b'c') && key[1].eq_ignore_ascii_case(&b'e') {
        let dash = match key[2] {
            b'-' => true,
            b'_' => false,
            _ => return unprefixed(key),
        };
        let name = &key[3..];
        return Attr::ALL
            .iter()
            .find(|a| a.prefixed() && a.name().as_bytes().eq_ignore_ascii_case(name))
            .map(|a| (*a, dash));
    }
    unprefixed(key)
}

fn unprefixed(key: &[u8]) -> Option<(Attr, bool)> {
    [Attr::TraceParent, Attr::TraceState]
        .into_iter()
        .find(|a| a.name().as_bytes().eq_ignore_ascii_case(key))
        .map(|a| (a, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_in_2_every_attribute_is_named_in_any_case_with_its_own_prefix_only() {
        for attr in Attr::ALL {
            let name = attr.name();
            let upper = name.to_ascii_uppercase();
            if attr.prefixed() {
                for key in [
                    format!("ce-{name}"),
                    format!("CE-{upper}"),
                    format!("Ce-{name}"),
                ] {
                    assert_eq!(classify(key.as_bytes()), Some((attr, true)), "{key}");
                }
                assert_eq!(
                    classify(format!("ce_{name}").as_bytes()),
                    Some((attr, false))
                );
                assert_eq!(classify(name.as_bytes()), None, "{name} needs its prefix");
            } else {
                assert_eq!(classify(upper.as_bytes()), Some((attr, true)));
                assert_eq!(classify(format!("ce-{name}").as_bytes()), None);
            }
        }
        for key in [
            "ce-",
            "ce",
            "",
            "ce-nope",
            "x-ce-id",
            "ce-datacontenttypes",
            "ce.id",
        ] {
            assert_eq!(classify(key.as_bytes()), None, "{key}");
        }
    }
}
