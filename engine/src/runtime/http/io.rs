//! A glommio TCP stream (or a TLS stream over one) as hyper's I/O: hyper 1.x reads and writes
//! through its own traits, glommio and futures-rustls streams implement the `futures` ones.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use futures::io::{AsyncRead, AsyncWrite};

/// Bytes read per call: a response head and a short body fit in one read.
const READ_CHUNK: usize = 8 * 1024;

pub(super) struct ShardIo<S> {
    stream: S,
    /// Where a read lands before hyper's cursor takes it (the cursor's own memory may be
    /// uninitialized, and this crate writes no `unsafe`).
    scratch: Box<[u8]>,
}

impl<S> ShardIo<S> {
    pub(super) fn new(stream: S) -> Self {
        Self {
            stream,
            scratch: vec![0; READ_CHUNK].into_boxed_slice(),
        }
    }
}

impl<S: AsyncRead + Unpin> hyper::rt::Read for ShardIo<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // Never more than the cursor has room for: a byte read is a byte handed over.
        let room = buf.remaining().min(this.scratch.len());
        let n = ready!(Pin::new(&mut this.stream).poll_read(cx, &mut this.scratch[..room]))?;
        buf.put_slice(&this.scratch[..n]);
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> hyper::rt::Write for ShardIo<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_close(cx)
    }
}
