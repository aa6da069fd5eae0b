//! Lingering close of a client connection: after the proxy's last
//! response, its side of the connection is shut down for writing, and what
//! the client still sends is read and dropped for a short while before the
//! socket is closed.
//!
//! A socket closed with unread data in its receive queue, or that receives
//! data after it was closed, makes the kernel answer with a reset, and a
//! reset makes the client's kernel drop what it had received but its
//! program had not yet read: the response itself. That is the fate of a
//! `408` or `400` answered while the client is still sending its body (a
//! client that trickles it, or an upload the proxy stopped reading), and of
//! a client that sends its next request as the proxy closes an idle
//! connection. nginx lingers for the same reason (`lingering_close`).
//!
//! The linger is bounded three ways, so that a client cannot hold a closed
//! connection open: it ends at the client's end of stream, after
//! [`QUIET`] without a byte, after [`MAX_TIME`] in all, or after
//! [`MAX_BYTES`] read. A client that closes at once (nearly every one: it
//! reads the end of stream the proxy's shutdown sends) costs one read.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// The longest wait for the client's next byte.
pub const QUIET: Duration = Duration::from_millis(500);
/// The longest a closing connection lingers.
pub const MAX_TIME: Duration = Duration::from_secs(2);
/// The most bytes read and dropped while lingering.
pub const MAX_BYTES: usize = 256 * 1024;

/// Where a connection's close stands.
#[derive(Debug, Default)]
pub enum Linger {
    /// Not closing.
    #[default]
    Open,
    /// Shut down for writing; reading what the client still sends.
    /// Boxed: only a closing connection carries it.
    Draining(Box<Draining>),
    /// Closed, or done lingering.
    Done,
}

#[derive(Debug)]
pub struct Draining {
    /// When the linger ends whatever the client does.
    until: Instant,
    /// When the linger ends if no byte comes before it.
    quiet: Pin<Box<Sleep>>,
    read: usize,
}

impl Linger {
    /// Shuts `stream` down for writing, then drains it as the module says:
    /// `AsyncWrite::poll_shutdown` of a client connection.
    pub fn poll_close<S>(&mut self, stream: &mut S, cx: &mut Context<'_>) -> Poll<io::Result<()>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        loop {
            match self {
                Linger::Open => {
                    ready!(Pin::new(&mut *stream).poll_shutdown(cx))?;
                    let now = Instant::now();
                    *self = Linger::Draining(Box::new(Draining {
                        until: now + MAX_TIME,
                        quiet: Box::pin(tokio::time::sleep_until(now + QUIET)),
                        read: 0,
                    }));
                }
                Linger::Draining(d) => {
                    if d.poll_drained(stream, cx).is_ready() {
                        *self = Linger::Done;
                    } else {
                        return Poll::Pending;
                    }
                }
                Linger::Done => return Poll::Ready(Ok(())),
            }
        }
    }
}

impl Draining {
    /// Ready when the linger is over, for whatever reason: errors while
    /// lingering only end it (the response is already out).
    fn poll_drained<S>(&mut self, stream: &mut S, cx: &mut Context<'_>) -> Poll<()>
    where
        S: AsyncRead + Unpin,
    {
        let mut scratch = [0u8; 4096];
        loop {
            if self.quiet.as_mut().poll(cx).is_ready() {
                return Poll::Ready(());
            }
            let mut buf = ReadBuf::new(&mut scratch);
            match Pin::new(&mut *stream).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if buf.filled().is_empty() => return Poll::Ready(()),
                Poll::Ready(Ok(())) => {
                    self.read += buf.filled().len();
                    if self.read >= MAX_BYTES {
                        return Poll::Ready(());
                    }
                    let next = (Instant::now() + QUIET).min(self.until);
                    self.quiet.as_mut().reset(next);
                }
                Poll::Ready(Err(_)) => return Poll::Ready(()),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests panic on purpose.
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap());
        let (client, server) = tokio::join!(client, listener.accept());
        (client.unwrap(), server.unwrap().0)
    }

    async fn close(server: &mut TcpStream) {
        let mut linger = Linger::Open;
        std::future::poll_fn(|cx| linger.poll_close(server, cx))
            .await
            .unwrap();
    }

    /// A client still sending when the proxy answers and closes can go on
    /// sending until it reads the answer: no reset refuses its writes (a
    /// client that sees its upload fail reports that, not the answer).
    #[tokio::test]
    async fn a_client_still_sending_is_not_reset_before_it_reads_the_answer() {
        let (mut client, mut server) = pair().await;
        client.write_all(&[b'x'; 10_000]).await.unwrap();
        // The server answers without reading what came, and closes.
        server
            .write_all(b"HTTP/1.1 408 Request Timeout\r\n\r\n")
            .await
            .unwrap();
        let sender = tokio::spawn(async move {
            // The client goes on sending for a while before it reads.
            for k in 0..5 {
                tokio::time::sleep(Duration::from_millis(50)).await;
                if let Err(e) = client.write_all(&[b'y'; 1000]).await {
                    return Err(format!("write {k} failed: {e}"));
                }
            }
            let mut got = Vec::new();
            client
                .read_to_end(&mut got)
                .await
                .map_err(|e| e.to_string())?;
            Ok(got)
        });
        close(&mut server).await;
        drop(server);
        let got = sender.await.unwrap().unwrap();
        assert_eq!(got, b"HTTP/1.1 408 Request Timeout\r\n\r\n");
    }

    /// A client that closes when it reads the end costs no wait.
    #[tokio::test]
    async fn a_client_that_closes_ends_the_linger_at_once() {
        let (mut client, mut server) = pair().await;
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            client.read_to_end(&mut got).await.unwrap();
            drop(client);
        });
        let started = Instant::now();
        close(&mut server).await;
        reader.await.unwrap();
        assert!(started.elapsed() < QUIET, "{:?}", started.elapsed());
    }

    /// A client that neither sends nor closes is waited for `QUIET`; one
    /// that trickles, `MAX_TIME` at most.
    #[tokio::test]
    async fn a_silent_or_trickling_client_cannot_hold_the_connection() {
        let (client, mut server) = pair().await;
        let started = Instant::now();
        close(&mut server).await;
        let waited = started.elapsed();
        assert!(waited >= QUIET && waited < MAX_TIME, "{waited:?}");
        drop(client);

        let (mut client, mut server) = pair().await;
        let trickle = tokio::spawn(async move {
            while client.write_all(b"y").await.is_ok() {
                tokio::time::sleep(QUIET / 4).await;
            }
        });
        let started = Instant::now();
        close(&mut server).await;
        let waited = started.elapsed();
        assert!(
            waited >= MAX_TIME && waited < MAX_TIME + QUIET,
            "{waited:?}"
        );
        drop(server);
        trickle.await.unwrap();
    }
}
