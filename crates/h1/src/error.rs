//! How an exchange fails.

/// Why an exchange failed; `E` is the request body's own error, kept as
/// its type so that whoever sent the body can tell its failure apart. The
/// response's framing alone never fails with it (`E` is `Infallible`
/// there).
#[derive(Debug, thiserror::Error)]
pub enum Error<E = std::convert::Infallible> {
    #[error("upstream connection")]
    Io(#[from] std::io::Error),
    #[error("upstream closed the connection before the response head")]
    ClosedBeforeHead,
    #[error("upstream closed the connection before the end of the response body")]
    ClosedInBody,
    #[error("invalid response head from upstream: {0}")]
    Head(&'static str),
    #[error("invalid chunked response body from upstream: {0}")]
    Chunked(&'static str),
    /// The request body failed (its own error, as the source).
    #[error("request body")]
    RequestBody(#[source] E),
    #[error("request body does not match its Content-Length")]
    RequestLength,
}

impl Error {
    /// A failure of the response's framing, as an exchange's error.
    pub(crate) fn widen<E>(self) -> Error<E> {
        match self {
            Error::Io(e) => Error::Io(e),
            Error::ClosedBeforeHead => Error::ClosedBeforeHead,
            Error::ClosedInBody => Error::ClosedInBody,
            Error::Head(e) => Error::Head(e),
            Error::Chunked(e) => Error::Chunked(e),
            Error::RequestBody(never) => match never {},
            Error::RequestLength => Error::RequestLength,
        }
    }
}

/// An exchange that failed before its response head.
#[derive(Debug)]
pub struct Failed<E> {
    pub error: Error<E>,
    /// Not one byte of a response had arrived, and the failure came while
    /// the request was going out or within `RACE_WINDOW` of its last byte:
    /// on a connection that served a request before, the upstream closed
    /// it as it was reused (the keep-alive race), and has not seen the
    /// request.
    pub silent: bool,
}

impl<E> From<Error<E>> for Failed<E> {
    fn from(error: Error<E>) -> Self {
        Failed {
            error,
            silent: false,
        }
    }
}
