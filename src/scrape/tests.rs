//! The scraper against tiny servers on 127.0.0.1 that answer a page, or
//! fail in each way an endpoint can: down, refusing, not HTTP, an error
//! status, garbage, names nobody knows, hanging, and 100 MB.

// Panicking on unexpected input is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use telemetry::{GpuLabel, GpuSelector, Server};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::*;

const VLLM: &[u8] = include_bytes!("../../crates/telemetry/tests/data/vllm.prom");
const DCGM: &[u8] = include_bytes!("../../crates/telemetry/tests/data/dcgm-a100.prom");
/// The model of `VLLM`, on two engines: 12 + 9 running, 3 + 0 waiting.
const MODEL: &str = "meta-llama/Llama-3.1-8B-Instruct";
const MODEL_LOAD: f64 = 24.0;
const HUNDRED_MB: u64 = 100 * 1024 * 1024;
/// What any awaited event may take on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(30);

/// How the test server answers.
#[derive(Debug, Clone, Copy)]
enum Answer {
    /// `200` with this body and its length.
    Page(&'static [u8]),
    Status(u16),
    /// Accepts, then closes without a byte.
    Close,
    /// Bytes that are not an HTTP response.
    NotHttp,
    /// Reads the request and never answers.
    Hang,
    /// `200` and 100 MB: a line that looks like a sample and never ends,
    /// with its `Content-Length` declared or not (then the body ends when
    /// the connection closes).
    Endless {
        declared: bool,
    },
}

struct TestServer {
    addr: SocketAddr,
    answer: Arc<Mutex<Answer>>,
    /// Body bytes the server managed to hand to its socket.
    written: Arc<AtomicU64>,
    /// Connections the server has finished with.
    finished: watch::Receiver<u64>,
}

impl TestServer {
    async fn start(answer: Answer) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let answer = Arc::new(Mutex::new(answer));
        let written = Arc::new(AtomicU64::new(0));
        let (done, finished) = watch::channel(0);
        let done = Arc::new(done);
        {
            let answer = answer.clone();
            let written = written.clone();
            tokio::spawn(async move {
                loop {
                    let (socket, _) = listener.accept().await.unwrap();
                    let answer = *answer.lock().unwrap();
                    let written = written.clone();
                    let done = done.clone();
                    tokio::spawn(async move {
                        serve(socket, answer, &written).await;
                        done.send_modify(|n| *n += 1);
                    });
                }
            });
        }
        Self {
            addr,
            answer,
            written,
            finished,
        }
    }

    fn answer(&self, answer: Answer) {
        *self.answer.lock().unwrap() = answer;
    }

    fn url(&self) -> http::Uri {
        format!("http://{}/metrics", self.addr).parse().unwrap()
    }
}

async fn serve<S>(mut socket: S, answer: Answer, written: &AtomicU64)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    if matches!(answer, Answer::Close) {
        return;
    }
    let mut head = Vec::new();
    let mut buf = [0; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match socket.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let reply = |status: &str, body: &[u8]| {
        let mut reply = format!(
            "HTTP/1.1 {status}\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        reply.extend_from_slice(body);
        reply
    };
    let bytes = match answer {
        Answer::Page(body) => reply("200 OK", body),
        Answer::Status(code) => reply(&format!("{code} Oops"), b"no metrics here\n"),
        Answer::NotHttp => b"\x16\x03\x01 this is no HTTP response\r\n\r\n".to_vec(),
        Answer::Hang => {
            std::future::pending::<()>().await;
            return;
        }
        Answer::Close => return,
        Answer::Endless { declared } => {
            let length = if declared {
                format!("content-length: {HUNDRED_MB}\r\n")
            } else {
                String::new()
            };
            let head = format!("HTTP/1.1 200 OK\r\n{length}connection: close\r\n\r\n");
            if socket.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            let mut chunk = vec![b'a'; 64 * 1024];
            chunk[..38].copy_from_slice(b"vllm:num_requests_running{model_name=\"");
            let mut sent = 0;
            while sent < HUNDRED_MB {
                if socket.write_all(&chunk).await.is_err() {
                    return;
                }
                sent += chunk.len() as u64;
                written.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                chunk[..38].fill(b'a');
            }
            return;
        }
    };
    let _ = socket.write_all(&bytes).await;
}

fn target(route: &str, kind: Kind, url: http::Uri) -> Target {
    Target {
        route: route.to_owned(),
        also: Vec::new(),
        kind,
        shown_url: url.to_string(),
        url,
        interval: Duration::from_millis(1000),
        timeout: Duration::from_millis(500),
        max_body: DEFAULT_MAX_BODY,
        tls_roots: None,
        ledger: None,
    }
}

/// Waits until the target at `index` has ended `n` scrapes.
async fn attempts(readings: &Readings, index: usize, n: u64) {
    let mut attempts = readings.slots[index].attempts();
    tokio::time::timeout(PATIENCE, attempts.wait_for(|a| *a >= n))
        .await
        .expect("the scrapes did not happen in time")
        .unwrap();
}

fn attempted(readings: &Readings, index: usize) -> u64 {
    *readings.slots[index].attempts().borrow()
}

/// The failures of `route`'s target of `page`, by reason, the zeros left
/// out.
fn failures(readings: &Readings, route: &str, page: Page) -> Vec<(Reason, u64)> {
    readings
        .failures()
        .into_iter()
        .filter(|f| &*f.route == route && f.page == page && f.count > 0)
        .map(|f| (f.reason, f.count))
        .collect()
}

/// A port nothing listens on (it was just closed).
async fn closed_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap()
}

