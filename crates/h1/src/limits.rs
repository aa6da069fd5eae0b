//! The sizes that bound what a connection reads and writes, and the time
//! that tells the keep-alive race from an upstream that took a request.

/// A read takes at least this much room in the read buffer.
pub(crate) const READ_MIN: usize = 8 * 1024;
/// ... and at most this much: a read that filled its room doubles the next
/// one's, up to here (bulk bodies), one that used less than half halves it.
pub(crate) const READ_MAX: usize = 64 * 1024;
/// While a frame split off the read buffer waits to be written, a read
/// goes into the room left after it if there is at least this much, rather
/// than into a new buffer.
pub(crate) const READ_LEFT: usize = 2 * 1024;
/// Longest response head (status line and headers), and longest trailer
/// section, read.
pub(crate) const MAX_HEAD: usize = 64 * 1024;
/// Most headers in a response head (hyper's default too).
pub(crate) const MAX_HEADERS: usize = 100;
/// Longest chunk size line (size and extensions).
pub(crate) const MAX_SIZE_LINE: usize = 4 * 1024;
/// Request body bytes gathered before a write (frames that are ready at
/// once go out together with the head).
pub(crate) const WRITE_GATHER: usize = 64 * 1024;

/// A reused connection that the upstream closes without a byte of a
/// response within this long of the request's last byte being written was
/// closed in the keep-alive race (the close crossed the request on the
/// wire: it shows within a round trip). One closed later was closed by an
/// upstream that had the request (a crash, a restart, a worker killed
/// mid-generation): sending it again could run it twice.
pub(crate) const RACE_WINDOW: std::time::Duration = std::time::Duration::from_secs(1);
