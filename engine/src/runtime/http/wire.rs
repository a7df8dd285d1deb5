//! HTTP/1.1 on one kept-alive connection, written and read by the attempt's own task (issue 17).
//!
//! hyper's client ran each connection as a task of its own: a request crossed a channel to it,
//! its answer came back through another, and the answer's head became a `HeaderMap` no one
//! read. Its user-space work was ~9 % of the hub's cycles under a backlog (forty-seventh
//! session's profile). A webhook needs one request at a time per connection, a status and a
//! capped body, so the attempt writes the request and reads the answer itself: the head parsed
//! by `httparse` in place, the body framed by RFC 9112 §6.3 (no body for 1xx, 204 and 304;
//! `Transfer-Encoding: chunked`; `Content-Length`; else until the peer closes).
//!
//! A connection goes back to the pool only when its answer was read whole, framed by length or
//! chunks, with nothing after it, and neither side asked to close.

use std::io;

use futures::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Bytes read per call, and the buffer's first size: a response head and a short body fit.
const READ_CHUNK: usize = 8 * 1024;
/// Most bytes an answer's head, or one line of its chunked body, may take.
const MOST_HEAD: usize = 64 * 1024;
/// Most header fields read in an answer's head.
const MOST_FIELDS: usize = 96;
/// Bodies up to this size are copied behind the head into one write; larger ones follow it.
const COPIED_BODY: usize = 16 * 1024;

/// A stream a connection runs over: plain TCP or TLS over it.
pub trait Duplex: AsyncRead + AsyncWrite + Unpin {}
impl<S: AsyncRead + AsyncWrite + Unpin> Duplex for S {}

/// Why an exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum Failed {
    /// The peer closed the connection before the answer was whole.
    #[error("the connection closed {0}")]
    Closed(&'static str),
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("malformed answer: {0}")]
    Malformed(&'static str),
}

impl Failed {
    /// Whether the connection closed under the request (rather than the answer being wrong).
    pub fn closed_under(&self) -> bool {
        use io::ErrorKind::*;
        match self {
            Self::Closed(_) => true,
            Self::Io(e) => matches!(
                e.kind(),
                ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof
            ),
            Self::Malformed(_) => false,
        }
    }
}

/// What writes a request's header fields, each as a line (`name: value` and CRLF), every
/// field the request carries: the wire adds none.
pub trait Fields {
    fn write_lines(&self, out: &mut Vec<u8>);
}

/// Lines already written, sent as they are.
impl Fields for &[u8] {
    fn write_lines(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }
}

/// A request as the wire carries it.
pub struct Request<'a> {
    /// The request line's target: path and query.
    pub target: &'a str,
    pub fields: &'a dyn Fields,
    pub body: &'a [u8],
}

/// The target and the body's length: the fields hold the request's signatures.
impl std::fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("target", &self.target)
            .field("body", &self.body.len())
            .finish()
    }
}

/// What came back: the status and at most the cap's bytes of the body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
}

/// How an answer's body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

/// An answer's head, as far as the wire needs it.
#[derive(Debug)]
struct Head {
    status: u16,
    framing: Framing,
    /// Whether the connection may carry another request after this answer.
    keep: bool,
}

/// One connection's stream and its buffers, kept with it between requests.
pub struct Wire {
    stream: Box<dyn Duplex>,
    /// Bytes read and not yet taken are `buf[lo..hi]`.
    buf: Vec<u8>,
    lo: usize,
    hi: usize,
    out: Vec<u8>,
}

impl std::fmt::Debug for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wire")
            .field("unread", &(self.hi - self.lo))
            .finish()
    }
}

impl Wire {
    pub fn new(stream: Box<dyn Duplex>) -> Self {
        Self {
            stream,
            buf: vec![0; READ_CHUNK],
            lo: 0,
            hi: 0,
            out: Vec::new(),
        }
    }

    /// Sends `request` and reads its answer, keeping at most `cap` bytes of the body. `Ok` with
    /// `true` when the connection may carry the next request.
    pub async fn exchange(
        &mut self,
        request: &Request<'_>,
        cap: usize,
    ) -> Result<(Answer, bool), Failed> {
        self.write(request).await?;
        let head = loop {
            let head = self.head().await?;
            // Interim answers (100 Continue, 103 Early Hints) come before the final one.
            if (100..200).contains(&head.status) && head.status != 101 {
                continue;
            }
            break head;
        };
        let mut body = Vec::new();
        let whole = match head.framing {
            Framing::None => true,
            Framing::Length(n) => self.body_of_length(n, cap, &mut body).await?,
            Framing::Chunked => self.chunked_body(cap, &mut body).await?,
            Framing::UntilClose => {
                self.body_until_close(cap, &mut body).await?;
                false
            }
        };
        // Bytes after the answer would be the next request's answer: such a connection closes.
        let keep = head.keep && whole && self.lo == self.hi;
        let answer = Answer {
            status: head.status,
            body,
        };
        Ok((answer, keep))
    }

