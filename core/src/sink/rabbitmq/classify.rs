//! lapin's errors as error classes. The broker's reply codes (AMQP 0-9-1) say most: 403
//! ACCESS_REFUSED at login is a refused credential, later a missing permission; 404 NOT_FOUND a
//! missing exchange; 530 NOT_ALLOWED a vhost the user may not open.

use lapin::protocol::{AMQPError, AMQPErrorKind, AMQPHardError, AMQPSoftError};

use crate::sink::outcome::ErrorClass;

/// Which step failed: a refusal while connecting is about the credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Connect,
    Publish,
}

pub fn classify(e: &lapin::Error, step: Step) -> ErrorClass {
    match e {
        lapin::Error::ProtocolError(amqp) => by_reply(amqp, step),
        lapin::Error::IOError(io) => by_io(io.kind()),
        lapin::Error::InvalidChannelState(_) | lapin::Error::InvalidConnectionState(_) => {
            ErrorClass::ConnectionReset
        }
        other => by_text(&other.to_string(), step),
    }
}

fn by_reply(e: &AMQPError, step: Step) -> ErrorClass {
    match e.kind() {
        AMQPErrorKind::Soft(AMQPSoftError::NOTFOUND) => ErrorClass::DestinationMissing,
        AMQPErrorKind::Soft(AMQPSoftError::ACCESSREFUSED) if step == Step::Connect => {
            ErrorClass::AuthenticationFailed
        }
        AMQPErrorKind::Soft(AMQPSoftError::ACCESSREFUSED) => ErrorClass::AccessDenied,
        AMQPErrorKind::Hard(AMQPHardError::NOTALLOWED) => ErrorClass::AccessDenied,
        AMQPErrorKind::Hard(AMQPHardError::FRAMEERROR | AMQPHardError::SYNTAXERROR) => {
            ErrorClass::RequestFailed
        }
        AMQPErrorKind::Hard(AMQPHardError::CONNECTIONFORCED) => ErrorClass::ConnectionReset,
        _ => by_text(&e.to_string(), step),
    }
}

fn by_io(kind: std::io::ErrorKind) -> ErrorClass {
    use std::io::ErrorKind::*;
    match kind {
        ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof => {
            ErrorClass::ConnectionReset
        }
        TimedOut => ErrorClass::Timeout,
        _ => ErrorClass::ConnectionFailed,
    }
}

fn by_text(text: &str, step: Step) -> ErrorClass {
    let t = text.to_ascii_uppercase();
    if t.contains("ACCESS_REFUSED") || t.contains("ACCESS-REFUSED") || t.contains("LOGIN") {
        if step == Step::Connect {
            ErrorClass::AuthenticationFailed
        } else {
            ErrorClass::AccessDenied
        }
    } else if t.contains("NOT_FOUND") || t.contains("NOT-FOUND") {
        ErrorClass::DestinationMissing
    } else if t.contains("NOT_ALLOWED") || t.contains("NOT-ALLOWED") {
        ErrorClass::AccessDenied
    } else if t.contains("TLS") || t.contains("CERTIFICATE") {
        ErrorClass::TlsError
    } else if step == Step::Connect {
        ErrorClass::ConnectionFailed
    } else {
        ErrorClass::RequestFailed
    }
}
