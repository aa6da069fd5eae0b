//! The batch-limited mode on a real socket: requests beyond the slots wait,
//! their time to first token includes the wait, and `/metrics` says so in
//! vLLM's names, read back with the telemetry crate's own reader.

// Panicking on unexpected input is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::num::NonZeroU32;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use sim::SimConfig;
use telemetry::{EngineFigures, Limits, Server, parse, read_engine};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::time::Instant;

const TTFT: Duration = Duration::from_millis(300);
const ITL: Duration = Duration::from_millis(20);
const TOKENS: u32 = 5;
/// "a b c d": four prompt tokens, two of them cached.
const BODY: &str = r#"{"stream":true,"messages":[{"role":"user","content":"a b c d"}]}"#;

struct Sim {
    base: String,
    client: Client<HttpConnector, Full<Bytes>>,
    _stop: oneshot::Sender<()>,
}

impl Sim {
    async fn start(slots: Option<u32>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let config = SimConfig {
            ttft: TTFT,
            itl: ITL,
            tokens: TOKENS,
            slots: slots.map(|n| NonZeroU32::new(n).unwrap()),
            ..SimConfig::default()
        };
        tokio::spawn(sim::serve(listener, config, async {
            let _ = stopped.await;
        }));
        Self {
            base,
            client: Client::builder(TokioExecutor::new()).build_http(),
            _stop: stop,
        }
    }

    async fn stream(&self) -> Response<Incoming> {
        let request = Request::post(format!("{}/v1/chat/completions", self.base))
            .header("content-type", "application/json")
            .header("x-sim-cached-tokens", "2")
            .body(Full::new(Bytes::from_static(BODY.as_bytes())))
            .unwrap();
        self.client.request(request).await.unwrap()
    }

    async fn get(&self, path: &str) -> (StatusCode, String, Bytes) {
        let request = Request::get(format!("{}{path}", self.base))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let response = self.client.request(request).await.unwrap();
        let status = response.status();
        let content_type = response
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, content_type, body)
    }

    /// The engine's figures as a scraper reads them from `/metrics`.
    async fn figures(&self) -> EngineFigures {
        let (status, content_type, body) = self.get("/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
        let page = parse(&body, &Limits::default()).unwrap();
        let reading = read_engine(&page);
        assert_eq!(reading.server, Some(Server::Vllm));
        assert_eq!(
            (reading.ignored, reading.refused),
            (2, 0),
            "the _created samples"
        );
        assert_eq!(reading.models.len(), 1);
        assert_eq!(reading.models[0].model.as_deref(), Some("sim-model"));
        reading.models[0].figures
    }

    /// Polls `/metrics` until `done` holds, for at most 5 s.
    async fn wait_for(&self, done: impl Fn(&EngineFigures) -> bool) -> EngineFigures {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let figures = self.figures().await;
            if done(&figures) {
                return figures;
            }
            assert!(Instant::now() < deadline, "never reached: {figures:?}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// The time from `sent` to the first token (the first event with content),
/// reading the stream to its end.
async fn time_to_first_token(response: Response<Incoming>, sent: Instant) -> Duration {
    let mut body = response.into_body();
    let mut first = None;
    while let Some(frame) = body.frame().await {
        let data = frame.unwrap().into_data().unwrap();
        let text = std::str::from_utf8(&data).unwrap();
        if first.is_none() && text.contains(r#""content":" tok0""#) {
            first = Some(sent.elapsed());
        }
    }
    first.expect("a token")
}

fn figures(running: f64, waiting: f64, kv: f64, queries: f64, hits: f64) -> EngineFigures {
    EngineFigures {
        running: Some(running),
        waiting: Some(waiting),
        kv_cache_usage: Some(kv),
        prefix_cache_queries: Some(queries),
        prefix_cache_hits: Some(hits),
        prefix_cache_hit_rate: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_beyond_the_slots_wait_and_metrics_say_so() {
    let sim = Sim::start(Some(2)).await;
    assert_eq!(sim.figures().await, figures(0.0, 0.0, 0.0, 0.0, 0.0));

    let sent = Instant::now();
    // A streamed answer's head goes out at once, queued or not, and a
    // request is admitted or queued before its head: with the four heads
    // in, the engine state is settled.
    let heads = futures_join4(sim.stream(), sim.stream(), sim.stream(), sim.stream()).await;
    assert_eq!(sim.figures().await, figures(2.0, 2.0, 1.0, 8.0, 4.0));

    let mut ttfts = Vec::new();
    let tasks: Vec<_> = heads
        .into_iter()
        .map(|head| tokio::spawn(time_to_first_token(head, sent)))
        .collect();
    for task in tasks {
        ttfts.push(task.await.unwrap());
    }
    ttfts.sort();
    // Two start at once; the other two get a slot when the first two have
    // sent their last token, and their TTFT counts from then.
    let first_end = TTFT + ITL * (TOKENS - 1);
    let slack = Duration::from_millis(250);
    for fast in &ttfts[..2] {
        assert!(*fast >= TTFT && *fast < TTFT + slack, "{ttfts:?}");
    }
    for slow in &ttfts[2..] {
        assert!(*slow >= first_end + TTFT, "{ttfts:?}");
    }

    let done = sim.wait_for(|f| f.running == Some(0.0)).await;
    assert_eq!(done, figures(0.0, 0.0, 0.0, 16.0, 8.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_the_queue_gives_up_its_place() {
    let sim = Sim::start(Some(1)).await;
    let running = sim.stream().await;
    let queued = sim.stream().await;
    assert_eq!(sim.figures().await, figures(1.0, 1.0, 1.0, 4.0, 2.0));
    drop(queued);
    let left = sim.wait_for(|f| f.waiting == Some(0.0)).await;
    assert_eq!(left, figures(1.0, 0.0, 1.0, 4.0, 2.0));
    drop(running);
    sim.wait_for(|f| f.running == Some(0.0)).await;
    // The place given up was never admitted: no prefix cache lookup.
    let third = sim.stream().await;
    assert_eq!(sim.figures().await, figures(1.0, 0.0, 1.0, 8.0, 4.0));
    time_to_first_token(third, Instant::now()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_answer_waits_for_its_slot_too() {
    let sim = Sim::start(Some(1)).await;
    let post = || async {
        let request = Request::post(format!("{}/v1/completions", sim.base))
            .body(Full::new(Bytes::from_static(br#"{"prompt":"a b"}"#)))
            .unwrap();
        let response = sim.client.request(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        response.into_body().collect().await.unwrap();
    };
    let sent = Instant::now();
    tokio::join!(post(), post());
    let one = TTFT + ITL * (TOKENS - 1);
    assert!(sent.elapsed() >= one * 2, "{:?}", sent.elapsed());
    let done = sim.figures().await;
    assert_eq!(done, figures(0.0, 0.0, 0.0, 4.0, 0.0));
}

#[tokio::test]
async fn without_slots_there_is_no_metrics_page() {
    let sim = Sim::start(None).await;
    let (status, _, _) = sim.get("/metrics").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// Awaits four futures concurrently.
async fn futures_join4<T>(
    a: impl Future<Output = T>,
    b: impl Future<Output = T>,
    c: impl Future<Output = T>,
    d: impl Future<Output = T>,
) -> Vec<T> {
    let (a, b, c, d) = tokio::join!(a, b, c, d);
    vec![a, b, c, d]
}