    async fn write(&mut self, request: &Request<'_>) -> Result<(), Failed> {
        let out = &mut self.out;
        out.clear();
        out.extend_from_slice(b"POST ");
        out.extend_from_slice(request.target.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\n");
        request.fields.write_lines(out);
        out.extend_from_slice(b"\r\n");
        let copied = request.body.len() <= COPIED_BODY;
        if copied {
            out.extend_from_slice(request.body);
        }
        self.stream.write_all(&self.out).await?;
        if !copied {
            self.stream.write_all(request.body).await?;
        }
        self.stream.flush().await?;
        Ok(())
    }

    /// Reads more into the buffer; `false` when the peer closed.
    async fn fill(&mut self) -> Result<bool, Failed> {
        if self.lo == self.hi {
            (self.lo, self.hi) = (0, 0);
        }
        if self.hi == self.buf.len() {
            if self.lo > 0 {
                self.buf.copy_within(self.lo..self.hi, 0);
                (self.lo, self.hi) = (0, self.hi - self.lo);
            } else {
                self.buf.resize(self.buf.len() * 2, 0);
            }
        }
        let n = self.stream.read(&mut self.buf[self.hi..]).await?;
        self.hi += n;
        Ok(n > 0)
    }

    fn unread(&self) -> &[u8] {
        &self.buf[self.lo..self.hi]
    }

    async fn head(&mut self) -> Result<Head, Failed> {
        loop {
            if let Some((head, used)) = parse_head(self.unread())? {
                self.lo += used;
                return Ok(head);
            }
            if self.hi - self.lo >= MOST_HEAD {
                return Err(Failed::Malformed("a head over 64 KiB"));
            }
            if !self.fill().await? {
                return Err(Failed::Closed(if self.lo == self.hi {
                    "before answering"
                } else {
                    "in the middle of the answer's head"
                }));
            }
        }
    }

    /// Takes up to `n` unread bytes into `kept` (up to `cap`); how many it took.
    fn take(&mut self, n: u64, cap: usize, kept: &mut Vec<u8>) -> u64 {
        let here = (self.hi - self.lo).min(usize::try_from(n).unwrap_or(usize::MAX));
        let room = cap.saturating_sub(kept.len()).min(here);
        kept.extend_from_slice(&self.buf[self.lo..self.lo + room]);
        self.lo += here;
        here as u64
    }

    /// Reads `n` body bytes, keeping up to `cap`; whether it read them all. It stops at the cap
    /// rather than drain a large body: the connection then closes.
    async fn body_of_length(
        &mut self,
        mut n: u64,
        cap: usize,
        kept: &mut Vec<u8>,
    ) -> Result<bool, Failed> {
        while n > 0 {
            if kept.len() >= cap {
                return Ok(false);
            }
            if self.lo == self.hi && !self.fill().await? {
                return Err(Failed::Closed("in the middle of the answer's body"));
            }
            n -= self.take(n, cap, kept);
        }
        Ok(true)
    }

    async fn body_until_close(&mut self, cap: usize, kept: &mut Vec<u8>) -> Result<(), Failed> {
        loop {
            self.take(u64::MAX, cap, kept);
            if kept.len() >= cap || !self.fill().await? {
                return Ok(());
            }
        }
    }

    /// A chunked body: each chunk's size line (extensions ignored), its bytes and a CRLF, then
    /// a zero-size chunk and trailer lines up to an empty one.
    async fn chunked_body(&mut self, cap: usize, kept: &mut Vec<u8>) -> Result<bool, Failed> {
        loop {
            let line = self.line().await?;
            let size = chunk_size(&self.buf[line])?;
            if size == 0 {
                while !self.line().await?.is_empty() {}
                return Ok(true);
            }
            if !self.body_of_length(size, cap, kept).await? {
                return Ok(false);
            }
            if !self.line().await?.is_empty() {
                return Err(Failed::Malformed("a chunk longer than its size"));
            }
        }
    }

    /// Where the next line of the body lies in the buffer, without its line end; good until
    /// the next read.
    async fn line(&mut self) -> Result<std::ops::Range<usize>, Failed> {
        loop {
            if let Some(end) = self.unread().iter().position(|&b| b == b'\n') {
                let (start, next) = (self.lo, self.lo + end + 1);
                let cr = usize::from(end > 0 && self.buf[self.lo + end - 1] == b'\r');
                self.lo = next;
                return Ok(start..next - 1 - cr);
            }
            if self.hi - self.lo >= MOST_HEAD {
                return Err(Failed::Malformed("a chunk line over 64 KiB"));
            }
            if !self.fill().await? {
                return Err(Failed::Closed("in the middle of the answer's body"));
            }
        }
    }
}

/// Reads `answer` as the answer to one request, handed over `step` bytes per read, keeping at
/// most `cap` bytes of its body: the answer and whether its connection would be kept, or why it
/// was refused. For the fuzz target (`hub-fuzz`): a destination's answer is untrusted input.
#[cfg(feature = "fuzzing")]
pub fn read_answer(answer: &[u8], step: usize, cap: usize) -> Result<(Answer, bool), Failed> {
    let mut wire = Wire::new(Box::new(Scripted::answering(answer, step)));
    let request = Request {
        target: "/",
        fields: &&b""[..],
        body: b"",
    };
    futures::executor::block_on(wire.exchange(&request, cap))
}

/// An answer's head and the bytes it took, or `None` when more must be read.
fn parse_head(bytes: &[u8]) -> Result<Option<(Head, usize)>, Failed> {
    let mut fields = [httparse::EMPTY_HEADER; MOST_FIELDS];
    let mut response = httparse::Response::new(&mut fields);
    let used = match response.parse(bytes) {
        Ok(httparse::Status::Complete(used)) => used,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(Failed::Malformed("more header fields than read"))
        }
        Err(_) => return Err(Failed::Malformed("not an HTTP/1 answer")),
    };
    let status = response.code.unwrap_or_default();
    let http11 = response.version == Some(1);
    let (mut keep, mut length, mut chunked, mut coded) = (http11, None, false, false);
    for field in response.headers.iter() {
        let name = field.name;
        if name.eq_ignore_ascii_case("connection") {
            for token in tokens(field.value) {
                if token.eq_ignore_ascii_case(b"close") {
                    keep = false;
                } else if token.eq_ignore_ascii_case(b"keep-alive") && !http11 {
                    keep = true;
                }
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            coded = true;
            chunked = tokens(field.value)
                .last()
                .is_some_and(|t| t.eq_ignore_ascii_case(b"chunked"));
        } else if name.eq_ignore_ascii_case("content-length") {
            for token in tokens(field.value) {
                let n = decimal(token).ok_or(Failed::Malformed("a bad content-length"))?;
                if length.is_some_and(|seen| seen != n) {
                    return Err(Failed::Malformed("two content-lengths"));
                }
                length = Some(n);
            }
        }
    }
    let framing = if (100..200).contains(&status) || status == 204 || status == 304 {
        Framing::None
    } else if coded {
        // A coding other than chunked last, or a length beside a coding: read until the
        // peer closes, and close after (RFC 9112 §6.3).
        keep &= chunked && length.is_none();
        if chunked {
            Framing::Chunked
        } else {
            Framing::UntilClose
        }
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        keep = false;
        Framing::UntilClose
    };
    if status == 101 {
        keep = false;
    }
    let head = Head {
        status,
        framing,
        keep,
    };
    Ok(Some((head, used)))
}

/// A field value's comma-separated tokens, trimmed, empty ones left out.
fn tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(|t| t.trim_ascii())
        .filter(|t| !t.is_empty())
}

fn decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// A chunk's size from its line (`1a;name=value` is 26).
fn chunk_size(line: &[u8]) -> Result<u64, Failed> {
    let hex = line
        .split(|&b| b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii();
    if hex.is_empty() || hex.len() > 15 || !hex.iter().all(u8::is_ascii_hexdigit) {
        return Err(Failed::Malformed("a bad chunk size"));
    }
    Ok(hex.iter().fold(0, |n, &digit| {
        let value = (digit as char).to_digit(16).unwrap_or_default();
        n * 16 + u64::from(value)
    }))
}

#[cfg(any(test, feature = "fuzzing"))]
mod scripted;
#[cfg(any(test, feature = "fuzzing"))]
use self::scripted::Scripted;

#[cfg(test)]
mod tests;
