//! How an exchange fails.

/// Errors a request body can fail with, and a connection's errors carry.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why an exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
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
    RequestBody(#[source] BoxError),
    #[error("request body does not match its Content-Length")]
    RequestLength,
}

/// An exchange that failed before its response head.
#[derive(Debug)]
pub struct Failed {
    pub error: Error,
    /// Not one byte of a response had arrived, and the failure came while
    /// the request was going out or within `RACE_WINDOW` of its last byte:
    /// on a connection that served a request before, the upstream closed
    /// it as it was reused (the keep-alive race), and has not seen the
    /// request.
    pub silent: bool,
}

impl From<Error> for Failed {
    fn from(error: Error) -> Self {
        Failed {
            error,
            silent: false,
        }
    }
}
