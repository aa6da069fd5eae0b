//! The load generator: sends completion requests to one target (the
//! simulator itself, or a proxy in front of it) and measures what the client
//! sees, chunk by chunk.
//!
//! Two ways to send:
//! - **closed loop**: `concurrency` workers, each sending its next request
//!   when the last one ended (so `concurrency` is the number of streams in
//!   flight); workers start spread over a ramp so their chunks interleave
//!   instead of arriving in lockstep;
//! - **open loop**: arrivals at a constant or Poisson rate, each timed from
//!   its *intended* send time. A stall in the target delays responses, not
//!   the schedule, and the time the request waited for a late scheduler
//!   counts in its latency, so coordinated omission cannot hide stalls.
//!
//! Every clock reading is `CLOCK_MONOTONIC` ([`mono_ns`]), the clock the
//! simulator stamps each chunk with (`"sim_sent_ns"`), so the one-way latency
//! of each chunk is exact. Latencies go into HDR histograms (nanoseconds, 3
//! significant digits).
//!
//! Requests whose intended send time falls in the warm-up are sent with
//! `"model":"warmup"`, measured ones with `"model":"bench"`, so the proxy's
//! own per-model metrics cover exactly the requests the client measured.
//! Every request carries `x-request-id: bench-<n>` (`n` counts the leg's
//! requests, fixed width so every leg sends the same number of bytes): the
//! client's TTFT of each measured stream is kept by that number, to be
//! paired with the proxy's access-log line of the same request.
//! Chunks count as measured when they arrive after the warm-up. Fidelity is
//! counted over every request, warm-up included, to match the simulator's
//! totals.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use hdrhistogram::Histogram;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::task::JoinSet;
use tokio::time::Instant;

use sim::stamp::{Fnv64, mono_ns, read_stamp};

use crate::tls::Connector;

/// The model name of measured requests (warm-up ones use `warmup`).
pub const MEASURED_MODEL: &str = "bench";

/// The prefix of every request's `x-request-id`; the rest is its number.
pub const REQUEST_ID_PREFIX: &str = "bench-";

/// How requests are sent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arrivals {
    /// `concurrency` workers, each sending back to back.
    Closed { concurrency: usize },
    /// `rate` requests per second, evenly spaced or Poisson.
    Open { rate: f64, poisson: bool },
}

/// One leg's load.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// `http://host:port` of the target, or `https://` with `tls`.
    pub base: String,
    /// The TLS client of an `https` target (`--tls`); the connections are
    /// kept alive as plain ones are.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    pub arrivals: Arrivals,
    /// Streamed (SSE) or one JSON body.
    pub streamed: bool,
    /// `x-sim-*` schedule of every request.
    pub ttft_ms: u64,
    pub itl_ms: u64,
    pub tokens: u32,
    /// Discarded first part of the leg.
    pub warmup: Duration,
    /// Measured part of the leg, after the warm-up.
    pub duration: Duration,
    /// Closed loop: worker `i` starts at `i * ramp / concurrency`.
    pub ramp: Duration,
    /// After the last stream: how long the proxy's RSS is watched for the
    /// memory it gives back.
    pub settle: Duration,
}

impl Scenario {
    /// How long one response takes at the simulator.
    fn response_time(&self) -> Duration {
        Duration::from_millis(self.ttft_ms + self.itl_ms * u64::from(self.tokens))
    }
}

/// Proof that the bytes arrived as the simulator sent them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Fidelity {
    /// Responses received to their end with status 200.
    pub responses: u64,
    /// Body frames as the client's HTTP stack delivered them.
    pub frames: u64,
    /// SSE events (one per simulator frame).
    pub events: u64,
    pub bytes: u64,
    /// Wrapping sum of each body's FNV-1a fingerprint.
    pub hash_sum: u64,
    /// Frames that carried more than one event (coalesced on the way).
    pub merged_frames: u64,
    /// Frames that ended inside an event (split on the way).
    pub split_frames: u64,
}

