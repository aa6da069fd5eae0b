//! The pool's checkout, over connections to in-memory upstreams that stay
//! open, so only time ends them.

use super::*;

/// A checkout takes the connection given back last, and never one that
/// expired, wherever it lies in the pool; each connection it finds
/// expired is dropped on the way, so the next checkout does not meet it.
#[tokio::test(start_paused = true)]
async fn a_checkout_takes_the_newest_and_drops_the_expired() {
    let pool: Arc<Pool<Mock<DuplexStream>>> =
        Pool::new(256, Duration::from_secs(10), Box::new(|_| {}));
    // The far ends stay open: every connection is alive, only time ends it.
    let mut far = Vec::new();
    let mut give = |pool: &Pool<Mock<DuplexStream>>| {
        let (near, other) = tokio::io::duplex(64);
        far.push(other);
        pool.give_back(over(near).0);
    };
    for _ in 0..200 {
        give(&pool);
    }
    tokio::time::advance(Duration::from_secs(5)).await;
    give(&pool);
    // At 12 s the first 200 expired (at 10 s), the last not (at 15 s).
    tokio::time::advance(Duration::from_secs(7)).await;
    assert!(pool.checkout().is_some(), "the newest is still good");
    // Finding none, it popped and dropped all 200.
    assert!(pool.checkout().is_none(), "every other one expired");
}
