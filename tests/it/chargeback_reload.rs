//! A GPU set's energy across reloads (docs/metrics.md, "Chargeback"): a
//! reload that widens `gpu_select`, then one that points `gpu_metrics` at
//! another exporter, each start every GPU's baseline afresh, so no GPU's
//! lifetime counter is ever charged; a real driver reset is counted as
//! one, and nothing else is.
//!
//! The pages' counters grow only while the test lets them (200 W a GPU),
//! and each change (a reload, a reset) is made while they stand still,
//! once the proxy has read them still twice: so the truth of each span is
//! the pages' own growth while running, whatever the scrapes' timing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokenmeter::app::{ConfigSource, Running};
use tokenmeter::config::{Config, Overrides};

use crate::common::*;

/// Watts each GPU draws while the counters run.
const WATTS: f64 = 200.0;

/// An exporter's GPUs: (`gpu`, `UUID`, counter at the start in mJ).
type Gpus = Vec<(&'static str, &'static str, f64)>;

/// The pages' shared clock: the seconds the counters have run, counting
/// only while running; and how many pages each exporter has served.
struct Clock {
    ran: Mutex<(f64, Option<Instant>)>,
    served: [AtomicUsize; 2],
}

impl Clock {
    fn seconds(&self) -> f64 {
        let (ran, since) = *self.ran.lock().unwrap();
        ran + since.map_or(0.0, |s| s.elapsed().as_secs_f64())
    }

    fn run(&self) {
        self.ran.lock().unwrap().1 = Some(Instant::now());
    }

    /// Stops the counters; the seconds they ran in all.
    fn stop(&self) -> f64 {
        let mut ran = self.ran.lock().unwrap();
        if let Some(since) = ran.1.take() {
            ran.0 += since.elapsed().as_secs_f64();
        }
        ran.0
    }
}

/// Serves exporter `which` of `gpus` on `clock`.
async fn exporter(which: usize, gpus: Arc<Mutex<Gpus>>, clock: Arc<Clock>) -> std::net::SocketAddr {
    serve_made(move || {
        let seconds = clock.seconds();
        clock.served[which].fetch_add(1, Ordering::SeqCst);
        let mut text = String::new();
        for (gpu, uuid, start) in gpus.lock().unwrap().iter() {
            let mj = start + WATTS * 1000.0 * seconds;
            text += &format!(
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu=\"{gpu}\",UUID=\"{uuid}\",Hostname=\"node\"}} {mj}\n"
            );
        }
        text
    })
    .await
}

/// Waits until exporter `which` has served two more pages: the proxy has
/// read the counters as they stand at least once after any scrape in
/// progress.
async fn read_twice(clock: &Clock, which: usize) {
    let from = clock.served[which].load(Ordering::SeqCst);
    while clock.served[which].load(Ordering::SeqCst) < from + 2 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn overrides() -> Overrides {
    Overrides {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        admin_listen: Some("127.0.0.1:0".parse().unwrap()),
        ..Default::default()
    }
}

fn route(sim: std::net::SocketAddr, page: std::net::SocketAddr, select: &str) -> String {
    format!(
        "scrape: {{interval: 100ms, timeout: 80ms}}\nroutes:\n  - name: chat\n    upstream: http://{sim}\n    gpu_metrics: http://{page}/metrics\n    gpu_select: {{gpu: [{select}]}}\n"
    )
}

/// The set's joules, energy resets and implausible samples now.
async fn energy(proxy: &Running) -> [f64; 3] {
    let (_, s) = scrape(proxy.admin_addr).await;
    let set = [("gpu_set", "chat")];
    [
        "llm_gpu_energy_joules_total",
        "tokenmeter_gpu_energy_resets_total",
        "tokenmeter_gpu_energy_implausible_samples_total",
    ]
    .map(|name| sum(&s, name, &set))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_widens_the_selection_or_moves_the_page_charges_no_lifetime_energy() {
    let clock = Arc::new(Clock {
        ran: Mutex::new((0.0, None)),
        served: Default::default(),
    });
    // Years of lifetime energy on every GPU: a baseline carried from one
    // selection or exporter to another would charge petajoules.
    let first = Arc::new(Mutex::new(vec![
        ("0", "GPU-a0", 4e15),
        ("1", "GPU-a1", 5e15),
        ("2", "GPU-a2", 6e15),
        ("3", "GPU-a3", 7e15),
    ]));
    let second = Arc::new(Mutex::new(vec![
        ("0", "GPU-b0", 8e15),
        ("1", "GPU-b1", 9e15),
    ]));
    let page_a = exporter(0, first.clone(), clock.clone()).await;
    let page_b = exporter(1, second.clone(), clock.clone()).await;
    let sim = start_sim(schedule(5, 5, 3)).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenmeter.yaml");
    std::fs::write(&path, route(sim, page_a, "\"0\", \"1\"")).unwrap();
    let config = Config::load(&path, &overrides()).unwrap();
    let source = ConfigSource {
        path: path.clone(),
        overrides: overrides(),
        watch: false,
    };
    let proxy = tokenmeter::app::start_with(config, Some(source), None)
        .await
        .unwrap();
    read_twice(&clock, 0).await;

    // Two GPUs of the first exporter, with a driver reset of one halfway.
    let mut truth = Vec::new();
    let mut ran = 0.0;
    let mut span = |gpus: f64, seconds: f64| {
        truth.push(WATTS * gpus * (seconds - ran));
        ran = seconds;
    };
    clock.run();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let seconds = clock.stop();
    read_twice(&clock, 0).await;
    // The reset: GPU 1's counter starts again from 0.
    first.lock().unwrap()[1].2 = -WATTS * 1000.0 * seconds;
    read_twice(&clock, 0).await;
    clock.run();
    tokio::time::sleep(Duration::from_millis(600)).await;
    span(2.0, clock.stop());
    read_twice(&clock, 0).await;
    let one = energy(&proxy).await;

    // Widened to all four.
    std::fs::write(&path, route(sim, page_a, "\"0\", \"1\", \"2\", \"3\"")).unwrap();
    proxy.reload().await.unwrap();
    read_twice(&clock, 0).await;
    clock.run();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    span(4.0, clock.stop());
    read_twice(&clock, 0).await;
    let two = energy(&proxy).await;

    // Another exporter's two GPUs.
    std::fs::write(&path, route(sim, page_b, "\"0\", \"1\"")).unwrap();
    proxy.reload().await.unwrap();
    read_twice(&clock, 1).await;
    clock.run();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    span(2.0, clock.stop());
    read_twice(&clock, 1).await;
    let three = energy(&proxy).await;

    let counted = [one[0], two[0] - one[0], three[0] - two[0]];
    for (i, (counted, truth)) in counted.iter().zip(&truth).enumerate() {
        assert!(*truth > 200.0, "span {i}: {truth} J");
        assert_near(*counted, *truth, 0.02, &format!("joules of span {i}"));
    }
    assert_eq!(one[1], 1.0, "the driver reset is counted");
    assert_eq!(three[1], 1.0, "and nothing else is a reset");
    assert_eq!(three[2], 0.0, "no implausible sample");
    proxy.stop().await;
}