/// Everything one leg measured.
#[derive(Debug, Clone)]
pub struct LoadResult {
    /// Requests sent or scheduled to be sent (warm-up included).
    pub sent: u64,
    /// Requests that failed: connection errors, non-200 statuses, body
    /// errors, or not finished within the drain time.
    pub errors: u64,
    /// Measured requests that completed.
    pub measured_requests: u64,
    /// Measured chunks (stamped events received after the warm-up).
    pub measured_chunks: u64,
    /// Time to first token from the intended send time (measured requests).
    pub ttft: Histogram<u64>,
    /// Time to first token of each measured stream from the moment the
    /// request was handed to the HTTP client (to compare with the proxy's
    /// own TTFT), by the number in its `x-request-id`, in nanoseconds.
    /// Numbers restart with each run, so this is paired with the proxy's
    /// log per run and not merged.
    pub ttft_by_request: Vec<(u64, u64)>,
    /// One-way latency of each stamped event: receipt minus `sim_sent_ns`.
    pub chunk_latency: Histogram<u64>,
    /// `|client gap - simulator gap|` between consecutive token events.
    pub gap_distortion: Histogram<u64>,
    /// Non-streamed: end of body minus intended send time.
    pub e2e: Histogram<u64>,
    pub fidelity: Fidelity,
    /// Stamped events by the millisecond of the measured window in which
    /// the simulator sent them: the offered load's shape (rounds' windows
    /// concatenated when merged).
    pub sent_per_ms: Vec<u32>,
    /// Wall time of the measured window, seconds.
    pub measured_seconds: f64,
    /// The target terminated TLS (`--tls`).
    pub tls: bool,
    /// Connections the client opened (warm-up included), and the TLS
    /// handshakes among them.
    pub connections: u64,
    pub tls_handshakes: u64,
    /// What the TLS handshakes negotiated (`<version> <suite> <group>`);
    /// none for a plain target.
    pub tls_negotiated: Option<String>,
}

impl LoadResult {
    /// Empty results; histograms in nanoseconds, 1 ns to 10 min, 3
    /// significant digits.
    pub fn empty() -> Result<Self, hdrhistogram::CreationError> {
        let histogram = Histogram::<u64>::new_with_bounds(1, 600_000_000_000, 3)?;
        let histogram = || Histogram::new_from(&histogram);
        Ok(Self {
            sent: 0,
            errors: 0,
            measured_requests: 0,
            measured_chunks: 0,
            ttft: histogram(),
            ttft_by_request: Vec::new(),
            chunk_latency: histogram(),
            gap_distortion: histogram(),
            e2e: histogram(),
            fidelity: Fidelity::default(),
            sent_per_ms: Vec::new(),
            measured_seconds: 0.0,
            tls: false,
            connections: 0,
            tls_handshakes: 0,
            tls_negotiated: None,
        })
    }

    /// Adds another leg's results (rounds of the same leg).
    pub fn merge(&mut self, other: &LoadResult) {
        self.sent += other.sent;
        self.errors += other.errors;
        self.measured_requests += other.measured_requests;
        self.measured_chunks += other.measured_chunks;
        for (mine, theirs) in [
            (&mut self.ttft, &other.ttft),
            (&mut self.chunk_latency, &other.chunk_latency),
            (&mut self.gap_distortion, &other.gap_distortion),
            (&mut self.e2e, &other.e2e),
        ] {
            // Same bounds on both sides: adding cannot fail.
            let _ = mine.add(theirs);
        }
        let f = &mut self.fidelity;
        let o = &other.fidelity;
        f.responses += o.responses;
        f.frames += o.frames;
        f.events += o.events;
        f.bytes += o.bytes;
        f.hash_sum = f.hash_sum.wrapping_add(o.hash_sum);
        f.merged_frames += o.merged_frames;
        f.split_frames += o.split_frames;
        self.sent_per_ms.extend_from_slice(&other.sent_per_ms);
        self.measured_seconds += other.measured_seconds;
        self.tls |= other.tls;
        self.connections += other.connections;
        self.tls_handshakes += other.tls_handshakes;
        if self.tls_negotiated.is_none() {
            self.tls_negotiated.clone_from(&other.tls_negotiated);
        }
    }
}

