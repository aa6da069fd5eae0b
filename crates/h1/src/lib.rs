//! An HTTP/1.1 client connection of our own, for every HTTP/1.1 upstream
//! (over TCP, or over TLS when ALPN chose `http/1.1`): writes one request,
//! reads its response head, and hands the response body to the client's
//! connection frame by frame, from the task that writes to the client.
//!
//! hyper's client connection decodes a chunked body one byte at a time
//! through its buffered reader, and hands every frame to the response's
//! body through a channel, with a wake-up for each end: 26 % of the
//! proxy's instructions per streamed chunk (callgrind, docs/benchmarks.md).
//! Here the response body *is* the connection: a poll of it decodes what is
//! in the read buffer ([`body`]) and reads the transport only when that is
//! empty, so a frame costs a look at its size line and a split of the
//! buffer: no copy, no allocation ([`decode`]).
//!
//! The parts: [`write`] writes the request (head, body, trailers), [`head`]
//! parses the response head (interim responses skipped), [`body`] decodes
//! the response body by its framing, [`pool`] keeps idle connections and
//! holds the one retry rule. This crate knows nothing of the proxy: the
//! transport (`T: Transport`) and the request body (`B: SendBody`) are
//! type parameters, and a request body's errors travel as their own type
//! (`Error<E>`), so that the sender can tell them apart without looking.
//!
//! What it forwards is what hyper's client does: each chunk's data as it
//! arrived (one frame per chunk, or per part of a chunk that arrived in one
//! read: never two chunks in one frame), trailers as a trailers frame, and
//! the body framed as RFC 9112 §6.3 says (`HEAD`, 1xx, 204 and 304 have
//! none, whatever their `Content-Length` or `Transfer-Encoding`;
//! `Transfer-Encoding` ending in `chunked`, else `Content-Length`, else
//! until the upstream closes). Interim (1xx) responses are skipped. An
//! HTTP/1.0 response with `Transfer-Encoding` is refused (RFC 9112 §6.1:
//! its framing is faulty), as hyper's client refuses it.
//!
//! The request goes out with the framing of its body: its
//! `Content-Length`, the exact length of a body read ahead (unless the
//! request declares `Trailer`), or chunked. A chunked body's trailers end
//! it as its trailer section (less the fields that must not be trailers,
//! RFC 9110 §6.5.1, as hyper's client leaves them out); a body sent with a
//! `Content-Length` has no room for them, and they are dropped.
//!
//! The exchange is full duplex, as hyper's is: if the response head
//! arrives before the request body is all sent (an upstream that answers
//! an upload early, or streams its answer while it reads), the response
//! body sends the rest as it is polled, for as long as the upstream takes
//! it, still with no task of its own. A request that is not all sent when
//! the response ends (the upstream answered without reading all of it),
//! or whose sending failed once the response had begun (the upstream
//! stopped reading and closed, the client's body failed), is not sent
//! further; the response goes on, and the connection is closed after it.
//!
//! A connection is kept for the next request only when both messages
//! ended cleanly at their framing's end: HTTP/1.1, no `Connection: close`,
//! a body that was not delimited by the close, the whole request sent, and
//! nothing read past the response.
//!
//! [`server`] is the other side: the HTTP/1.x server connection the
//! proxy's clients are served by, on the same body decoder and field
//! rules. It writes each response body frame as it is polled, framed, in
//! the connection's own task (its module doc says what a client sees).

mod body;
mod conn;
mod decode;
mod error;
mod exchange;
#[cfg(fuzzing)]
mod fuzz;
mod head;
mod limits;
mod pool;
pub mod server;
#[cfg(test)]
mod tests;
mod write;

pub use body::Body;
pub use conn::{Conn, Keep, Transport};
pub use error::{Error, Failed};
#[cfg(fuzzing)]
pub use fuzz::fuzz_response;
pub use head::KeepAliveHint;
pub use pool::{OnRetry, Pool, Race, Reused};
pub use write::{Prepared, SendBody};
