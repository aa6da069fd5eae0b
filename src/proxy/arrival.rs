//! When a request reached the proxy: `t0` from the kernel's receive
//! timestamp of the client connection's reads.
//!
//! Reading the clock when hyper hands over the parsed request head leaves
//! out the time the request waited in the socket for the proxy to get to
//! it: the wake-up of an idle proxy, and, under load, every stream served
//! before it. The client waited that time too. So each client connection
//! is read through [`Stamped`], which asks the kernel (`SO_TIMESTAMPNS`,
//! set on the listener and inherited by every accepted socket) when the
//! data of each read arrived, and keeps the latest in the connection's
//! [`Arrival`]. The service reads it as hyper hands it the request
//! ([`Arrival::t0`]): the arrival of the read that completed the head.
//!
//! The kernel stamps on the wall clock. The stamp enters the monotonic
//! clock as an age: `t0 = now - (wall now - stamp)`, both clocks read
//! together. An age that is negative or above [`MAX_AGE`] (the wall clock
//! was stepped in between) is not trusted, and `t0` is then `now`, as it is
//! where the kernel gives no stamp (timestamping unavailable, another OS).

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

use super::linger::Linger;

/// The oldest a receive stamp may be and still date `t0`.
pub const MAX_AGE: Duration = Duration::from_secs(10);

/// Asks the kernel to stamp the data of every connection `listener`
/// accepts from now on.
pub fn enable(listener: &TcpListener) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use nix::sys::socket::{setsockopt, sockopt::ReceiveTimestampns};
        setsockopt(listener, ReceiveTimestampns, &true).map_err(io::Error::from)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = listener;
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "receive timestamps need Linux",
        ))
    }
}

/// A client connection read with its receive stamps, and the handle to
/// them.
pub fn stamped(stream: TcpStream) -> (Stamped, Arrival) {
    let latest = Arc::new(AtomicU64::new(0));
    let arrival = Arrival(latest.clone());
    let linger = Linger::Open;
    (
        Stamped {
            stream,
            latest,
            linger,
        },
        arrival,
    )
}

/// When the data of a connection's latest read arrived (wall clock, ns
/// since the epoch; 0 if that read had no stamp, or before any read).
#[derive(Clone, Debug)]
pub struct Arrival(Arc<AtomicU64>);

impl Arrival {
    /// `t0` of the request hyper hands over now: when the data of the
    /// connection's latest read arrived, else now.
    pub fn t0(&self) -> Instant {
        let now = Instant::now();
        let received = self.0.load(Ordering::Relaxed);
        if received == 0 {
            return now;
        }
        back_dated(now, wall_nanos(SystemTime::now()), received)
    }
}

/// `now` moved back by the age of a stamp `received` (wall clock, ns since
/// the epoch) at `wall_now`, when that age can be trusted.
fn back_dated(now: Instant, wall_now: u64, received: u64) -> Instant {
    match wall_now.checked_sub(received).map(Duration::from_nanos) {
        Some(age) if age <= MAX_AGE => now.checked_sub(age).unwrap_or(now),
        _ => now,
    }
}

/// Nanoseconds since the epoch (0 before it).
fn wall_nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, nanos)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A client connection whose reads keep the kernel's receive stamp of
/// their data in the connection's [`Arrival`]. Writes go straight through;
/// its close lingers ([`super::linger`]).
#[derive(Debug)]
pub struct Stamped {
    stream: TcpStream,
    latest: Arc<AtomicU64>,
    linger: Linger,
}

/// The most one read takes.
const READ_MAX: usize = 16 * 1024;