type HttpClient = Client<Connector, Full<Bytes>>;

/// Shared by every request task of one leg.
struct Run {
    client: HttpClient,
    scenario: Scenario,
    body_measured: Bytes,
    body_warmup: Bytes,
    /// Mono ns: end of the warm-up and end of the measured window.
    measure_from: u64,
    measure_until: u64,
    /// The number of the next request's `x-request-id`.
    next_id: AtomicU64,
    result: Mutex<LoadResult>,
}

/// A clock reading in nanoseconds turned into a tokio instant, for sleeping.
struct Timebase {
    instant: Instant,
    ns: u64,
}

impl Timebase {
    fn now() -> Self {
        Self {
            instant: Instant::now(),
            ns: mono_ns(),
        }
    }

    fn at(&self, ns: u64) -> Instant {
        self.instant + Duration::from_nanos(ns.saturating_sub(self.ns))
    }
}

/// Runs one leg against `scenario.base` and returns what it measured.
pub async fn run(scenario: &Scenario) -> Result<LoadResult, hdrhistogram::CreationError> {
    let connector = Connector::new(scenario.tls.clone());
    let connections = connector.stats.clone();
    let client: HttpClient = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(usize::MAX)
        .pool_idle_timeout(Duration::from_secs(30))
        .build(connector);
    let request_body = |model: &str| {
        let stream = if scenario.streamed {
            r#""stream":true,"stream_options":{"include_usage":true},"#
        } else {
            r#""stream":false,"#
        };
        Bytes::from(format!(
            r#"{{"model":"{model}",{stream}"messages":[{{"role":"user","content":"Say something."}}]}}"#
        ))
    };
    let base = Timebase::now();
    // A little slack so the first arrivals are not already late.
    let start = base.ns + 5_000_000;
    let measure_from = start + scenario.warmup.as_nanos() as u64;
    let measure_until = measure_from + scenario.duration.as_nanos() as u64;
    let run = Arc::new(Run {
        client,
        scenario: scenario.clone(),
        body_measured: request_body(MEASURED_MODEL),
        body_warmup: request_body("warmup"),
        measure_from,
        measure_until,
        next_id: AtomicU64::new(0),
        result: Mutex::new(LoadResult {
            sent_per_ms: vec![0; scenario.duration.as_millis() as usize],
            ..LoadResult::empty()?
        }),
    });

    let mut tasks = JoinSet::new();
    match scenario.arrivals {
        Arrivals::Closed { concurrency } => {
            let concurrency = concurrency.max(1);
            let step = scenario.ramp.as_nanos() as u64 / concurrency as u64;
            for i in 0..concurrency {
                let run = run.clone();
                let first = start + step * i as u64;
                let first_at = base.at(first);
                tasks.spawn(async move {
                    tokio::time::sleep_until(first_at).await;
                    loop {
                        let intended = mono_ns();
                        if intended >= run.measure_until {
                            break;
                        }
                        count_sent(&run);
                        one_request(&run, intended).await;
                    }
                });
            }
        }
        Arrivals::Open { rate, poisson } => {
            let mean_gap = 1e9 / rate.max(1e-3);
            let mut next = start as f64;
            let rng = fastrand::Rng::with_seed(0x7031);
            let mut rng = rng;
            while (next as u64) < measure_until {
                let intended = next as u64;
                tokio::time::sleep_until(base.at(intended)).await;
                let run = run.clone();
                count_sent(&run);
                tasks.spawn(async move { one_request(&run, intended).await });
                // Reap finished tasks as we go, so the set stays small.
                while tasks.try_join_next().is_some() {}
                next += if poisson {
                    // Exponential gaps: -ln(U) * mean, U in (0, 1].
                    -(1.0 - rng.f64()).ln() * mean_gap
                } else {
                    mean_gap
                };
            }
        }
    }

    // Let the requests in flight finish; what is still running after the
    // drain time counts as an error.
    let drain = scenario.response_time() + Duration::from_secs(5);
    let deadline = base.at(measure_until) + drain;
    while !tasks.is_empty() {
        match tokio::time::timeout_at(deadline, tasks.join_next()).await {
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(_) => {
                let left = tasks.len() as u64;
                tasks.abort_all();
                if let Ok(mut r) = run.result.lock() {
                    r.errors += left;
                }
                break;
            }
        }
    }
    let mut result = match run.result.lock() {
        Ok(r) => r.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    };
    result.measured_seconds = scenario.duration.as_secs_f64();
    result.tls = scenario.tls.is_some();
    result.connections = connections.connections.load(Ordering::Relaxed);
    result.tls_handshakes = connections.handshakes.load(Ordering::Relaxed);
    result.tls_negotiated = connections.negotiated.lock().ok().and_then(|n| n.clone());
    Ok(result)
}

