//! Binary encoding of stored values (postcard: compact, serde-based, no schema server).

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::StoreError;

pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    // Serializing our own plain structs into a Vec cannot fail.
    postcard::to_allocvec(value).unwrap_or_default()
}

pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, StoreError> {
    postcard::from_bytes(bytes).map_err(|e| StoreError::Corrupt(e.to_string()))
}