#[tokio::test]
async fn an_engine_page_is_read_and_its_load_served() {
    let server = TestServer::start(Answer::Page(VLLM)).await;
    let shutdown = CancellationToken::new();
    let scraper =
        Scraper::start(vec![target("chat", Kind::Engine, server.url())], &shutdown).unwrap();
    let readings = scraper.readings();
    attempts(readings, 0, 1).await;

    assert_eq!(readings.engine_load("chat", MODEL), Some(MODEL_LOAD));
    // The page names its model: another model, or another route, has none.
    assert_eq!(readings.engine_load("chat", "other"), None);
    assert_eq!(readings.engine_load("other", MODEL), None);
    let snapshot = readings.snapshot();
    assert_eq!(snapshot.len(), 1);
    assert_eq!(
        (&*snapshot[0].route, snapshot[0].page),
        ("chat", Page::Engine)
    );
    let Reading::Engine(engine) = &snapshot[0].latest.reading else {
        panic!("not an engine reading: {snapshot:?}");
    };
    assert_eq!(engine.server, Some(Server::Vllm));
    assert!(readings.latest("chat", Page::Gpu).is_none());
    // Every reason is listed, at zero.
    let counts = readings.failures();
    assert_eq!(counts.len(), Reason::ALL.len());
    assert!(counts.iter().all(|f| f.count == 0), "{counts:?}");
}

#[tokio::test]
async fn a_dcgm_page_is_read_for_the_selected_gpus() {
    let server = TestServer::start(Answer::Page(DCGM)).await;
    let shutdown = CancellationToken::new();
    let selector = GpuSelector::all().with(GpuLabel::Gpu, ["0".to_owned(), "1".to_owned()]);
    let scraper = Scraper::start(
        vec![target("chat", Kind::Gpu(selector), server.url())],
        &shutdown,
    )
    .unwrap();
    let readings = scraper.readings();
    attempts(readings, 0, 1).await;

    let latest = readings.latest("chat", Page::Gpu).expect("a fresh reading");
    let Reading::Gpu(gpus) = &latest.reading else {
        panic!("not a GPU reading: {latest:?}");
    };
    assert_eq!(gpus.count, 2);
    assert_eq!(gpus.utilization_percent.max, Some(97.0));
    assert_eq!(gpus.utilization_percent.mean, Some(90.0));
    assert_eq!(readings.engine_load("chat", MODEL), None);
}