/// One request and what it saw; folded into the leg's result at each
/// event.
struct Stream {
    /// The number in the request's `x-request-id`.
    id: u64,
    /// When it was meant to be sent (`CLOCK_MONOTONIC`, ns): its TTFT and
    /// end-to-end latency count from there, so a late scheduler shows in them.
    intended: u64,
    /// When it was handed to the HTTP client: the TTFT compared with the
    /// proxy's own counts from there.
    sent: u64,
    /// Whether its intended send time falls in the measured window.
    measured: bool,
    hash: Fnv64,
    /// Bytes of an event not yet complete (split across frames).
    pending: Vec<u8>,
    /// Receipt and stamp of the previous token event.
    prev_token: Option<(u64, u64)>,
    first_token: bool,
}

/// Counts a request as sent when it is scheduled, so that one the runtime
/// never got to (and the drain then cancelled) is both sent and an error.
fn count_sent(run: &Run) {
    if let Ok(mut r) = run.result.lock() {
        r.sent += 1;
    }
}

async fn one_request(run: &Run, intended: u64) {
    let measured = intended >= run.measure_from && intended < run.measure_until;
    let s = &run.scenario;
    let body = if measured {
        run.body_measured.clone()
    } else {
        run.body_warmup.clone()
    };
    let id = run.next_id.fetch_add(1, Ordering::Relaxed);
    let request = Request::post(format!("{}/v1/chat/completions", s.base))
        .header("content-type", "application/json")
        .header("x-request-id", format!("{REQUEST_ID_PREFIX}{id:010}"))
        .header("x-sim-stamp", "1")
        .header("x-sim-ttft-ms", s.ttft_ms)
        .header("x-sim-itl-ms", s.itl_ms)
        .header("x-sim-tokens", s.tokens)
        .body(Full::new(body));
    let error = || {
        if let Ok(mut r) = run.result.lock() {
            r.errors += 1;
        }
    };
    let Ok(request) = request else {
        return error();
    };
    let sent = mono_ns();
    let response = match run.client.request(request).await {
        Ok(response) => response,
        Err(e) => {
            tracing::debug!(error = %e, "bench: request failed");
            return error();
        }
    };
    if response.status() != StatusCode::OK {
        return error();
    }
    let mut body = response.into_body();
    let mut stream = Stream {
        id,
        intended,
        sent,
        measured,
        hash: Fnv64::default(),
        pending: Vec::new(),
        prev_token: None,
        first_token: false,
    };
    while let Some(frame) = body.frame().await {
        let now = mono_ns();
        let Ok(frame) = frame else {
            return error();
        };
        let Some(data) = frame.data_ref() else {
            continue;
        };
        let Ok(mut r) = run.result.lock() else {
            return;
        };
        r.fidelity.frames += 1;
        r.fidelity.bytes += data.len() as u64;
        stream.hash.update(data);
        if !s.streamed {
            stream.pending.extend_from_slice(data);
            continue;
        }
        stream.on_frame(run, &mut r, data, now);
    }
    let now = mono_ns();
    let Ok(mut r) = run.result.lock() else {
        return;
    };
    r.fidelity.responses += 1;
    r.fidelity.hash_sum = r.fidelity.hash_sum.wrapping_add(stream.hash.value());
    if !s.streamed {
        r.fidelity.events += 1;
        let stamp = read_stamp(&stream.pending);
        if let Some(stamp) = stamp {
            count_offered(run, &mut r, stamp);
        }
        if now >= run.measure_from
            && let Some(stamp) = stamp
        {
            record(&mut r.chunk_latency, now.saturating_sub(stamp));
            r.measured_chunks += 1;
        }
        if stream.measured {
            record(&mut r.e2e, now.saturating_sub(stream.intended));
        }
    } else if !stream.pending.is_empty() {
        // The body ended inside an event: it was cut, not just split.
        r.errors += 1;
        return;
    }
    if stream.measured {
        r.measured_requests += 1;
    }
}

