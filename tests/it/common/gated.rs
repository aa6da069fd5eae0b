//! A streamed chat request through the proxy to [`super::gated_upstream`],
//! whose tokens the test sends one by one and awaits at the client: each
//! token's (sent, received) instants bracket when the proxy read it, so
//! what the proxy timed is bounded by what the test saw, not by a slack.

use std::net::SocketAddr;
use std::time::Instant;

use bytes::Bytes;
use hyper::body::Frame;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc::UnboundedReceiver;

use super::{Gate, chat_request, read_while};

/// One chat chunk of one token of output.
pub const TOKEN: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n";

pub struct GatedStream {
    client: TcpStream,
    gate: Gate,
    answer: Vec<u8>,
    /// Each token's (sent, received), in order.
    pub times: Vec<(Instant, Instant)>,
}

impl GatedStream {
    /// Sends a streamed chat request to `proxy` and takes its upstream's
    /// gate from `gates`.
    pub async fn open(proxy: SocketAddr, gates: &mut UnboundedReceiver<Gate>) -> Self {
        let (head, body) = chat_request("m1", true, &[]);
        let mut client = TcpStream::connect(proxy).await.unwrap();
        client.write_all(head.as_bytes()).await.unwrap();
        client.write_all(&body).await.unwrap();
        let gate = gates.recv().await.unwrap();
        GatedStream {
            client,
            gate,
            answer: Vec::new(),
            times: Vec::new(),
        }
    }

    /// Sends the next token and waits until the client has it.
    pub async fn token(&mut self) {
        let tokens = |seen: &[u8]| seen.windows(9).filter(|w| w == br#""content""#).count();
        let n = self.times.len() + 1;
        let sent = Instant::now();
        self.gate
            .send(Ok(Frame::data(Bytes::from_static(TOKEN.as_bytes()))))
            .await
            .unwrap();
        let answer = &self.answer;
        let more = read_while(&mut self.client, |seen| tokens(answer) + tokens(seen) < n).await;
        self.answer.extend_from_slice(&more);
        self.times.push((sent, Instant::now()));
    }

    /// Ends the stream with `[DONE]` and reads the client's answer to its
    /// end, which must hold it.
    pub async fn finish(mut self) {
        self.gate
            .send(Ok(Frame::data(Bytes::from_static(b"data: [DONE]\n\n"))))
            .await
            .unwrap();
        drop(self.gate);
        self.client.read_to_end(&mut self.answer).await.unwrap();
        assert!(self.answer.windows(6).any(|w| w == b"[DONE]"), "no [DONE]");
    }
}
