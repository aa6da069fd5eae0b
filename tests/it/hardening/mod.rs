//! What production traffic does to a proxy, each rule on real sockets: a
//! client that leaves at the terminal event, bogus usage from an upstream,
//! a client's broken body, and the header rules of a hop.
//!
//! One file per subject: what is counted and against whom
//! (`accounting.rs`), the header rules (`headers.rs`), the keep-alive race
//! (`keep_alive.rs`), stalled clients (`stalls.rs`) and the listeners'
//! limits (`limits.rs`); the helpers they share are here.

mod accounting;
mod headers;
mod keep_alive;
mod limits;
mod stalls;

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::*;
use bytes::Bytes;
use hyper::body::Frame;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn frame(text: &str) -> Result<Frame<Bytes>, std::convert::Infallible> {
    Ok(Frame::data(Bytes::copy_from_slice(text.as_bytes())))
}

/// The response the proxy sends on `client` before it closes the
/// connection (a reset after it still counts).
async fn answer(client: &mut TcpStream) -> RawResponse {
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut buf))
        .await
        .expect("an answer");
    parse_response(&buf)
}

async fn settle(admin: SocketAddr, total: f64) -> Vec<Sample> {
    scrape_until(admin, |s| sum(s, "llm_requests_total", &[]) >= total).await
}

/// An SSE body of OpenAI chat chunks: one token, then a usage chunk with
/// `completion_tokens` written as given, then `[DONE]`.
fn chat_stream(completion_tokens: &str) -> String {
    format!(
        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"Hi\"}}}}]}}\n\n\
         data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":3,\"completion_tokens\":{completion_tokens}}}}}\n\n\
         data: [DONE]\n\n"
    )
}
