//! The scenario: start-up, warm-up, the load with its kills, reloads, burst
//! and aborts, and the checks afterwards.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::Sample;
use tokio::time::{Instant, sleep, sleep_until, timeout};

use super::metrics::{admin_get, by_label, cumulative, decreases, scrape, total};
use super::processes::{Sim, configs, install, proc_figures, signal, start_proxy};
use super::requests::{Tally, burst_one, stream_one, verify};
use super::{BURST, CLIENTS, LOAD, RSS_SLACK_KIB, SCENARIO_TIMEOUT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_under_kills_reloads_bursts_and_aborts() {
    let phase = Phase::new();
    let finished = timeout(SCENARIO_TIMEOUT, scenario(&phase)).await;
    assert!(
        finished.is_ok(),
        "the chaos scenario did not finish within {SCENARIO_TIMEOUT:?}: {}",
        phase.now()
    );
}

/// Where the scenario is, so that a run past its timeout says where it
/// stopped.
struct Phase {
    start: Instant,
    at: Mutex<(&'static str, Duration)>,
}

impl Phase {
    fn new() -> Phase {
        Phase {
            start: Instant::now(),
            at: Mutex::new(("start-up", Duration::ZERO)),
        }
    }

    fn enter(&self, name: &'static str) {
        let since = self.start.elapsed();
        eprintln!("t={:.1}s (wall): {name}", since.as_secs_f64());
        *self.at.lock().unwrap() = (name, since);
    }

    fn now(&self) -> String {
        let (name, since) = *self.at.lock().unwrap();
        format!("in \"{name}\" since t={:.1}s (wall)", since.as_secs_f64())
    }
}

async fn scenario(phase: &Phase) {
    let wall = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let sim = Arc::new(Sim::launch(dir.path().join("sim.log")).await);
    let sim_addr = sim.addr();

    let [config_a, config_b, broken] = configs(sim.port);
    let config = dir.path().join("tokenmeter.yaml");
    install(&config, &config_a);
    let proxy = start_proxy(&config, &dir.path().join("tokenmeter.log")).await;
    let (addr, admin, pid) = (proxy.addr, proxy.admin, proxy.pid);
    let tally = Arc::new(Mutex::new(Tally::default()));
    let next = Arc::new(AtomicU64::new(0));

    phase.enter("warm-up");
    // Warm-up: one request per client, then the baseline.
    let warm: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (tally, next) = (tally.clone(), next.clone());
            tokio::spawn(async move {
                let n = next.fetch_add(1, Ordering::Relaxed);
                stream_one(addr, sim_addr, n, &tally).await;
            })
        })
        .collect();
    for task in warm {
        task.await.unwrap();
    }
    sleep(Duration::from_millis(500)).await;
    let (rss_start, _, fds_start) = proc_figures(pid);
    let first = scrape(admin).await.expect("first scrape");

    phase.enter("load");
    let load_start = Instant::now();
    let load_end = load_start + LOAD;
    let stop = Arc::new(AtomicBool::new(false));

    // The clients.
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (tally, next) = (tally.clone(), next.clone());
            tokio::spawn(async move {
                while Instant::now() < load_end {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    stream_one(addr, sim_addr, n, &tally).await;
                }
            })
        })
        .collect();

    // SIGHUP every 200 ms: valid A, valid B, broken, in turn.
    let reloader = {
        let (stop, config) = (stop.clone(), config.clone());
        let files = [config_a.clone(), config_b, broken];
        tokio::spawn(async move {
            let mut sent = 0u64;
            let mut tick = load_start;
            while !stop.load(Ordering::Relaxed) {
                tick += Duration::from_millis(200);
                sleep_until(tick).await;
                install(&config, &files[(sent % 3) as usize]);
                signal(pid, "-HUP").await;
                sent += 1;
            }
            sent
        })
    };

    // Scrapes every 500 ms: no cumulative series may go down; RSS and fds
    // sampled alongside.
    let scraper = {
        let stop = stop.clone();
        let first = cumulative(&first);
        tokio::spawn(async move {
            let mut before = first;
            let (mut scrapes, mut failed) = (0u64, 0u64);
            let mut violations = Vec::new();
            let (mut rss_peak, mut fds_peak) = (0u64, 0usize);
            let mut tick = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                tick += Duration::from_millis(500);
                sleep_until(tick).await;
                let (rss, _, fds) = proc_figures(pid);
                rss_peak = rss_peak.max(rss);
                fds_peak = fds_peak.max(fds);
                match scrape(admin).await {
                    Some(samples) => {
                        scrapes += 1;
                        let now = cumulative(&samples);
                        violations.extend(decreases(&before, &now));
                        before = now;
                    }
                    None => failed += 1,
                }
            }
            (scrapes, failed, violations, rss_peak, fds_peak, before)
        })
    };

    // The schedule: kills and restarts of the upstream, and the burst.
    let at = |secs: f64| load_start + Duration::from_secs_f64(secs);
    let mut kills = 0;
    let mut burst = Vec::new();
    for (kill_at, restart_at) in [(5.0, 6.5), (12.0, 13.0), (22.0, 22.5)] {
        sleep_until(at(kill_at)).await;
        sim.kill();
        kills += 1;
        eprintln!(
            "t={:.1}s: upstream killed",
            load_start.elapsed().as_secs_f64()
        );
        sleep_until(at(restart_at)).await;
        sim.start().await;
        eprintln!(
            "t={:.1}s: upstream restarted",
            load_start.elapsed().as_secs_f64()
        );
        if kills == 1 {
            sleep_until(at(10.0)).await;
            eprintln!(
                "t={:.1}s: burst of {BURST}",
                load_start.elapsed().as_secs_f64()
            );
            for k in 0..BURST {
                let tally = tally.clone();
                burst.push(tokio::spawn(
                    async move { burst_one(addr, k, &tally).await },
                ));
            }
        }
    }

    phase.enter("waiting for the clients");
    for client in clients {
        client.await.unwrap();
    }
    let load_secs = load_start.elapsed().as_secs_f64();
    phase.enter("waiting for the burst");
    // Each burst connection ends within 50 s (connect, then its cap).
    for task in burst {
        task.await.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let hups = reloader.await.unwrap();
    let (scrapes, failed_scrapes, mut violations, mut rss_peak, mut fds_peak, last_seen) =
        scraper.await.unwrap();

    phase.enter("verifying the deferred streams");
    // The streams checked while the upstream was down are checked now.
    let deferred = std::mem::take(&mut tally.lock().unwrap().deferred);
    let deferred_count = deferred.len();
    for p in deferred {
        let n = p.n;
        if verify(sim_addr, p, &tally).await.is_some() {
            tally
                .lock()
                .unwrap()
                .mismatches
                .push(format!("chaos-{n}: the simulator could not be asked"));
        }
    }

    phase.enter("the last reload");
    // A last reload to valid A must succeed and be in force.
    let reloads = |s: &[Sample], result: &str| {
        s.iter()
            .filter(|x| {
                x.name == "tokenmeter_config_reload_total"
                    && x.labels.get("result").map(String::as_str) == Some(result)
            })
            .map(|x| x.value)
            .sum::<f64>()
    };
    let before_last = scrape(admin).await.expect("scrape");
    install(&config, &config_a);
    signal(pid, "-HUP").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let after_last = loop {
        let s = scrape(admin).await.expect("scrape");
        if reloads(&s, "success") > reloads(&before_last, "success") || Instant::now() > deadline {
            break s;
        }
        sleep(Duration::from_millis(50)).await;
    };

    phase.enter("settling");
    // Settle: nothing in flight, every sent request counted.
    let sent = tally.lock().unwrap().sent.len() as f64;
    let deadline = Instant::now() + Duration::from_secs(20);
    let settled = loop {
        let s = scrape(admin).await.expect("scrape");
        let idle = total(&s, "llm_requests_in_flight") == 0.0
            && total(&s, "tokenmeter_requests_receiving_body") == 0.0;
        if (idle && total(&s, "llm_requests_total") >= sent) || Instant::now() > deadline {
            break s;
        }
        sleep(Duration::from_millis(100)).await;
    };
    violations.extend(decreases(&last_seen, &cumulative(&settled)));
    let deadline = Instant::now() + Duration::from_secs(15);
    let open_proxy_connections = loop {
        let s = scrape(admin).await.expect("scrape");
        let open = s
            .iter()
            .filter(|x| {
                x.name == "tokenmeter_open_connections"
                    && x.labels.get("listener").map(String::as_str) == Some("proxy")
            })
            .map(|x| x.value)
            .sum::<f64>();
        if open == 0.0 || Instant::now() > deadline {
            break open;
        }
        sleep(Duration::from_millis(100)).await;
    };
    sleep(Duration::from_secs(2)).await;
    let end = scrape(admin).await.expect("final scrape");
    violations.extend(decreases(&cumulative(&settled), &cumulative(&end)));
    let (rss_end, rss_hwm, fds_end) = proc_figures(pid);
    rss_peak = rss_peak.max(rss_end);
    fds_peak = fds_peak.max(fds_end);
    let mut proxy_child = proxy.child;
    let alive = matches!(proxy_child.0.try_wait(), Ok(None));
    let healthz = admin_get(admin, "/healthz").await.map(|r| r.status);
    let config_now = admin_get(admin, "/config").await.map(|r| r.body());

    phase.enter("reading the logs");
    // The logs: no panic anywhere; one access line per request sent.
    let log = std::fs::read_to_string(&proxy.log).unwrap();
    let sim_log = std::fs::read_to_string(&sim.log).unwrap_or_default();
    let panics: Vec<&str> = log
        .lines()
        .chain(sim_log.lines())
        .filter(|l| l.to_ascii_lowercase().contains("panic"))
        .collect();
    let mut access: HashMap<String, Vec<String>> = HashMap::new();
    let mut access_lines = 0u64;
    // Each request's access line as logged, for the messages below.
    let mut access_text: HashMap<String, String> = HashMap::new();
    for line in log.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["target"] == "tokenmeter::access" {
            access_lines += 1;
            let id = v["fields"]["request_id"].as_str().unwrap_or("").to_owned();
            let outcome = v["fields"]["outcome"].as_str().unwrap_or("").to_owned();
            access.entry(id.clone()).or_default().push(outcome);
            access_text.insert(id, line.to_owned());
        }
    }
    sim.kill();

    // ---- The figures.
    let t = tally.lock().unwrap();
    let outcomes = by_label(&end, "llm_requests_total", "outcome");
    let counted = total(&end, "llm_requests_total");
    let retries = by_label(&end, "tokenmeter_upstream_retries_total", "reason");
    let shed = by_label(&end, "tokenmeter_shed_connections_total", "reason");
    let reload_results = by_label(&end, "tokenmeter_config_reload_total", "result");
    let dropped_log_lines = total(&end, "tokenmeter_log_lines_dropped_total");
    let closed_burst = t.burst.iter().filter(|b| b.1).count();
    let longest_burst = t
        .burst
        .iter()
        .filter(|b| b.0 != "body")
        .map(|b| b.2)
        .fold(0.0, f64::max);
    let mut burst_statuses: BTreeMap<String, u64> = BTreeMap::new();
    for (kind, closed, _, status) in &t.burst {
        let status = status.map_or("none".to_owned(), |s| s.to_string());
        let how = if *closed { "closed" } else { "left" };
        *burst_statuses
            .entry(format!("{kind} {how} status {status}"))
            .or_insert(0) += 1;
    }
    println!("\n==== chaos: figures ====");
    println!(
        "wall time                  {:.1} s (load {load_secs:.1} s)",
        wall.elapsed().as_secs_f64()
    );
    println!("requests sent (metered)    {sent}");
    println!("requests not sent          {}", t.not_sent);
    println!("llm_requests_total (sum)   {counted}");
    for (outcome, v) in &outcomes {
        println!("  outcome {outcome:<17} {v}");
    }
    println!("responses seen by clients");
    for (kind, v) in &t.kinds {
        println!("  {kind:<24} {v}");
    }
    println!("clients that left          {}", t.left);
    println!(
        "streams verified complete  {} ({} cut differently into chunks)",
        t.verified_complete, t.reframed
    );
    println!("streams verified as prefix {}", t.verified_prefix);
    println!("  verified after the run   {deferred_count}");
    println!(
        "upstream kills/starts      {kills}/{}",
        sim.starts.load(Ordering::Relaxed)
    );
    println!("upstream retries           {retries:?}");
    println!(
        "shed connections           {} {shed:?}",
        shed.values().sum::<f64>()
    );
    println!("SIGHUPs sent               {}", hups + 1);
    println!("config reloads             {reload_results:?}");
    println!(
        "burst connections          {} ({closed_burst} closed by the proxy, longest idle/head {longest_burst:.1} s)",
        t.burst.len()
    );
    for (kind, v) in &burst_statuses {
        println!("  {kind:<28} {v}");
    }
    println!("scrapes                    {scrapes} ({failed_scrapes} failed)");
    println!("RSS KiB start/peak/end     {rss_start}/{rss_peak}/{rss_end} (VmHWM {rss_hwm})");
    println!("open fds start/peak/end    {fds_start}/{fds_peak}/{fds_end}");
    println!("access log lines           {access_lines} ({dropped_log_lines} log lines dropped)");
    println!("========================\n");

    // ---- The assertions.
    assert!(alive, "the proxy exited");
    assert_eq!(healthz, Some(200), "/healthz after the run");
    assert!(panics.is_empty(), "panics logged:\n{}", panics.join("\n"));
    assert!(
        violations.is_empty(),
        "counters went down:\n{}",
        violations.join("\n")
    );
    assert!(
        scrapes >= 20,
        "only {scrapes} scrapes succeeded ({failed_scrapes} failed)"
    );
    assert_eq!(
        counted, sent,
        "llm_requests_total {outcomes:?} against {sent} requests sent"
    );
    assert_eq!(total(&end, "llm_requests_in_flight"), 0.0);
    assert_eq!(open_proxy_connections, 0.0, "client connections still open");
    assert!(
        t.crosstalk.is_empty(),
        "responses with another request's bytes:\n{}",
        t.crosstalk.join("\n")
    );
    assert!(
        t.mismatches.is_empty(),
        "{} streams differ from the upstream's:\n{}",
        t.mismatches.len(),
        t.mismatches
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        t.stalled.is_empty(),
        "streams stalled 30 s: {:?}",
        t.stalled
    );
    let logged = |ids: &[String]| {
        ids.iter()
            .map(|id| {
                let id = id.split(' ').next().unwrap_or_default();
                format!("{id}: {:?}", access_text.get(id))
            })
            .collect::<Vec<_>>()
    };
    assert!(
        t.no_head.is_empty(),
        "requests answered with no response head: {:?}\n{:#?}",
        t.no_head,
        logged(&t.no_head)
    );
    // Each request sent has exactly one access line, with outcome `ok` when
    // its client received the whole stream.
    if dropped_log_lines == 0.0 {
        assert_eq!(
            access_lines as f64, sent,
            "access lines against requests sent"
        );
        let mut wrong = Vec::new();
        for id in &t.sent {
            match access.get(id).map(Vec::as_slice) {
                Some([_]) => {}
                other => wrong.push(format!("{id}: {other:?}")),
            }
        }
        for id in &t.completed {
            if access.get(id).is_some_and(|o| o.iter().any(|o| o != "ok")) {
                wrong.push(format!("{id} completed but logged {:?}", access[id]));
            }
        }
        assert!(
            wrong.is_empty(),
            "access log against requests sent:\n{}",
            wrong.join("\n")
        );
    }
    // The burst's idle and trickling heads were all closed by the proxy,
    // well within their 30 s (the head timeout is 4 s once accepted, the
    // overload timeout 2 s); its trickling bodies were all answered `408`
    // within their 20 s (`request_body_total` is 5 s from the head), and
    // read that answer whole: the proxy's close lingers, so their next
    // trickled byte is not answered with a reset.
    for (kind, closed, open, status) in &t.burst {
        assert!(
            *closed,
            "a burst connection ({kind}) was still open after {open:.1} s"
        );
        if *kind == "body" {
            assert_eq!(*status, Some(408), "a trickled body after {open:.1} s");
        }
    }
    assert_eq!(
        t.burst.len() as u64,
        BURST,
        "burst connections that could not connect"
    );
    // The chaos happened: reloads both ways, failures and aborts metered,
    // and most requests still served.
    assert!(
        reload_results.get("success").copied().unwrap_or(0.0) >= 1.0,
        "{reload_results:?}"
    );
    assert!(
        reload_results.get("failure").copied().unwrap_or(0.0) >= 1.0,
        "{reload_results:?}"
    );
    assert_eq!(
        total(&end, "tokenmeter_config_last_reload_successful"),
        1.0,
        "the last reload (valid A) is in force"
    );
    assert!(
        reloads(&after_last, "success") > reloads(&before_last, "success"),
        "the last reload did not succeed"
    );
    let config_now: serde_json::Value =
        serde_json::from_slice(&config_now.expect("/config")).unwrap();
    assert_eq!(
        config_now["routes"][0]["timeouts"]["idle"], 10.0,
        "valid A's idle timeout in force: {config_now}"
    );
    assert!(
        outcomes.get("client_abort").copied().unwrap_or(0.0) >= 1.0,
        "{outcomes:?}"
    );
    let failed = outcomes.get("upstream_error").copied().unwrap_or(0.0)
        + outcomes.get("proxy_error").copied().unwrap_or(0.0);
    assert!(
        failed >= 1.0,
        "killing the upstream failed no request: {outcomes:?}"
    );
    assert!(
        t.verified_complete as f64 >= sent * 0.4,
        "only {} of {sent} streams completed",
        t.verified_complete
    );
    // The memory of the run was given back.
    assert!(
        rss_end <= rss_start + RSS_SLACK_KIB,
        "RSS {rss_end} KiB at the end against {rss_start} KiB after warm-up"
    );
    assert!(
        fds_end <= fds_start + 2 * CLIENTS as usize,
        "{fds_end} fds at the end against {fds_start} after warm-up"
    );
    drop(t);
    drop(proxy_child);
}