#[tokio::test]
async fn each_failure_is_counted_under_its_reason_and_serves_nothing() {
    let down = closed_port().await;
    let cases = [
        ("refusing", Answer::Close, Reason::Http),
        ("not_http", Answer::NotHttp, Reason::Http),
        ("error", Answer::Status(503), Reason::Status),
        (
            "garbage",
            Answer::Page(b"\x00\xff\xfe garbage {{{ not a metric\n"),
            Reason::Parse,
        ),
        (
            "unknown",
            Answer::Page(b"# TYPE my_app_requests counter\nmy_app_requests 7\n"),
            Reason::Unrecognized,
        ),
        ("hanging", Answer::Hang, Reason::Timeout),
    ];
    // Each endpoint is scraped as an engine and as a DCGM exporter: both
    // fail alike, each under its own source.
    let mut servers = Vec::new();
    let mut expected = vec![(
        "down",
        format!("http://{down}/metrics").parse().unwrap(),
        Reason::Connect,
    )];
    for (route, answer, reason) in cases {
        let server = TestServer::start(answer).await;
        expected.push((route, server.url(), reason));
        servers.push(server);
    }
    let targets = expected
        .iter()
        .flat_map(|(route, url, _)| {
            [Kind::Engine, Kind::Gpu(GpuSelector::all())]
                .map(|kind| target(route, kind, url.clone()))
        })
        .collect();
    let shutdown = CancellationToken::new();
    let scraper = Scraper::start(targets, &shutdown).unwrap();
    let readings = scraper.readings();

    let sources = expected.iter().flat_map(|(route, _, reason)| {
        [Page::Engine, Page::Gpu].map(|source| (*route, source, *reason))
    });
    for (index, (route, source, reason)) in sources.enumerate() {
        attempts(readings, index, 2).await;
        let counts = failures(readings, route, source);
        assert_eq!(counts.len(), 1, "{route} {source:?}: {counts:?}");
        assert_eq!(counts[0].0, reason, "{route} {source:?}");
        // Counted once per scrape: every scrape so far failed alike (the
        // scrape that is now under way may have been counted already).
        let n = counts[0].1;
        assert!(
            (2..=attempted(readings, index) + 1).contains(&n),
            "{route} {source:?}: {n}"
        );
    }
    assert!(readings.snapshot().is_empty());
    assert_eq!(readings.engine_load("unknown", MODEL), None);
}

