//! Request bodies read strictly: a JSON object whose keys repeat is refused rather than read
//! last-wins (`{"sink_kind":"webhook","sink_kind":"pull"}` would otherwise be a pull
//! subscription to a reader that kept the first), at any depth.

use std::collections::HashSet;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// The first key that repeats within one object of `body`, if any (`Err` on malformed JSON:
/// the caller's parse reports it).
pub fn repeated_key(body: &[u8]) -> Result<Option<String>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let found = Walk.deserialize(&mut de)?;
    Ok(found)
}

/// Walks one JSON value, answering the first repeated key found in it.
struct Walk;

impl<'de> DeserializeSeed<'de> for Walk {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut seen = HashSet::new();
        let mut found = None;
        while let Some(key) = map.next_key::<String>()? {
            let inner = map.next_value_seed(Walk)?;
            if found.is_none() {
                found = if seen.contains(&key) {
                    Some(key.clone())
                } else {
                    inner
                };
            }
            seen.insert(key);
        }
        Ok(found)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(inner) = seq.next_element_seed(Walk)? {
            found = found.or(inner);
        }
        Ok(found)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r_cp_2_repeated_keys_are_found_at_any_depth() {
        let found = |b: &str| repeated_key(b.as_bytes()).expect("JSON");
        assert_eq!(found(r#"{"a":1,"b":[{"c":1}],"d":{"e":2}}"#), None);
        assert_eq!(
            found(r#"{"sink_kind":"webhook","sink_kind":"pull"}"#).as_deref(),
            Some("sink_kind")
        );
        assert_eq!(found(r#"{"x":{"y":1,"y":2}}"#).as_deref(), Some("y"));
        assert_eq!(found(r#"[{"z":1},{"z":1,"z":2}]"#).as_deref(), Some("z"));
        assert!(repeated_key(b"{\"a\":").is_err());
    }
}