impl Stream {
    /// Frames one body frame, received at `now`, into events and measures
    /// each.
    fn on_frame(&mut self, run: &Run, r: &mut LoadResult, data: &[u8], now: u64) {
        self.pending.extend_from_slice(data);
        let mut events = 0u64;
        let mut from = 0;
        while let Some(end) = memchr::memmem::find(&self.pending[from..], b"\n\n") {
            let event = &self.pending[from..from + end];
            from += end + 2;
            events += 1;
            let stamp = read_stamp(event);
            if let Some(stamp) = stamp {
                count_offered(run, r, stamp);
            }
            let token = memchr::memmem::find(event, b"\":\" tok").is_some();
            if let Some(stamp) = stamp
                && now >= run.measure_from
                && now < run.measure_until
            {
                record(&mut r.chunk_latency, now.saturating_sub(stamp));
                r.measured_chunks += 1;
            }
            if !token {
                continue;
            }
            if !self.first_token {
                self.first_token = true;
                if self.measured {
                    record(&mut r.ttft, now.saturating_sub(self.intended));
                    r.ttft_by_request
                        .push((self.id, now.saturating_sub(self.sent)));
                }
            }
            if let (Some(stamp), Some((prev_now, prev_stamp))) = (stamp, self.prev_token)
                && now >= run.measure_from
                && now < run.measure_until
            {
                let client_gap = now.saturating_sub(prev_now) as i128;
                let sim_gap = stamp.saturating_sub(prev_stamp) as i128;
                record(
                    &mut r.gap_distortion,
                    (client_gap - sim_gap).unsigned_abs() as u64,
                );
            }
            if let Some(stamp) = stamp {
                self.prev_token = Some((now, stamp));
            }
        }
        self.pending.drain(..from);
        r.fidelity.events += events;
        if events > 1 {
            r.fidelity.merged_frames += 1;
        }
        // Each cut is counted once, on the frame that ends inside the event.
        if !self.pending.is_empty() {
            r.fidelity.split_frames += 1;
        }
    }
}

/// Counts a stamped event in the millisecond of the measured window in
/// which the simulator sent it (events sent outside the window are not).
fn count_offered(run: &Run, r: &mut LoadResult, stamp: u64) {
    let ms = stamp.checked_sub(run.measure_from).map(|ns| ns / 1_000_000);
    if let Some(bin) = ms.and_then(|ms| r.sent_per_ms.get_mut(ms as usize)) {
        *bin += 1;
    }
}

fn record(h: &mut Histogram<u64>, ns: u64) {
    h.saturating_record(ns.max(1));
}