#[tokio::test]
async fn a_100_mb_answer_costs_only_the_bound() {
    const BOUND: usize = 1024 * 1024;
    // A declared length over the bound is refused from the head; an
    // undeclared one is read up to the bound, then the connection closes.
    let declared = TestServer::start(Answer::Endless { declared: true }).await;
    let undeclared = TestServer::start(Answer::Endless { declared: false }).await;
    let mut targets = vec![
        target("declared", Kind::Engine, declared.url()),
        target("undeclared", Kind::Engine, undeclared.url()),
    ];
    for target in &mut targets {
        target.max_body = BOUND;
        // Long enough for a busy machine to read 1 MiB, so that the
        // failure is the size and not the time.
        target.interval = Duration::from_secs(20);
        target.timeout = Duration::from_secs(10);
    }
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let scraper = Scraper::start(targets, &shutdown).unwrap();
    let readings = scraper.readings();
    for (index, (route, server)) in [("declared", &declared), ("undeclared", &undeclared)]
        .into_iter()
        .enumerate()
    {
        attempts(readings, index, 1).await;
        assert_eq!(
            failures(readings, route, Page::Engine),
            [(Reason::TooLarge, 1)]
        );
        // The server stops when its writes fail, the scraper having closed
        // the connection: what it wrote is the bound and what the two
        // sockets' buffers held, not 100 MB.
        let mut finished = server.finished.clone();
        tokio::time::timeout(PATIENCE, finished.wait_for(|n| *n >= 1))
            .await
            .expect("the server kept writing")
            .unwrap();
        let written = server.written.load(Ordering::Relaxed);
        assert!(written < HUNDRED_MB / 4, "{route}: {written} bytes written");
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(readings.snapshot().is_empty());
}

#[tokio::test]
async fn a_reading_goes_stale_and_is_removed_not_frozen() {
    let server = TestServer::start(Answer::Page(VLLM)).await;
    let mut chat = target("chat", Kind::Engine, server.url());
    chat.interval = Duration::from_millis(200);
    chat.timeout = Duration::from_millis(150);
    let interval = chat.interval;
    let shutdown = CancellationToken::new();
    let scraper = Scraper::start(vec![chat], &shutdown).unwrap();
    let readings = scraper.readings();
    attempts(readings, 0, 1).await;
    assert!(readings.latest("chat", Page::Engine).is_some());

    server.answer(Answer::Close);
    let failed_from = attempted(readings, 0) + 1;
    attempts(readings, 0, failed_from + 1).await;
    assert!(!failures(readings, "chat", Page::Engine).is_empty());
    // A scrape under way when the answer changed may have read it again.
    let read_at = readings.slots[0].held().expect("not yet stale").at;
    // Served for three intervals after it was read, then no more.
    let bound = read_at + interval * STALE_AFTER_INTERVALS;
    assert_eq!(
        readings.engine_load_at("chat", MODEL, bound),
        Some(MODEL_LOAD)
    );
    assert_eq!(readings.snapshot_at(bound).len(), 1);
    let past = bound + Duration::from_millis(1);
    assert_eq!(readings.engine_load_at("chat", MODEL, past), None);
    assert!(readings.snapshot_at(past).is_empty());

    // On the clock: gone once stale, and dropped from the store by the
    // next failure.
    let mut attempt = attempted(readings, 0);
    while Instant::now() <= bound {
        attempt += 1;
        attempts(readings, 0, attempt).await;
    }
    assert_eq!(readings.engine_load("chat", MODEL), None);
    attempts(readings, 0, attempt + 1).await;
    assert!(readings.slots[0].held().is_none());

    // And back when the endpoint is.
    server.answer(Answer::Page(VLLM));
    let mut attempt = attempted(readings, 0);
    while readings.engine_load("chat", MODEL).is_none() {
        attempt += 1;
        attempts(readings, 0, attempt).await;
    }
    assert_eq!(readings.engine_load("chat", MODEL), Some(MODEL_LOAD));
}

/// Waits until no task holds the store, only `holders` readers: every
/// task has ended.
async fn tasks_ended(readings: &Readings, holders: usize) {
    tokio::time::timeout(PATIENCE, async {
        while Arc::strong_count(&readings.slots) > holders {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the scraping tasks did not stop");
}

#[tokio::test]
async fn the_tasks_stop_when_the_scraper_is_dropped_or_shut_down() {
    let server = TestServer::start(Answer::Page(VLLM)).await;
    let shutdown = CancellationToken::new();
    let scraper =
        Scraper::start(vec![target("chat", Kind::Engine, server.url())], &shutdown).unwrap();
    let readings = scraper.readings().clone();
    attempts(&readings, 0, 1).await;
    drop(scraper);
    tasks_ended(&readings, 1).await;
    // What it read stays readable until it is stale.
    assert_eq!(readings.engine_load("chat", MODEL), Some(MODEL_LOAD));

    let scraper =
        Scraper::start(vec![target("chat", Kind::Engine, server.url())], &shutdown).unwrap();
    let readings = scraper.readings().clone();
    shutdown.cancel();
    // The scraper's own readings and this clone.
    tasks_ended(&readings, 2).await;
    drop(scraper);
}

#[tokio::test]
async fn targets_that_cannot_be_scraped_are_refused_at_start() {
    let shutdown = CancellationToken::new();
    let url: http::Uri = "http://127.0.0.1:9/metrics".parse().unwrap();
    let refused = |targets: Vec<Target>| match Scraper::start(targets, &shutdown) {
        Ok(_) => panic!("started"),
        Err(e) => e.to_string(),
    };

    let mut slow = target("chat", Kind::Engine, url.clone());
    slow.timeout = slow.interval;
    assert!(refused(vec![slow]).contains("timeout"));
    let twice = vec![
        target("chat", Kind::Engine, url.clone()),
        target("chat", Kind::Engine, url.clone()),
    ];
    assert!(refused(twice).contains("two engine targets"));

    let mut ftp = target(
        "chat",
        Kind::Engine,
        "ftp://user:secret@host/m".parse().unwrap(),
    );
    ftp.shown_url = "ftp://***@host/m".to_owned();
    let message = refused(vec![ftp]);
    assert!(message.contains("ftp://***@host/m"), "{message}");
    assert!(!message.contains("secret"), "{message}");

    // One engine and one GPU target per route is fine.
    let both = vec![
        target("chat", Kind::Engine, url.clone()),
        target("chat", Kind::Gpu(GpuSelector::all()), url),
    ];
    assert!(Scraper::start(both, &shutdown).is_ok());
}

#[test]
fn a_failure_removes_a_stale_reading_and_keeps_a_fresh_one() {
    let interval = Duration::from_secs(5);
    let slot = store::TargetState::new("chat", Page::Engine, interval);
    let at = Instant::now();
    slot.store(Latest {
        at,
        reading: Reading::Engine(telemetry::EngineReading::default()),
    });
    slot.fail(Reason::Timeout, at + interval);
    assert!(slot.fresh(at + interval).is_some());
    slot.fail(Reason::Timeout, at + interval * 4);
    assert!(slot.held().is_none(), "removed, not only hidden");
}

#[test]
fn each_reading_of_a_route_with_gpus_is_told_to_its_ledger() {
    let interval = Duration::from_secs(5);
    let ledger = Arc::new(slo::ledger::Ledger::<u8>::new(
        Instant::now(),
        slo::ledger::Gpus::Scraped,
        None,
    ));
    let gpu = store::TargetState::new("chat", Page::Gpu, interval).feeding(Some(ledger.clone()));
    let engine =
        store::TargetState::new("chat", Page::Engine, interval).feeding(Some(ledger.clone()));
    let at = Instant::now();
    // `count` GPUs whose counters each read `mj`.
    let gpus = |count, mj| {
        Reading::Gpu(telemetry::GpuAggregate {
            count,
            energy: (0..count)
                .map(|i| telemetry::GpuEnergy {
                    id: format!("GPU-{i}"),
                    energy_millijoules: Some(mj),
                    power_watts: None,
                })
                .collect(),
            ..telemetry::GpuAggregate::default()
        })
    };
    gpu.store(Latest {
        at,
        reading: gpus(4, 0.0),
    });
    // 4 GPUs for 5 s; then 2 of them, each at 200 W (2,000 J over the
    // 5 s before); the 2 that left are no reset.
    gpu.store(Latest {
        at: at + interval,
        reading: gpus(2, 1_000_000.0),
    });
    // The engine runs 3 and queues 1 of two models.
    let model = |running, waiting| telemetry::ModelReading {
        model: None,
        figures: telemetry::EngineFigures {
            running: Some(running),
            waiting,
            ..telemetry::EngineFigures::default()
        },
    };
    engine.store(Latest {
        at: at + interval,
        reading: Reading::Engine(telemetry::EngineReading {
            models: vec![model(2.0, Some(1.0)), model(1.0, None)],
            ..telemetry::EngineReading::default()
        }),
    });
    // Nothing of this replica's in flight, the engine busy: the other
    // replicas' time.
    let t = ledger.totals(at + interval * 2);
    assert_eq!(t.total.gpu_seconds, 30.0, "{t:?}");
    assert_eq!(t.total.joules, 2_000.0, "{t:?}");
    assert_eq!(t.energy_resets, 0, "{t:?}");
    assert_eq!(t.other_replicas.gpu_seconds, 10.0, "{t:?}");
    assert_eq!(t.idle.gpu_seconds, 20.0, "{t:?}");
    // A reading that goes stale stops the time, as it stops `llm_gpus`.
    let t = ledger.totals(at + interval * 10);
    assert_eq!(t.total.gpu_seconds, 20.0 + 2.0 * 15.0, "{t:?}");
    let readings = Readings::new(Arc::from(vec![gpu]));
    let other = Readings::new(Arc::from(Vec::new()));
    assert_ne!(readings.id(), other.id());
}

#[test]
fn the_load_of_a_server_of_one_model_is_any_model_s_and_needs_both_figures() {
    use telemetry::{EngineFigures, EngineReading, ModelReading};
    let interval = Duration::from_secs(5);
    let at = Instant::now();
    let readings = |figures: EngineFigures| {
        let slot = store::TargetState::new("chat", Page::Engine, interval);
        slot.store(Latest {
            at,
            reading: Reading::Engine(EngineReading {
                server: Some(Server::Tgi),
                models: vec![ModelReading {
                    model: None,
                    figures,
                }],
                ..EngineReading::default()
            }),
        });
        Readings::new(Arc::from(vec![slot]))
    };
    let both = readings(EngineFigures {
        running: Some(3.0),
        waiting: Some(0.0),
        ..EngineFigures::default()
    });
    assert_eq!(both.engine_load_at("chat", "any", at), Some(3.0));
    let no_queue = readings(EngineFigures {
        running: Some(3.0),
        ..EngineFigures::default()
    });
    assert_eq!(no_queue.engine_load_at("chat", "any", at), None);
}

/// A self-signed certificate for `127.0.0.1` and its key.
fn self_signed() -> (
    rustls::pki_types::CertificateDer<'static>,
    rustls::pki_types::PrivateKeyDer<'static>,
) {
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let cert = made.cert.der().clone();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(made.signing_key.serialize_der()));
    (cert, key)
}

/// An HTTPS server answering `answer`, offering `h2` and `http/1.1`.
async fn tls_server(
    answer: Answer,
    cert: rustls::pki_types::CertificateDer<'static>,
    key: rustls::pki_types::PrivateKeyDer<'static>,
) -> http::Uri {
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert], key)
    .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(socket).await {
                    serve(tls, answer, &AtomicU64::new(0)).await;
                }
            });
        }
    });
    format!("https://{addr}/metrics").parse().unwrap()
}

