//! A connection to the upstream between exchanges ([`Conn`]), what it runs
//! over ([`Transport`]), and where one that can be kept goes ([`Keep`]:
//! its pool).

use std::pin::Pin;
use std::sync::Weak;
use std::task::{Context, Waker};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::head::KeepAliveHint;

/// Where a connection whose exchange ended cleanly is kept for the next
/// request (an upstream's [`Pool`](crate::Pool)).
pub trait Keep<T>: Send + Sync {
    fn keep(&self, conn: Conn<T>);
}

/// What a connection runs over: a TCP stream to the upstream, a TLS stream
/// over one, or, in tests, an in-memory one; and where one that can be
/// kept goes.
pub trait Transport: AsyncRead + AsyncWrite + Unpin + Sized {
    /// Keeps `conn`, whose exchange ended cleanly, for the next request.
    fn give_back(conn: Conn<Self>, home: &Weak<dyn Keep<Self>>) {
        if let Some(home) = home.upgrade() {
            home.keep(conn);
        }
    }
}

impl Transport for TcpStream {}

/// An open connection to the upstream, between exchanges.
pub struct Conn<T = TcpStream> {
    pub(crate) io: T,
    /// Bytes read and not yet decoded; empty between exchanges.
    pub(crate) buf: BytesMut,
    /// What the upstream's last `Keep-Alive` header said, if anything.
    pub(crate) hint: KeepAliveHint,
}

impl<T: Transport> Conn<T> {
    pub fn new(io: T) -> Self {
        Self {
            io,
            buf: BytesMut::new(),
            hint: KeepAliveHint::default(),
        }
    }

    /// What the upstream's last response said of keeping this connection.
    pub fn hint(&self) -> KeepAliveHint {
        self.hint
    }

    /// Whether an idle connection can take a request: the upstream has not
    /// closed it (nor sent anything unasked). A read that would wait means
    /// it is open; what an idle connection has to read is its end (a TLS
    /// stream takes its protocol's own post-handshake messages, such as
    /// resumption tickets, on the way, and still waits). The read is polled with a waker that
    /// does nothing: nobody waits on an idle connection, and the next
    /// exchange's poll registers its own.
    pub fn is_open(&mut self) -> bool {
        let mut probe = [0u8; 1];
        let mut probe = ReadBuf::new(&mut probe);
        let mut cx = Context::from_waker(Waker::noop());
        Pin::new(&mut self.io)
            .poll_read(&mut cx, &mut probe)
            .is_pending()
    }
}
