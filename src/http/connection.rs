//! Client deadlines on a connection (docs/api.md section 9): a client that trickles a
//! request head, or leaves a response unread, is cut off within `--client-timeout`.
//!
//! actix-http bounds the head of a connection's *first* request, and the idle time
//! between requests, but not the head of a later request on a kept-alive
//! connection: a client that sends one byte of its second request and then one byte
//! a minute holds the connection forever. Nor does it bound a write the client never
//! reads. [`Deadlined`] wraps the socket below actix-http and closes both gaps: from
//! the first byte of a request head to its blank line, and from a write that cannot
//! proceed to the next one that does, at most the timeout may pass.
//!
//! It tells where a head ends by the blank line that ends it (`\r\n\r\n`, or the
//! bare `\n\n` HTTP/1.1 parsers also accept). A body would count as the start of the
//! next head; stq's API takes no bodies, so a request with one is at worst cut off
//! like a trickling one.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use actix_web::rt::time::{sleep, sleep_until, Instant, Sleep};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A socket whose client must keep up.
pub(super) struct Deadlined<T> {
    io: T,
    timeout: Duration,
    /// Whether reads are followed through request heads: not under HTTP/2, whose
    /// frames are not text.
    heads: bool,
    head: HeadScanner,
    /// When the head being read began, while one is open.
    head_started: Option<Instant>,
    /// Armed only when a read ends inside a head, from the head's first byte: a head
    /// that arrives in one read, as nearly every one does, costs no timer.
    head_deadline: Option<Pin<Box<Sleep>>>,
    /// Armed while a write cannot proceed.
    write_deadline: Option<Pin<Box<Sleep>>>,
}

impl<T> Deadlined<T> {
    pub(super) fn new(io: T, timeout: Duration) -> Deadlined<T> {
        Deadlined {
            io,
            timeout,
            heads: true,
            head: HeadScanner::default(),
            head_started: None,
            head_deadline: None,
            write_deadline: None,
        }
    }

    /// Bounds only the writes: for HTTP/2, whose binary frames have no blank line
    /// to end a head at (its idle connections are still closed by the keep-alive).
    pub(super) fn writes_only(io: T, timeout: Duration) -> Deadlined<T> {
        Deadlined {
            heads: false,
            ..Deadlined::new(io, timeout)
        }
    }

    /// Follows the bytes read through request heads, and arms the head deadline
    /// when they end inside one.
    fn observe(&mut self, bytes: &[u8]) {
        match self.head.scan(bytes) {
            Some(HeadEvent::Started) => {
                self.head_started = Some(Instant::now());
                self.head_deadline = None;
            }
            Some(HeadEvent::Ended) => {
                self.head_started = None;
                self.head_deadline = None;
            }
            Some(HeadEvent::Within) | None => {}
        }
        if let (Some(started), None) = (self.head_started, &self.head_deadline) {
            self.head_deadline = Some(Box::pin(sleep_until(started + self.timeout)));
        }
    }
}

fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, what)
}

/// Whether an armed deadline has passed; polling it also wakes the task when it does.
fn expired(deadline: &mut Option<Pin<Box<Sleep>>>, context: &mut Context<'_>) -> bool {
    deadline
        .as_mut()
        .is_some_and(|sleep| sleep.as_mut().poll(context).is_ready())
}