#[tokio::test]
async fn https_is_verified_against_the_target_s_roots_and_spoken_in_http_1_1() {
    let (cert, key) = self_signed();
    let roots = vec![cert.to_vec()];
    let url = tls_server(Answer::Page(VLLM), cert, key).await;
    let plain = TestServer::start(Answer::Close).await;
    let mut trusted = target("trusted", Kind::Engine, url.clone());
    trusted.tls_roots = Some(roots.clone());
    // Without the roots, the web PKI's do not know the certificate.
    let untrusted = target("untrusted", Kind::Engine, url);
    // A handshake the server ends.
    let mut not_tls = target(
        "not_tls",
        Kind::Engine,
        format!("https://{}/metrics", plain.addr).parse().unwrap(),
    );
    not_tls.tls_roots = Some(roots);
    let shutdown = CancellationToken::new();
    let scraper = Scraper::start(vec![trusted, untrusted, not_tls], &shutdown).unwrap();
    let readings = scraper.readings();
    attempts(readings, 0, 1).await;
    assert_eq!(readings.engine_load("trusted", MODEL), Some(MODEL_LOAD));
    for (index, route) in [(1, "untrusted"), (2, "not_tls")] {
        attempts(readings, index, 1).await;
        assert_eq!(
            failures(readings, route, Page::Engine),
            [(Reason::Tls, 1)],
            "{route}"
        );
    }
}

