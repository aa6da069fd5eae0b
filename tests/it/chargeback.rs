//! Chargeback on real sockets (docs/metrics.md, "Chargeback"): a route's
//! GPU time, energy and money divided among its tenants by their share of
//! the requests in flight, against the spans the clients measured; the
//! parts adding up to the route's total; the access lines adding up to the
//! counters; a price changed by a reload; a GPU page that goes away.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::dcgm::Dcgm;
use crate::common::*;
use tokenmeter::app::{ConfigSource, Running};
use tokenmeter::config::{Config, Overrides};

/// One request as its client saw it: its tenant, when it was sent and
/// when its last byte arrived.
#[derive(Debug, Clone)]
struct Span {
    /// Its `x-request-id`: its access line's `request_id`.
    id: String,
    tenant: String,
    start: Instant,
    end: Instant,
}

impl Span {
    /// [`widening`] of this request.
    fn widening(&self, lines: &[Value]) -> f64 {
        widening(lines, &self.id, self.end - self.start)
    }
}

/// Sends one streamed chat request for `tenant` (with `extra` headers)
/// and reads the whole answer.
async fn request(proxy: SocketAddr, tenant: &str, extra: &[(&str, &str)]) -> Span {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let id = format!("chargeback-{n}");
    let mut headers = vec![("x-tenant", tenant), ("x-request-id", &id)];
    headers.extend_from_slice(extra);
    let (head, body) = chat_request("m1", true, &headers);
    let start = Instant::now();
    let answer = raw_exchange(proxy, &head, &body).await;
    let end = Instant::now();
    assert_eq!(
        answer.status,
        200,
        "{}",
        String::from_utf8_lossy(&answer.body())
    );
    Span {
        id,
        tenant: tenant.to_owned(),
        start,
        end,
    }
}

/// A tenant's clients: its name, how many at once, the requests each sends
/// one after the other, and the headers they add.
type Clients<'a> = (&'a str, usize, usize, &'a [(&'a str, &'a str)]);