thread_local! {
    /// Where reads land before they are copied to hyper's buffer: hyper
    /// lends uninitialised memory, which safe code must zero before the
    /// kernel may write to it, and zeroing the whole of each connection's
    /// read buffer would also make it resident.
    static LANDING: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl AsyncRead for Stamped {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            std::task::ready!(this.stream.poll_read_ready(cx))?;
            let read = LANDING.with_borrow_mut(|landing| {
                if landing.is_empty() {
                    landing.resize(READ_MAX, 0);
                }
                let dst = &mut landing[..buf.remaining().min(READ_MAX)];
                // A short read emptied the socket: tokio is told so (as its own
                // reads do), by a `WouldBlock` from inside `try_io`, so that the
                // next poll waits for new data instead of trying a read that
                // would fail. tokio forgets the readiness only if no new data
                // was signalled since before this read.
                let mut drained = None;
                let read = this.stream.try_io(tokio::io::Interest::READABLE, || {
                    let (n, stamp) = receive(&this.stream, dst)?;
                    if n > 0 && n < dst.len() {
                        drained = Some((n, stamp));
                        return Err(io::ErrorKind::WouldBlock.into());
                    }
                    Ok((n, stamp))
                });
                let (n, stamp) = match drained {
                    Some(got) => got,
                    None => read?,
                };
                buf.put_slice(&landing[..n]);
                Ok::<_, io::Error>((n, stamp))
            });
            match read {
                Ok((n, stamp)) => {
                    // A read without a stamp clears the last one: `t0` must
                    // never come from an earlier request's data.
                    if n > 0 {
                        this.latest.store(stamp.unwrap_or(0), Ordering::Relaxed);
                    }
                    return Poll::Ready(Ok(()));
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

/// One read of `stream` into `dst`: the bytes read and the kernel's stamp
/// of their arrival, if it gave one.
#[cfg(target_os = "linux")]
fn receive(stream: &TcpStream, dst: &mut [u8]) -> io::Result<(usize, Option<u64>)> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    use std::os::fd::AsRawFd;
    // Room for one `struct timespec` control message (32 bytes on 64-bit).
    let mut control = [0u8; 64];
    let mut iov = [io::IoSliceMut::new(dst)];
    let msg = recvmsg::<()>(
        stream.as_raw_fd(),
        &mut iov,
        Some(&mut control),
        MsgFlags::empty(),
    )?;
    // The bytes are read whatever the control data says: control data that
    // did not fit (never expected: only the stamp is asked for) is no stamp,
    // not an error that would lose them.
    let stamp = msg.cmsgs().ok().and_then(|mut cmsgs| {
        cmsgs.find_map(|cmsg| match cmsg {
            ControlMessageOwned::ScmTimestampns(ts) => Some(nanos(Duration::from(ts))),
            _ => None,
        })
    });
    Ok((msg.bytes, stamp))
}

#[cfg(not(target_os = "linux"))]
fn receive(stream: &TcpStream, dst: &mut [u8]) -> io::Result<(usize, Option<u64>)> {
    stream.try_read(dst).map(|n| (n, None))
}

impl AsyncWrite for Stamped {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.linger.poll_close(&mut this.stream, cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A client socket and the proxy's end of its connection, read through
    /// [`Stamped`]; `stamp` asks the kernel for receive stamps (on Linux).
    async fn connection(stamp: bool) -> (TcpStream, Stamped, Arrival) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        if stamp {
            let stamping = enable(&listener);
            assert!(
                stamping.is_ok() || cfg!(not(target_os = "linux")),
                "{stamping:?}"
            );
        }
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let (server, arrival) = stamped(server);
        (client, server, arrival)
    }

    #[test]
    fn a_stamp_moves_t0_back_by_its_age() {
        let now = Instant::now();
        let wall = 1_800_000_000_000_000_000;
        let ms = 1_000_000;
        assert_eq!(
            back_dated(now, wall, wall - 3 * ms),
            now - Duration::from_millis(3)
        );
        assert_eq!(back_dated(now, wall, wall), now);
        let max = nanos(MAX_AGE);
        assert_eq!(back_dated(now, wall, wall - max), now - MAX_AGE);
    }

    #[test]
    fn a_stamp_that_cannot_be_trusted_leaves_t0_at_now() {
        let now = Instant::now();
        let wall = 1_800_000_000_000_000_000;
        let max = nanos(MAX_AGE);
        // From the future: the wall clock went back since.
        assert_eq!(back_dated(now, wall, wall + 1), now);
        // Older than the bound: the wall clock went forward since.
        assert_eq!(back_dated(now, wall, wall - max - 1), now);
    }

    #[test]
    fn without_a_read_t0_is_now() {
        let arrival = Arrival(Arc::new(AtomicU64::new(0)));
        let before = Instant::now();
        let t0 = arrival.t0();
        assert!(t0 >= before && t0 <= Instant::now());
    }

    /// Data that waited in the socket dates `t0` from when it arrived, not
    /// from when it was read; the bytes read are the bytes sent.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn data_that_waited_in_the_socket_dates_t0_from_its_arrival() {
        let (mut client, mut server, arrival) = connection(true).await;
        let waited = Duration::from_millis(50);
        let mut got = [0u8; 64];
        // The kernel turns stamping on for the whole host a moment after the
        // first socket asks (a deferred switch), so the first data may come
        // unstamped; what is stamped must be dated right.
        let mut stamped = false;
        for _ in 0..20 {
            client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
            tokio::time::sleep(waited).await;
            let n = server.read(&mut got).await.unwrap();
            assert_eq!(&got[..n], b"GET / HTTP/1.1\r\n\r\n");
            if arrival.0.swap(0, Ordering::Relaxed) != 0 {
                stamped = true;
                break;
            }
        }
        assert!(stamped, "no read was stamped");
        // Again, now that stamping is on: the age is the time in the socket.
        client.write_all(b"POST").await.unwrap();
        tokio::time::sleep(waited).await;
        let n = server.read(&mut got).await.unwrap();
        assert_eq!(&got[..n], b"POST");
        let age = Instant::now() - arrival.t0();
        assert!(
            age >= waited - Duration::from_millis(5),
            "t0 only {age:?} ago"
        );
        assert!(age < MAX_AGE, "t0 {age:?} ago");

        // A read without a stamp (stamping turned off on this socket)
        // leaves no earlier stamp behind to date the next request.
        use nix::sys::socket::{setsockopt, sockopt::ReceiveTimestampns};
        setsockopt(&server.stream, ReceiveTimestampns, &false).unwrap();
        client.write_all(b"GET").await.unwrap();
        tokio::time::sleep(waited).await;
        let n = server.read(&mut got).await.unwrap();
        assert_eq!(&got[..n], b"GET");
        let before = Instant::now();
        assert!(arrival.t0() >= before, "t0 dated by an earlier read");

        // Writes go through unchanged, and the peer closing reads as the end.
        server.write_all(b"reply").await.unwrap();
        let mut reply = [0u8; 5];
        client.read_exact(&mut reply).await.unwrap();
        assert_eq!(&reply, b"reply");
        drop(client);
        assert_eq!(server.read(&mut got).await.unwrap(), 0);
    }

    /// Data larger than one read, read into buffers of every size (short
    /// reads among them), comes through whole and in order, and no read
    /// waits for data that is already there.
    #[tokio::test]
    async fn long_data_reads_whole() {
        // Stamped reads on Linux, plain ones elsewhere.
        let (mut client, mut server, _arrival) = connection(true).await;
        let sent: Vec<u8> = (0..3 * READ_MAX + 17).map(|i| (i % 251) as u8).collect();
        let writer = {
            let sent = sent.clone();
            tokio::spawn(async move {
                client.write_all(&sent).await.unwrap();
                client.shutdown().await.unwrap();
            })
        };
        let mut got = Vec::new();
        let mut size = 1;
        loop {
            let mut part = vec![0u8; size];
            // A read that waited for data already there would hang here.
            let n = tokio::time::timeout(Duration::from_secs(10), server.read(&mut part))
                .await
                .expect("a read waited for data already in the socket")
                .unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&part[..n]);
            size = size * 3 % (2 * READ_MAX) + 1;
        }
        writer.await.unwrap();
        assert_eq!(got, sent);
    }

    /// On a socket the kernel does not stamp, reads work and `t0` is now.
    #[tokio::test]
    async fn without_stamps_reads_work_and_t0_is_now() {
        let (mut client, mut server, arrival) = connection(false).await;
        client.write_all(b"abc").await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let mut got = [0u8; 8];
        let n = server.read(&mut got).await.unwrap();
        assert_eq!(&got[..n], b"abc");
        let before = Instant::now();
        assert!(arrival.t0() >= before);
    }
}
