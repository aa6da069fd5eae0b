//! A Prometheus page the test writes: served on a socket of its own to
//! every GET, as an inference server's or a GPU exporter's `/metrics`
//! would be, and changed by the test at will, so that what a scrape reads
//! is what the test decided, not what a simulated engine happened to be
//! doing at that moment.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

/// A page served at `addr`; [`Page::set`] changes what the next GET reads.
pub struct Page {
    pub addr: SocketAddr,
    text: Arc<Mutex<String>>,
}

impl Page {
    /// Serves `text` until the test's runtime stops.
    pub async fn serve(text: String) -> Self {
        let text = Arc::new(Mutex::new(text));
        let served = text.clone();
        let addr = serve_made(move || served.lock().unwrap().clone()).await;
        Page { addr, text }
    }

    /// The page's URL, as a route's `engine_metrics` or `gpu_metrics`.
    pub fn url(&self) -> String {
        format!("http://{}/metrics", self.addr)
    }

    /// What every GET from now on reads.
    pub fn set(&self, text: String) {
        *self.text.lock().unwrap() = text;
    }
}

/// Serves to every GET the page `make` writes at that moment (a counter
/// that grows with time, say), until the test's runtime stops; its
/// address.
pub async fn serve_made(make: impl Fn() -> String + Send + Sync + 'static) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let page = make();
            tokio::spawn(async move {
                if !read_head(&mut stream).await {
                    return;
                }
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{page}",
                    page.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    addr
}

/// Reads a request head from `stream`; `false` when it closes or fails
/// first.
pub async fn read_head<S: tokio::io::AsyncRead + Unpin>(stream: &mut S) -> bool {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    true
}

/// vLLM's page for model `model` with `running` requests in its batch and
/// `waiting` queued, its KV cache `kv` full (0 to 1).
pub fn vllm_page(model: &str, running: u32, waiting: u32, kv: f64) -> String {
    let labels = format!("engine=\"0\",model_name=\"{model}\"");
    format!(
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{{labels}}} {running}.0\n\
         # TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{{labels}}} {waiting}.0\n\
         # TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{{{labels}}} {kv}\n"
    )
}

/// When a reader asked for a page and when it had the answer.
pub type Reads = Arc<Mutex<Vec<(tokio::time::Instant, tokio::time::Instant)>>>;

/// Serves to every GET the `/metrics` page of `target` as it is at that
/// moment, and keeps when each GET was asked and answered: how stale a
/// reader's view of the page could get is measured, not assumed. Its
/// address and the reads.
pub async fn serve_recorded(target: SocketAddr) -> (SocketAddr, Reads) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let reads = Reads::default();
    let kept = reads.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let kept = kept.clone();
            tokio::spawn(async move {
                if !read_head(&mut stream).await {
                    return;
                }
                let asked = tokio::time::Instant::now();
                let page = super::get(target, "/metrics").await.body();
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    page.len()
                );
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(&page).await;
                let _ = stream.shutdown().await;
                kept.lock()
                    .unwrap()
                    .push((asked, tokio::time::Instant::now()));
            });
        }
    });
    (addr, reads)
}

/// What a reader of `reads` had of the page while `from..to` overlapped,
/// counting only the GETs answered within `in_time` (a reader that gave up
/// on a slower one did not have it): the longest it went from a page's
/// moment (its GET asked) to having the next (answered), and how long in
/// all it had no reading younger than `fresh_for`.
pub fn staleness(
    reads: &Reads,
    from: tokio::time::Instant,
    to: tokio::time::Instant,
    in_time: std::time::Duration,
    fresh_for: std::time::Duration,
) -> (std::time::Duration, std::time::Duration) {
    let mut reads: Vec<_> = reads
        .lock()
        .unwrap()
        .iter()
        .copied()
        .filter(|(asked, answered)| *answered - *asked <= in_time)
        .collect();
    reads.sort();
    let mut longest = std::time::Duration::ZERO;
    let mut expired = std::time::Duration::ZERO;
    for w in reads.windows(2) {
        if w[0].0 > to || w[1].1 < from {
            continue;
        }
        longest = longest.max(w[1].1 - w[0].0);
        let (gone, next) = ((w[0].1 + fresh_for).max(from), w[1].1.min(to));
        expired += next.saturating_duration_since(gone);
    }
    (longest, expired)
}
