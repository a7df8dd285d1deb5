//! A connection in memory for the wire's reader: the fuzz target's (`read_answer`) and the tests'.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::io::{AsyncRead, AsyncWrite};

/// A connection in memory whose peer answers with given bytes, handed over `step` bytes per
/// read, and keeps what was written to it: the fuzz target's, and the tests'.
pub(super) struct Scripted {
    answer: Vec<u8>,
    at: usize,
    step: usize,
    pub(super) written: Written,
}

/// What was written to a [`Scripted`] connection, kept after the wire took it.
pub(super) type Written = std::rc::Rc<std::cell::RefCell<Vec<u8>>>;

impl Scripted {
    pub(super) fn answering(answer: &[u8], step: usize) -> Self {
        Self {
            answer: answer.to_vec(),
            at: 0,
            step: step.max(1),
            written: Written::default(),
        }
    }
}

impl AsyncRead for Scripted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let at = self.at;
        let n = buf.len().min(self.step).min(self.answer.len() - at);
        buf[..n].copy_from_slice(&self.answer[at..at + n]);
        self.at += n;
        Poll::Ready(Ok(n))
    }
}

impl AsyncWrite for Scripted {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.written.borrow_mut().extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