/// `tenants`' clients sending at once: every request's span.
async fn load(proxy: SocketAddr, tenants: &[Clients<'_>]) -> Vec<Span> {
    let mut clients = Vec::new();
    for &(tenant, concurrency, each, extra) in tenants {
        let extra: Vec<(String, String)> = extra
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        for _ in 0..concurrency {
            let (tenant, extra) = (tenant.to_owned(), extra.clone());
            clients.push(tokio::spawn(async move {
                let extra: Vec<(&str, &str)> = extra
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                let mut spans = Vec::new();
                for _ in 0..each {
                    spans.push(request(proxy, &tenant, &extra).await);
                }
                spans
            }));
        }
    }
    let mut spans = Vec::new();
    for client in clients {
        spans.extend(client.await.unwrap());
    }
    spans
}

/// Each tenant's share of `gpus` GPUs over `spans`: the integral, over
/// every moment some request is in flight, of its requests in flight over
/// all of them.
fn shares(spans: &[Span], gpus: f64) -> BTreeMap<String, f64> {
    let mut edges: Vec<(Instant, i32, &str)> = Vec::new();
    for s in spans {
        edges.push((s.start, 1, &s.tenant));
        edges.push((s.end, -1, &s.tenant));
    }
    // Ends before starts at one instant: a request that ends as another
    // starts does not share that instant.
    edges.sort_by_key(|&(at, step, _)| (at, step));
    let mut in_flight: BTreeMap<&str, i32> = BTreeMap::new();
    let mut shares = BTreeMap::new();
    let mut last = edges[0].0;
    for (at, step, tenant) in edges {
        let all: i32 = in_flight.values().sum();
        if all > 0 {
            let span = at.duration_since(last).as_secs_f64();
            for (t, n) in &in_flight {
                *shares.entry(t.to_string()).or_insert(0.0) +=
                    gpus * span * f64::from(*n) / f64::from(all);
            }
        }
        *in_flight.entry(tenant).or_insert(0) += step;
        last = at;
    }
    shares
}

/// The sum of `name` over the series with `labels`, from a scrape's text.
fn total(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    sum(samples, name, labels)
}

/// Three tenants at concurrencies 1, 2 and 3 and a fourth that declares
/// an objective it always misses, through the binary in front of a
/// batch-limited upstream, on a route of one GPU at 3.6 an hour: each
/// tenant's GPU-seconds are the integral of its share of the requests in
/// flight as its clients measured them; the parts add up to the route's
/// GPU-seconds and cost; the missing tenant's time is all waste; and the
/// access lines add up to the counters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_share_the_gpus_by_their_requests_in_flight() {
    let sim = start_sim(sim::SimConfig {
        slots: NonZeroU32::new(4),
        ..schedule(40, 8, 25)
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenmeter.yaml");
    std::fs::write(
        &path,
        format!(
            "cost: {{currency: EUR}}\nroutes:\n  - name: chat\n    upstream: http://{sim}\n    gpus: 1\n    gpu_hourly_cost: 3.6\n    tenant: {{header: x-tenant}}\n    slo_request_headers: true\n"
        ),
    )
    .unwrap();
    let mut child = serve(&[OsStr::new("--config"), path.as_os_str()]);
    let miss: &[(&str, &str)] = &[("x-slo-ttft-ms", "1")];
    let spans = load(
        child.proxy,
        &[
            ("a", 1, 6, &[]),
            ("b", 2, 6, &[]),
            ("c", 3, 6, &[]),
            ("d", 1, 4, miss),
        ],
    )
    .await;
    let (_, s) = scrape(child.admin).await;
    // The shares of the spans the clients measured, to within what
    // their spans and the proxy's own differ by.
    let lines = access_lines(&mut child.lines, spans.len());
    let widened: f64 = spans.iter().map(|s| s.widening(&lines)).sum();
    let want = shares(&spans, 1.0);
    let route = ("route", "chat");
    for (tenant, want) in &want {
        let got = total(
            &s,
            "llm_request_gpu_seconds_total",
            &[route, ("tenant", tenant)],
        );
        assert!(
            (got - want).abs() <= widened,
            "tenant {tenant}'s GPU-seconds: {got} against {want}, the spans {widened} s apart"
        );
    }
    for quantity in ["seconds", "cost"] {
        let (parts, whole) = parts_and_total(&s, "chat", quantity);
        assert_near(parts, whole, 0.005, quantity);
    }
    // The route's GPUs are counted, and its tokens per GPU-second shown.
    assert_eq!(total(&s, "llm_gpus", &[route]), 1.0);
    assert!(
        total(
            &s,
            "llm_output_tokens_per_gpu_second",
            &[route, ("window", "1m")]
        ) > 0.0
    );
    // 3.6 EUR an hour: a thousandth of a euro a GPU-second.
    let cost = total(
        &s,
        "llm_request_gpu_cost_total",
        &[route, ("currency", "EUR")],
    );
    let seconds = total(&s, "llm_request_gpu_seconds_total", &[route]);
    assert_near(cost, seconds * 0.001, 1e-9, "cost");
    // The tenant that missed every objective: all its time is waste.
    let d = |good| {
        total(
            &s,
            "llm_request_gpu_seconds_total",
            &[("tenant", "d"), ("good", good)],
        )
    };
    assert!(
        d("false") > 0.0 && d("true") == 0.0,
        "{} {}",
        d("false"),
        d("true")
    );
    assert!(
        total(
            &s,
            "llm_request_gpu_seconds_total",
            &[("tenant", "a"), ("good", "false")]
        ) == 0.0
    );

    // The lines add up to the counters, per tenant.
    for tenant in want.keys() {
        let of = |field: &str| -> f64 {
            lines
                .iter()
                .filter(|l| l["tenant"] == tenant.as_str())
                .map(|l| l[field].as_f64().unwrap())
                .sum()
        };
        let counted = |name| total(&s, name, &[route, ("tenant", tenant)]);
        assert_near(
            of("gpu_seconds"),
            counted("llm_request_gpu_seconds_total"),
            1e-9,
            "lines' GPU-seconds",
        );
        assert_near(
            of("gpu_cost"),
            counted("llm_request_gpu_cost_total"),
            1e-9,
            "lines' cost",
        );
        assert!(
            lines.iter().all(|l| l.get("gpu_joules").is_none()),
            "no GPU page, no joules"
        );
    }
}

/// A DCGM page of 2 GPUs whose energy counters grow at 200 W each, through
/// the binary: the route's joules follow the same shares as its
/// GPU-seconds, which follow the requests in flight; the parts add up to
/// the joules counted, the counters' growth over the pages the proxy read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn energy_of_a_dcgm_page_follows_the_same_shares() {
    let dcgm = Arc::new(Dcgm::new(vec![("GPU-a", 1e9), ("GPU-b", 2e9)]));
    let made = dcgm.clone();
    let page = serve_made(move || made.page()).await;
    let sim = start_sim(sim::SimConfig {
        slots: NonZeroU32::new(4),
        ..schedule(40, 8, 25)
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenmeter.yaml");
    std::fs::write(
        &path,
        format!(
            "scrape: {{interval: 200ms, timeout: 180ms}}\nroutes:\n  - name: chat\n    upstream: http://{sim}\n    gpu_metrics: http://{page}/metrics\n    tenant: {{header: x-tenant}}\n"
        ),
    )
    .unwrap();
    let fresh_for = Duration::from_millis(600);
    let mut child = serve(&[OsStr::new("--config"), path.as_os_str()]);
    let set = [("gpu_set", "chat")];
    // Two readings give the first average power.
    scrape_until(child.admin, |s| {
        total(s, "llm_gpu_energy_joules_total", &set) > 0.0
    })
    .await;
    let spans = load(child.proxy, &[("a", 1, 5, &[]), ("b", 2, 5, &[])]).await;
    // The joules of the requests' last moments come at the counters'
    // next move, read once a page made after they ended is stored (the
    // next page is asked for after it); then the counters stop, so that
    // every page from then on adds nothing, and every page made before
    // is in the count once the next two have been made.
    dcgm.pages_more(2).await;
    dcgm.freeze();
    dcgm.pages_more(2).await;
    let (_, s) = scrape(child.admin).await;
    for quantity in ["seconds", "energy_joules"] {
        let (parts, whole) = parts_and_total(&s, "chat", quantity);
        assert_near(parts, whole, 0.005, quantity);
    }
    let of = |name, tenant| total(&s, name, &[("route", "chat"), ("tenant", tenant)]);
    for tenant in ["a", "b"] {
        let gpu = of("llm_request_gpu_seconds_total", tenant);
        let joules = of("llm_request_gpu_energy_joules_total", tenant);
        // 400 W over 2 GPUs: 200 J a GPU-second.
        assert_near(
            joules,
            200.0 * gpu,
            0.05,
            &format!("tenant {tenant}'s joules"),
        );
    }
    // The shares of the spans the clients measured, to within what their
    // spans and the proxy's own differ by, on 2 GPUs.
    let lines = access_lines(&mut child.lines, spans.len());
    let widened: f64 = spans.iter().map(|s| s.widening(&lines)).sum();
    let want = shares(&spans, 2.0);
    for (tenant, want) in &want {
        let got = of("llm_request_gpu_seconds_total", tenant.as_str());
        assert!(
            (got - want).abs() <= 2.0 * widened,
            "{tenant}'s GPU-seconds: {got} against {want}, the spans {widened} s apart"
        );
    }
    // The joules counted are the counters' growth over the pages the
    // proxy read.
    let failures = total(
        &s,
        "tokenmeter_scrape_failures_total",
        &[("route", "chat"), ("target", "gpu")],
    );
    let truth = dcgm.truth(fresh_for, failures as usize);
    let joules = total(&s, "llm_gpu_energy_joules_total", &set);
    let rounding = 1e-9 * truth.high;
    assert!(
        joules >= truth.low - rounding && joules <= truth.high + rounding,
        "{joules} J against the page's growth {truth:?} ({failures} failed scrapes)"
    );
    assert_eq!(total(&s, "tokenmeter_gpu_energy_resets_total", &set), 0.0);
}

/// A config file in `dir` loaded as a user's would be, on ephemeral ports.
fn load_file(dir: &Path, text: &str) -> Config {
    let path = dir.join("main.yaml");
    std::fs::write(&path, text).unwrap();
    Config::load(&path, &overrides()).unwrap()
}

fn overrides() -> Overrides {
    Overrides {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        admin_listen: Some("127.0.0.1:0".parse().unwrap()),
        ..Default::default()
    }
}

/// The price of a route with 2 GPUs changed by a reload: the cost before
/// it is at the old price, the cost after at the new one, and what was
/// counted stays.
#[tokio::test]
async fn a_price_changed_by_reload_applies_from_the_reload_on() {
    let sim = start_sim(schedule(5, 5, 3)).await;
    let dir = tempfile::tempdir().unwrap();
    let main = |price: &str| {
        format!(
            "routes:\n  - name: chat\n    upstream: http://{sim}\n    gpus: 2\n    gpu_hourly_cost: {price}\n"
        )
    };
    let config = load_file(dir.path(), &main("3600"));
    let path = dir.path().join("main.yaml");
    let proxy: Running = tokenmeter::app::start_with(
        config,
        Some(ConfigSource {
            path: path.clone(),
            overrides: overrides(),
            watch: false,
        }),
        None,
    )
    .await
    .unwrap();
    let set = [("gpu_set", "chat")];
    let read = |s: &[Sample]| {
        (
            total(s, "llm_gpu_seconds_total", &set),
            total(
                s,
                "llm_gpu_cost_total",
                &[("gpu_set", "chat"), ("currency", "USD")],
            ),
        )
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (seconds, cost) = read(&scrape(proxy.admin_addr).await.1);
    // One a GPU-second.
    assert_near(cost, seconds, 1e-9, "cost at 3600 an hour");
    std::fs::write(&path, main("7200")).unwrap();
    proxy.reload().await.unwrap();
    let (at_reload, cost_at_reload) = read(&scrape(proxy.admin_addr).await.1);
    let _ = load(proxy.proxy_addr, &[("a", 1, 2, &[])]).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (later, cost_later) = read(&scrape(proxy.admin_addr).await.1);
    assert!(cost_later >= cost_at_reload && cost_at_reload >= cost);
    // Two a GPU-second from the reload on.
    assert_near(
        cost_later - cost_at_reload,
        2.0 * (later - at_reload),
        1e-6,
        "cost at 7200 an hour",
    );
    let (_, s) = scrape(proxy.admin_addr).await;
    let (parts, whole) = parts_and_total(&s, "chat", "cost");
    assert_near(parts, whole, 1e-9, "cost's parts");
    proxy.stop().await;
}

/// A GPU page that stops answering while a request is in flight: the
/// GPU-seconds stop three intervals after its last reading, the request is
/// charged no time after that, and the parts still add up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_page_that_goes_away_stops_the_time_and_the_shares() {
    let page =
        Arc::new(Page::serve("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-a\"} 50\n".into()).await);
    // One request of about 2.5 s.
    let sim = start_sim(schedule(10, 25, 100)).await;
    let dir = tempfile::tempdir().unwrap();
    let config = load_file(
        dir.path(),
        &format!(
            "scrape: {{interval: 100ms, timeout: 80ms}}\nroutes:\n  - name: chat\n    upstream: http://{sim}\n    gpu_metrics: {}\n    tenant: {{header: x-tenant}}\n",
            page.url()
        ),
    );
    let proxy = start(config).await;
    let route = [("route", "chat")];
    scrape_until(proxy.admin_addr, |s| total(s, "llm_gpus", &route) == 1.0).await;
    let client = tokio::spawn(request(proxy.proxy_addr, "a", &[]));
    tokio::time::sleep(Duration::from_millis(500)).await;
    page.set("not a page".into());
    let span = client.await.unwrap();
    let (_, s) = scrape(proxy.admin_addr).await;
    let charged = total(&s, "llm_request_gpu_seconds_total", &[("tenant", "a")]);
    let lasted = span.end.duration_since(span.start).as_secs_f64();
    assert!(lasted > 2.0, "{lasted}");
    // Charged from its start to about 0.3 s after the last good reading,
    // not for its whole time.
    assert!(charged > 0.4 && charged < 1.2, "{charged} of {lasted} s");
    let (parts, whole) = parts_and_total(&s, "chat", "seconds");
    assert_near(parts, whole, 1e-9, "parts");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, again) = scrape(proxy.admin_addr).await;
    assert_eq!(
        total(&again, "llm_gpu_seconds_total", &[("gpu_set", "chat")]),
        whole,
        "no time counted while stale"
    );
    proxy.stop().await;
}

/// A page whose GPU set grows from 2 to 4 (the 2 joining with years of
/// lifetime energy) and shrinks back, with one implausible sample in
/// between: the joules counted are the page's own growth, no GPU's
/// lifetime, and neither a GPU that leaves nor the bad sample counts as a
/// reset; the bad sample is counted apart, and the parts add up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn energy_is_counted_per_gpu_as_the_set_grows_and_shrinks() {
    let dcgm = Arc::new(Dcgm::new(vec![("GPU-a", 1e9), ("GPU-b", 3e9)]));
    let made = dcgm.clone();
    let page = serve_made(move || made.page()).await;
    let sim = start_sim(schedule(5, 5, 3)).await;
    let dir = tempfile::tempdir().unwrap();
    let config = load_file(
        dir.path(),
        &format!(
            "scrape: {{interval: 100ms, timeout: 90ms}}\nroutes:\n  - name: chat\n    upstream: http://{sim}\n    gpu_metrics: http://{page}/metrics\n"
        ),
    );
    let fresh_for = Duration::from_millis(300);
    let proxy = start(config).await;
    let phase = Duration::from_millis(1200);
    tokio::time::sleep(phase).await;
    dcgm.set
        .lock()
        .unwrap()
        .extend([("GPU-c", 9e15), ("GPU-d", 7e15)]);
    let _ = load(proxy.proxy_addr, &[("a", 1, 3, &[])]).await;
    tokio::time::sleep(phase / 2).await;
    dcgm.spike.store(true, std::sync::atomic::Ordering::SeqCst);
    tokio::time::sleep(phase / 2).await;
    dcgm.set.lock().unwrap().truncate(2);
    tokio::time::sleep(phase).await;
    // Counters frozen: later pages add nothing, so every page served is
    // in the count once the scrapes in progress end.
    dcgm.freeze();
    dcgm.pages_more(2).await;
    let (_, s) = scrape(proxy.admin_addr).await;
    let set = [("gpu_set", "chat")];
    // The scrapes of the page that failed (a timeout on a busy machine):
    // the pages they missed are unknown, so the truth allows for them.
    let failures = total(
        &s,
        "tokenmeter_scrape_failures_total",
        &[("route", "chat"), ("target", "gpu")],
    );
    let truth = dcgm.truth(fresh_for, failures as usize);
    // 200 W on 2 GPUs for about 4 s and on 2 more for about 1.2 s.
    assert!(truth.high > 1_500.0 && truth.high < 2_500.0, "{truth:?}");
    let joules = total(&s, "llm_gpu_energy_joules_total", &set);
    let rounding = 1e-9 * truth.high;
    assert!(
        joules >= truth.low - rounding && joules <= truth.high + rounding,
        "{joules} J against the page's growth {truth:?} ({failures} failed scrapes)"
    );
    assert_eq!(total(&s, "tokenmeter_gpu_energy_resets_total", &set), 0.0);
    // One implausible sample, unless its page was the one a failed scrape
    // missed.
    let implausible = total(&s, "tokenmeter_gpu_energy_implausible_samples_total", &set);
    assert!(
        implausible == 1.0 || (failures > 0.0 && implausible == 0.0),
        "{implausible} implausible, {failures} failed scrapes"
    );
    let (parts, whole) = parts_and_total(&s, "chat", "energy_joules");
    assert_near(parts, whole, 0.005, "joules' parts");
    proxy.stop().await;
}

/// A page whose counter the test refreshes itself, 150 J at a time,
/// scraped every 200 ms (as dcgm-exporter's 30 s collection under a 10 s
/// scrape), so that each refresh is read several times unchanged: after
/// each refresh has been read, tenant a's request runs, then b's, and the
/// next refresh comes once both have ended. Each GPU-second of a span
/// between refreshes is worth the same joules whoever was in flight in
/// it: a and b get the same joules a GPU-second, span by span, none of it
/// lost to the idle time at the refresh; and the parts add up at every
/// scrape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_refreshed_between_scrapes_charges_each_tenant_its_own_time() {
    let counter = Arc::new(std::sync::Mutex::new(5e9));
    let pages = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (shown, made) = (counter.clone(), pages.clone());
    let page = serve_made(move || {
        made.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        format!(
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu=\"0\",UUID=\"GPU-a\"}} {}\n",
            *shown.lock().unwrap()
        )
    })
    .await;
    // Returns once two more pages have been made: the one before the
    // second is stored (the next page is asked for after it).
    let read = || async {
        let until = pages.load(std::sync::atomic::Ordering::SeqCst) + 2;
        while pages.load(std::sync::atomic::Ordering::SeqCst) < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let sim = start_sim(schedule(20, 10, 10)).await;
    let dir = tempfile::tempdir().unwrap();
    let config = load_file(
        dir.path(),
        &format!(
            "scrape: {{interval: 200ms, timeout: 150ms}}\nroutes:\n  - name: chat\n    upstream: http://{sim}\n    gpu_metrics: http://{page}/metrics\n    tenant: {{header: x-tenant}}\n"
        ),
    );
    let proxy = start(config).await;
    let set = [("gpu_set", "chat")];
    let of = |s: &[Sample], name, tenant| total(s, name, &[("route", "chat"), ("tenant", tenant)]);
    let refresh = || *counter.lock().unwrap() += 150_000.0;
    // Two readings, the second a move, give the first baseline.
    read().await;
    refresh();
    read().await;
    let mut before = scrape(proxy.admin_addr).await.1;
    for _ in 0..8 {
        request(proxy.proxy_addr, "a", &[]).await;
        request(proxy.proxy_addr, "b", &[]).await;
        let (_, s) = scrape(proxy.admin_addr).await;
        let (parts, whole) = parts_and_total(&s, "chat", "energy_joules");
        assert!(
            (parts - whole).abs() <= 1e-6 * whole.max(1.0),
            "{parts} against {whole}"
        );
        refresh();
        read().await;
        let (_, after) = scrape(proxy.admin_addr).await;
        let (parts, whole) = parts_and_total(&after, "chat", "energy_joules");
        assert!(
            (parts - whole).abs() <= 1e-6 * whole.max(1.0),
            "{parts} against {whole}"
        );
        let per_second = |tenant| {
            let grew = |name| of(&after, name, tenant) - of(&before, name, tenant);
            let seconds = grew("llm_request_gpu_seconds_total");
            assert!(seconds > 0.0, "{tenant}: {seconds} GPU-seconds");
            grew("llm_request_gpu_energy_joules_total") / seconds
        };
        let (a, b) = (per_second("a"), per_second("b"));
        assert!(a > 0.0, "a: {a} J a GPU-second");
        assert_near(b, a, 1e-6, "b's joules a GPU-second against a's");
        // The whole refresh is in: 150 J among a, b and the idle time.
        let refreshed = total(&after, "llm_gpu_energy_joules_total", &set)
            - total(&before, "llm_gpu_energy_joules_total", &set);
        assert_near(refreshed, 150.0, 1e-6, "one refresh's joules");
        before = after;
    }
    proxy.stop().await;
}

/// A reload to a configuration that is valid but cannot be put in force
/// (a GPU page whose host is no TLS server name, so its scrape cannot
/// start): no series of its new route appears, and the running route's
/// price stays.
#[tokio::test]
async fn a_configuration_that_fails_to_build_adds_no_series_and_changes_no_ledger() {
    let sim = start_sim(schedule(5, 5, 3)).await;
    let dir = tempfile::tempdir().unwrap();
    let chat = format!(
        "routes:\n  - name: chat\n    upstream: http://{sim}\n    gpus: 1\n    gpu_hourly_cost: 3600\n"
    );
    let config = load_file(dir.path(), &chat);
    let path = dir.path().join("main.yaml");
    let proxy: Running = tokenmeter::app::start_with(
        config,
        Some(ConfigSource {
            path: path.clone(),
            overrides: overrides(),
            watch: false,
        }),
        None,
    )
    .await
    .unwrap();
    let broken = chat.replace("3600", "7200").replace(
        "routes:\n",
        &format!(
            "routes:\n  - name: other\n    match: {{path_prefix: /other/}}\n    upstream: http://{sim}\n    gpu_metrics: https://a..b/metrics\n    gpu_hourly_cost: 1\n"
        ),
    );
    std::fs::write(&path, broken).unwrap();
    let failed = proxy.reload().await.unwrap_err();
    assert_eq!(failed.kind(), "scrape", "{failed}");
    let read = |s: &[Sample]| {
        (
            total(s, "llm_gpu_seconds_total", &[("gpu_set", "chat")]),
            total(s, "llm_gpu_cost_total", &[("gpu_set", "chat")]),
        )
    };
    let (_, before) = scrape(proxy.admin_addr).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (text, after) = scrape(proxy.admin_addr).await;
    for label in [r#"route="other""#, r#"gpu_set="other""#] {
        assert!(!text.contains(label), "{text}");
    }
    let ((s0, c0), (s1, c1)) = (read(&before), read(&after));
    // Still one a GPU-second.
    assert_near(c1 - c0, s1 - s0, 1e-6, "cost at the running price");
    proxy.stop().await;
}