/// Log lines, as the formatter writes them.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_failing_target_is_logged_once_per_episode_with_its_url_redacted() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    // The test's runtime runs every task on this thread. A second
    // dispatcher, held alive, makes tracing ask every live dispatcher about
    // a callsite that another test's thread registers first; with one, it
    // would ask only that thread's (none) and cache that nobody listens.
    let dispatch = tracing::Dispatch::new(subscriber);
    let _second = tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default());
    let _logging = tracing::dispatcher::set_default(&dispatch);
    tracing::callsite::rebuild_interest_cache();

    let server = TestServer::start(Answer::Close).await;
    let mut chat = target(
        "chat",
        Kind::Engine,
        format!("http://user:secret@{}/metrics?token=secret", server.addr)
            .parse()
            .unwrap(),
    );
    chat.shown_url = format!("http://***@{}/metrics?token=<redacted>", server.addr);
    chat.interval = Duration::from_millis(200);
    chat.timeout = Duration::from_millis(150);
    let shutdown = CancellationToken::new();
    let scraper = Scraper::start(vec![chat], &shutdown).unwrap();
    let readings = scraper.readings();
    attempts(readings, 0, 3).await;
    server.answer(Answer::Page(VLLM));
    let mut attempt = attempted(readings, 0);
    while readings.engine_load("chat", MODEL).is_none() {
        attempt += 1;
        attempts(readings, 0, attempt).await;
    }
    server.answer(Answer::Close);
    attempts(readings, 0, attempt + 2).await;
    drop(scraper);

    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    let failing: Vec<&&str> = lines
        .iter()
        .filter(|l| l.contains("scrape failing"))
        .collect();
    let recovered = lines
        .iter()
        .filter(|l| l.contains("scrape recovered"))
        .count();
    assert_eq!(failing.len(), 2, "{log}");
    assert_eq!(recovered, 1, "{log}");
    assert!(
        failing
            .iter()
            .all(|l| l.contains("WARN") && l.contains("reason=\"http\"")),
        "{log}"
    );
    assert!(log.contains("metrics?token=<redacted>"), "{log}");
    assert!(!log.contains("secret"), "{log}");
}