impl<T: AsyncRead + Unpin> AsyncRead for Deadlined<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffer: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buffer.filled().len();
        match Pin::new(&mut this.io).poll_read(context, buffer) {
            Poll::Ready(Ok(())) => {
                // A trickle keeps the read ready; the deadline counts from the head's
                // first byte, not from the last one.
                if expired(&mut this.head_deadline, context) {
                    return Poll::Ready(Err(timed_out("request head too slow")));
                }
                if this.heads {
                    this.observe(&buffer.filled()[before..]);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            Poll::Pending if expired(&mut this.head_deadline, context) => {
                Poll::Ready(Err(timed_out("request head too slow")))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T> Deadlined<T> {
    /// A write's outcome, with the write deadline armed while it cannot proceed and
    /// dropped once it does.
    fn bound_write(
        &mut self,
        context: &mut Context<'_>,
        outcome: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        if outcome.is_ready() {
            self.write_deadline = None;
            return outcome;
        }
        let timeout = self.timeout;
        self.write_deadline
            .get_or_insert_with(|| Box::pin(sleep(timeout)));
        if expired(&mut self.write_deadline, context) {
            return Poll::Ready(Err(timed_out("response not read")));
        }
        Poll::Pending
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Deadlined<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        let outcome = Pin::new(&mut self.io).poll_write(context, bytes);
        self.bound_write(context, outcome)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffers: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let outcome = Pin::new(&mut self.io).poll_write_vectored(context, buffers);
        self.bound_write(context, outcome)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(context)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(context)
    }
}

/// Where the bytes read so far stand against request heads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum HeadScanner {
    /// Between requests: no byte of a head yet.
    #[default]
    Between,
    /// Inside a head; the last byte was not a line end.
    InLine,
    /// Inside a head, just after a line end (a `\r` before a `\n` is ignored).
    AtLineStart,
}

#[derive(Debug, PartialEq, Eq)]
enum HeadEvent {
    Started,
    Within,
    Ended,
}

impl HeadScanner {
    /// Feeds `bytes`; returns the last head that started or ended in them, if any.
    /// Inside a line only a line end matters, so the scan jumps from one to the next.
    fn scan(&mut self, bytes: &[u8]) -> Option<HeadEvent> {
        let mut last = None;
        let mut at = 0;
        while at < bytes.len() {
            if *self == HeadScanner::InLine {
                match memchr::memchr(b'\n', &bytes[at..]) {
                    Some(offset) => at += offset,
                    None => break,
                }
            }
            match self.feed(bytes[at]) {
                HeadEvent::Within => {}
                event => last = Some(event),
            }
            at += 1;
        }
        last
    }

    fn feed(&mut self, byte: u8) -> HeadEvent {
        let (next, event) = match (*self, byte) {
            // Line ends before a request line are allowed and ignored (RFC 9112 2.2).
            (HeadScanner::Between, b'\r' | b'\n') => (HeadScanner::Between, HeadEvent::Within),
            (HeadScanner::Between, _) => (HeadScanner::InLine, HeadEvent::Started),
            (state, b'\r') => (state, HeadEvent::Within),
            (HeadScanner::InLine, b'\n') => (HeadScanner::AtLineStart, HeadEvent::Within),
            (HeadScanner::AtLineStart, b'\n') => (HeadScanner::Between, HeadEvent::Ended),
            (_, _) => (HeadScanner::InLine, HeadEvent::Within),
        };
        *self = next;
        event
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(text: &[u8]) -> Vec<HeadEvent> {
        let mut scanner = HeadScanner::default();
        text.iter()
            .map(|&byte| scanner.feed(byte))
            .filter(|event| *event != HeadEvent::Within)
            .collect()
    }

    #[test]
    fn heads_start_at_their_first_byte_and_end_at_the_blank_line() {
        use HeadEvent::*;
        assert_eq!(
            events(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
            [Started, Ended]
        );
        assert_eq!(events(b"GET / HTTP/1.1\nHost: x\n\n"), [Started, Ended]);
        assert_eq!(
            events(b"GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n"),
            [Started, Ended, Started, Ended]
        );
        // Empty lines between requests do not start a head.
        assert_eq!(events(b"\r\n\r\nGET / HTTP/1.1\r\n\r\n"), [Started, Ended]);
        // A head still open.
        assert_eq!(events(b"GET / HTTP/1.1\r\nHost: x\r\n"), [Started]);
        // A `\r` alone is not a line end: `\r\r\n` ends one line, not the head.
        assert_eq!(events(b"GET / HTTP/1.1\r\r\nHost: x\r\n"), [Started]);
    }

    proptest::proptest! {
        /// Issue 10: jumping from line end to line end finds what feeding every
        /// byte finds.
        #[test]
        fn issue_10_scanning_agrees_with_feeding_byte_by_byte(
            chunks in proptest::collection::vec(
                proptest::collection::vec(proptest::sample::select(b"\r\nGa :".to_vec()), 0..40),
                0..6,
            ),
        ) {
            let mut fed = HeadScanner::default();
            let mut scanned = HeadScanner::default();
            for chunk in &chunks {
                let last = chunk
                    .iter()
                    .map(|&byte| fed.feed(byte))
                    .filter(|event| *event != HeadEvent::Within)
                    .last();
                proptest::prop_assert_eq!(scanned.scan(chunk), last);
                proptest::prop_assert_eq!(scanned, fed);
            }
        }
    }

    #[actix_web::test]
    async fn a_trickled_head_is_cut_off_after_the_timeout() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let (client, server) = tokio::io::duplex(64);
        let mut server = Deadlined::new(server, Duration::from_millis(100));
        let trickle = actix_web::rt::spawn(async move {
            let mut client = client;
            for byte in b"GET / HTTP/1.1\r\nHost: x\r\n" {
                if client.write_all(&[*byte]).await.is_err() {
                    break;
                }
                sleep(Duration::from_millis(20)).await;
            }
            client
        });
        let mut buffer = [0u8; 64];
        let started = std::time::Instant::now();
        let error = loop {
            match server.read(&mut buffer).await {
                Ok(0) => panic!("the client closed first"),
                Ok(_) => continue,
                Err(error) => break error,
            }
        };
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        let elapsed = started.elapsed();
        assert!(elapsed >= Duration::from_millis(100), "{elapsed:?}");
        assert!(elapsed < Duration::from_millis(450), "{elapsed:?}");
        drop(server);
        let _ = trickle.await;
    }

    #[actix_web::test]
    async fn whole_heads_and_idle_time_between_them_are_not_cut_off() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let (mut client, server) = tokio::io::duplex(1024);
        let mut server = Deadlined::new(server, Duration::from_millis(50));
        client
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buffer = [0u8; 1024];
        assert!(server.read(&mut buffer).await.unwrap() > 0);
        // Idle between requests is actix-http's keep-alive timer's business.
        sleep(Duration::from_millis(120)).await;
        client
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        assert!(server.read(&mut buffer).await.unwrap() > 0);
    }

    #[actix_web::test]
    async fn a_response_nobody_reads_is_cut_off_after_the_timeout() {
        use tokio::io::AsyncWriteExt as _;
        let (_client, server) = tokio::io::duplex(16);
        let mut server = Deadlined::new(server, Duration::from_millis(100));
        let started = std::time::Instant::now();
        let error = server.write_all(&[b'x'; 1024]).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_millis(100));
    }
}
