//! What an operation answers, whatever the transport: what was done, the resource's view, its
//! ETag, where a created one lives. REST, GraphQL and gRPC each render it; none of them is in it.

use serde_json::Value;

use hub_core::error::ApiError;
use hub_core::model::Subscription;

/// What an operation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Done {
    /// A resource was created (REST 201).
    Created,
    /// Read, or changed in place (REST 200).
    Ok,
    /// The resource is gone (REST 204).
    Deleted,
}

/// A successful operation's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub done: Done,
    pub body: Option<Value>,
    /// The entity tag of the subscription the answer shows (R-CP-10).
    pub etag: Option<String>,
    /// Where a created subscription lives.
    pub location: Option<String>,
    /// The recorded answer of an earlier request with the same idempotency key (R-CP-13).
    pub replayed: bool,
}

/// Every operation's result: an answer, or an error code.
pub type Served = Result<Answer, ApiError>;

impl Answer {
    fn new(done: Done, body: Option<Value>) -> Self {
        Self {
            done,
            body,
            etag: None,
            location: None,
            replayed: false,
        }
    }

    pub fn ok(body: Value) -> Self {
        Self::new(Done::Ok, Some(body))
    }

    /// Done, nothing to show (pause, resume).
    pub fn ok_empty() -> Self {
        Self::new(Done::Ok, None)
    }

    pub fn created(body: Value, location: String) -> Self {
        Self {
            location: Some(location),
            ..Self::new(Done::Created, Some(body))
        }
    }

    pub fn deleted() -> Self {
        Self::new(Done::Deleted, None)
    }

    pub fn with_etag(mut self, sub: &Subscription) -> Self {
        self.etag = Some(sub.etag());
        self
    }
}

/// Sets `key` in a request body being built from a transport's typed input, when it has a value.
pub(crate) fn put(
    m: &mut serde_json::Map<String, serde_json::Value>,
    key: &str,
    value: Option<serde_json::Value>,
) {
    if let Some(v) = value {
        m.insert(key.into(), v);
    }
}

/// How an answer is kept in an idempotency record (`StoredResponse`): a number for what was done
/// (the REST status it was first sent with, so records written before this type read alike) and
/// the ETag and location as headers.
pub(crate) mod recorded {
    use super::{Answer, Done};

    pub fn code(done: Done) -> u16 {
        match done {
            Done::Created => 201,
            Done::Ok => 200,
            Done::Deleted => 204,
        }
    }

    pub fn done(code: u16) -> Done {
        match code {
            201 => Done::Created,
            204 => Done::Deleted,
            _ => Done::Ok,
        }
    }

    pub fn headers(a: &Answer) -> Vec<(String, String)> {
        let mut h = Vec::new();
        if let Some(e) = &a.etag {
            h.push(("etag".into(), e.clone()));
        }
        if let Some(l) = &a.location {
            h.push(("location".into(), l.clone()));
        }
        h
    }

    pub fn from_headers(a: &mut Answer, headers: Vec<(String, String)>) {
        for (k, v) in headers {
            match k.as_str() {
                "etag" => a.etag = Some(v),
                "location" => a.location = Some(v),
                _ => {}
            }
        }
    }
}
