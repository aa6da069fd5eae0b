//! The owner on a told clock: a route's families from its ledger, which
//! add up at a scrape, and a reload that keeps what was counted.

use std::time::Duration;

use prometheus::Registry;

use super::*;
use crate::config::{Config, Overrides};
use crate::observe::labels::{Bounds, Labels};

fn config(text: &str) -> Config {
    Config::parse(text, "tokenmeter.yaml", &Overrides::default()).unwrap()
}

const PRICED: &str = "cost: {currency: EUR}
routes:
  - name: plain
    match: {path_prefix: /plain/}
    upstream: http://127.0.0.1:1
  - name: chat
    upstream: http://127.0.0.1:1
    gpus: 2
    gpu_hourly_cost: 3.6
";

fn labels(route: &str, tenant: Option<&str>) -> Labels {
    let bounds = std::sync::Arc::new(Bounds::new(
        &crate::config::MetricsSettings::default(),
        prometheus::IntCounter::new("m", "m").unwrap(),
        prometheus::IntCounter::new("t", "t").unwrap(),
    ));
    let chat = meter::Operation::Chat;
    let mut labels = Labels::resolve(&bounds, route, Some("m1"), None, tenant, chat);
    labels.admit(200);
    labels
}

/// The value of the sample `name{labels}` in the text exposition.
fn value(text: &str, name: &str, labels: &str) -> Option<f64> {
    let prefix = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.parse().unwrap())
}

fn exposition(registry: &Registry) -> String {
    let mut out = Vec::new();
    prometheus::Encoder::encode(
        &prometheus::TextEncoder::new(),
        &registry.gather(),
        &mut out,
    )
    .unwrap();
    String::from_utf8(out).unwrap()
}

/// The owner, registered in a registry of its own.
fn owner() -> (Registry, Arc<Charges>) {
    let registry = Registry::new();
    let r = Register {
        registry: &registry,
        namespace: "llm",
    };
    let charges = Charges::register(r).unwrap();
    (registry, charges)
}

/// The plan of `config`, replacing `previous`, put in force at `now`, as
/// a snapshot's is.
fn in_force(config: &Config, previous: Option<&ChargePlan>, now: Instant) -> ChargePlan {
    let plan = ChargePlan::new(config, previous, now);
    plan.apply(previous, now);
    plan
}

/// The exposition of `charges`' families from `plan` at `now`.
fn scrape(registry: &Registry, charges: &Charges, plan: &ChargePlan, now: Instant) -> String {
    charges.refresh(Some(plan), now);
    exposition(registry)
}

#[test]
fn a_routes_families_add_up_at_a_scrape() {
    let (registry, charges) = owner();
    let t0 = Instant::now();
    let plan = in_force(&config(PRICED), None, t0);
    assert!(plan.open("plain", t0).is_none(), "no GPUs, no bill");
    let a = plan.open("chat", t0 + Duration::from_secs(10)).unwrap();
    let b = plan.open("chat", t0 + Duration::from_secs(20)).unwrap();
    let la = labels("chat", Some("team-a"));
    let charged = a.close(t0 + Duration::from_secs(30), &la, true);
    // 10 s alone and 10 s shared, at 2 GPUs: 30 GPU-seconds; 0.001 EUR each.
    assert!((charged.gpu_seconds - 30.0).abs() < 1e-9, "{charged:?}");
    assert!((charged.cost.unwrap() - 0.03).abs() < 1e-12, "{charged:?}");
    assert_eq!(charged.joules, None, "no GPU page, no energy");

    let text = scrape(&registry, &charges, &plan, t0 + Duration::from_secs(30));
    let route = r#"gpu_set="chat""#;
    let total = value(&text, "llm_gpu_seconds_total", route).unwrap();
    let idle = value(&text, "llm_gpu_idle_seconds_total", route).unwrap();
    let in_flight = value(&text, "llm_gpu_in_flight_seconds", route).unwrap();
    let others = value(&text, "llm_gpu_other_replicas_seconds_total", route).unwrap();
    let request = value(
        &text,
        "llm_request_gpu_seconds_total",
        r#"good="true",gpu_set="chat",model="m1",route="chat",slo="",tenant="team-a""#,
    )
    .unwrap();
    assert_eq!(request, charged.gpu_seconds);
    assert!(total >= 60.0 - 1e-6, "{text}");
    let parts = request + in_flight + others + idle;
    assert!(
        (parts - total).abs() < 1e-6 * total,
        "{parts} against {total}\n{text}"
    );
    assert!(
        value(
            &text,
            "llm_gpu_cost_total",
            r#"currency="EUR",gpu_set="chat""#
        )
        .unwrap()
            > 0.0,
        "{text}"
    );
    for label in [r#"route="plain""#, r#"gpu_set="plain""#] {
        assert!(!text.contains(label), "{text}");
    }
    assert!(!text.contains("llm_gpu_energy_joules_total{"), "{text}");

    // A reload that takes the price away: b, in flight across it, pays
    // for its time before it at the old price (10 s shared and 70 s alone
    // at 2 GPUs: 150 GPU-seconds) and no money after it.
    let reload = t0 + Duration::from_secs(100);
    let unpriced = config(&PRICED.replace("    gpu_hourly_cost: 3.6\n", ""));
    let next = in_force(&unpriced, Some(&plan), reload);
    let lb = labels("chat", Some("team-b"));
    let charged = b.close(reload + Duration::from_secs(50), &lb, false);
    assert!((charged.gpu_seconds - 250.0).abs() < 1e-9, "{charged:?}");
    assert!((charged.cost.unwrap() - 0.15).abs() < 1e-12, "{charged:?}");
    let text = scrape(&registry, &charges, &next, reload + Duration::from_secs(50));
    assert_eq!(
        value(
            &text,
            "llm_request_gpu_seconds_total",
            r#"good="false",gpu_set="chat",model="m1",route="chat",slo="",tenant="team-b""#
        )
        .unwrap(),
        charged.gpu_seconds,
        "{text}"
    );
}

#[test]
fn the_windows_hold_each_tenants_good_and_wasted_share_and_idle() {
    let (_registry, charges) = owner();
    let t0 = Instant::now();
    let secs = Duration::from_secs;
    let plan = in_force(&config(PRICED), None, t0);
    let a = plan.open("chat", t0).unwrap();
    let b = plan.open("chat", t0 + secs(5)).unwrap();
    a.close(t0 + secs(10), &labels("chat", Some("team-a")), true);
    b.close(t0 + secs(20), &labels("chat", Some("team-b")), false);

    let report = charges.report(Some(&plan), t0 + secs(30));
    let w = &report.routes[0].windows[0];
    assert_eq!(
        (report.routes[0].gpu_set.as_str(), w.window),
        ("chat", "1m")
    );
    assert_eq!(report.routes[0].routes, ["chat"]);
    assert_eq!(report.routes[0].currency.as_deref(), Some("EUR"));
    // The counts began 30 s ago: the window is those 30 s, at 2 GPUs.
    assert!((w.seconds - 30.0).abs() < 0.1, "{w:?}");
    assert!((w.total.gpu_seconds - 60.0).abs() < 1e-9, "{w:?}");
    let tenant = |name: &str| w.tenants.iter().find(|t| t.tenant == name).unwrap();
    // a: 5 s alone and 5 s shared; b: 5 s shared and 10 s alone.
    assert!(
        (tenant("team-a").good.gpu_seconds - 15.0).abs() < 1e-9,
        "{w:?}"
    );
    assert_eq!(tenant("team-a").waste.gpu_seconds, 0.0);
    assert!(
        (tenant("team-b").waste.gpu_seconds - 25.0).abs() < 1e-9,
        "{w:?}"
    );
    assert!((w.idle.gpu_seconds - 20.0).abs() < 1e-9, "{w:?}");
    assert!((w.idle.cost.unwrap() - 0.02).abs() < 1e-12, "{w:?}");
    assert_eq!(w.idle.joules, None, "no GPU page");

    // Later, a minute with nothing in flight: all idle, no tenant.
    charges.tick(Some(&plan), t0 + secs(100));
    let report = charges.report(Some(&plan), t0 + secs(200));
    let w = &report.routes[0].windows[0];
    assert!(
        (w.seconds - 100.0).abs() < 1e-9,
        "from the point of 100 s: {w:?}"
    );
    assert!(w.tenants.is_empty(), "{w:?}");
    assert!((w.idle.gpu_seconds - 200.0).abs() < 1e-9, "{w:?}");
    let text = render_text(&report);
    assert!(
        text.starts_with("gpu set chat  routes chat  currency EUR\n"),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("1h     ")
            && l.contains(" 200s team-b")
            && l.ends_with("100.0%")),
        "{text}"
    );
}

#[test]
fn a_window_leaves_out_what_was_in_flight_at_its_start() {
    let (registry, charges) = owner();
    let t0 = Instant::now();
    let secs = Duration::from_secs;
    let plan = in_force(&config(PRICED), None, t0);
    let tick = |at| charges.tick(Some(&plan), t0 + secs(at));
    // Points every 10 s; a from 5 s to 35 s, across the point at 10 s; b
    // from 20 s to 50 s; c from 40 s on, still in flight; on 2 GPUs.
    tick(0);
    let a = plan.open("chat", t0 + secs(5)).unwrap();
    tick(10);
    tick(20);
    let b = plan.open("chat", t0 + secs(20)).unwrap();
    tick(30);
    a.close(t0 + secs(35), &labels("chat", Some("team-a")), true);
    tick(40);
    let c = plan.open("chat", t0 + secs(40)).unwrap();
    b.close(t0 + secs(50), &labels("chat", Some("team-b")), true);
    for at in [50, 60, 70] {
        tick(at);
    }
    let now = t0 + secs(75);
    let report = charges.report(Some(&plan), now);
    // Reading changes nothing: neither a scrape nor another report.
    for _ in 0..5 {
        charges.refresh(Some(&plan), now);
        let _ = exposition(&registry);
        assert_eq!(charges.report(Some(&plan), now), report);
    }
    let w = &report.routes[0].windows[0];
    // The 1m window starts at the point of 10 s.
    assert!((w.seconds - 65.0).abs() < 1e-9, "{w:?}");
    assert!((w.total.gpu_seconds - 130.0).abs() < 1e-9, "{w:?}");
    let tenant = |name: &str| w.tenants.iter().find(|t| t.tenant == name).unwrap();
    // a, after 10 s: 10 s alone, 15 s shared (not its 5 s before).
    let a = tenant("team-a").good;
    assert!((a.gpu_seconds - 35.0).abs() < 1e-9, "{w:?}");
    assert!((a.cost.unwrap() - 0.035).abs() < 1e-12, "{w:?}");
    // b: 15 s shared, 5 s alone, 10 s shared.
    let b = tenant("team-b").good;
    assert!((b.gpu_seconds - 35.0).abs() < 1e-9, "{w:?}");
    // c: 10 s shared, then 25 s alone.
    assert!((w.in_flight.gpu_seconds - 60.0).abs() < 1e-9, "{w:?}");
    assert_eq!(w.idle.gpu_seconds, 0.0, "{w:?}");
    let parts = a.gpu_seconds + b.gpu_seconds + w.in_flight.gpu_seconds;
    assert!((parts - w.total.gpu_seconds).abs() < 1e-9, "{w:?}");
    drop(c);
}

#[test]
fn a_reload_never_relabels_the_cost_with_another_currency() {
    let (registry, charges) = owner();
    let t0 = Instant::now();
    let plan = in_force(&config(PRICED), None, t0);
    let reload = t0 + Duration::from_secs(10);
    let usd = config(&PRICED.replace("cost: {currency: EUR}\n", ""));
    assert_eq!(usd.cost.currency, "USD");
    let next = in_force(&usd, Some(&plan), reload);
    let text = scrape(&registry, &charges, &next, reload + Duration::from_secs(10));
    let eur = value(
        &text,
        "llm_gpu_cost_total",
        r#"currency="EUR",gpu_set="chat""#,
    )
    .unwrap();
    // 20 s at 2 GPUs, 0.001 EUR a GPU-second: the whole history under EUR.
    assert!((eur - 0.04).abs() < 1e-12, "{text}");
    assert!(!text.contains(r#"currency="USD""#), "{text}");
    let price = value(
        &text,
        "llm_gpu_hourly_cost",
        r#"currency="EUR",gpu_set="chat""#,
    );
    assert_eq!(price, Some(3.6), "{text}");
}

/// Two routes with `gpus: 2` each, joined by `gpu_set`.
const SHARED: &str = "routes:
  - name: chat
    match: {path_prefix: /chat/}
    upstream: http://127.0.0.1:1
    gpus: 2
    gpu_hourly_cost: 3.6
    gpu_set: pool
  - name: embed
    upstream: http://127.0.0.1:1
    gpus: 2
    gpu_hourly_cost: 3.6
    gpu_set: pool
";

#[test]
fn routes_of_one_gpu_set_count_its_gpus_once_and_share_its_batch() {
    let (registry, charges) = owner();
    let t0 = Instant::now();
    let secs = Duration::from_secs;
    let plan = in_force(&config(SHARED), None, t0);
    let a = plan.open("chat", t0).unwrap();
    let b = plan.open("embed", t0 + secs(10)).unwrap();
    // a: 10 s alone and 20 s beside b, at 2 GPUs; b: those 20 s and 10 s
    // alone.
    let charged = a.close(t0 + secs(30), &labels("chat", Some("t")), true);
    assert!((charged.gpu_seconds - 40.0).abs() < 1e-9, "{charged:?}");
    let charged = b.close(t0 + secs(40), &labels("embed", Some("t")), true);
    assert!((charged.gpu_seconds - 40.0).abs() < 1e-9, "{charged:?}");

    let text = scrape(&registry, &charges, &plan, t0 + secs(50));
    let set = r#"gpu_set="pool""#;
    // 2 GPUs for 50 s: once, not once per route.
    let total = value(&text, "llm_gpu_seconds_total", set).unwrap();
    assert!((total - 100.0).abs() < 1e-9, "{text}");
    let cost = value(
        &text,
        "llm_gpu_cost_total",
        r#"currency="USD",gpu_set="pool""#,
    );
    assert!((cost.unwrap() - 0.1).abs() < 1e-12, "{text}");
    let idle = value(&text, "llm_gpu_idle_seconds_total", set).unwrap();
    assert!((idle - 20.0).abs() < 1e-9, "{text}");
    let request = |route: &str| {
        let labels =
            format!(r#"good="true",gpu_set="pool",model="m1",route="{route}",slo="",tenant="t""#);
        value(&text, "llm_request_gpu_seconds_total", &labels).unwrap()
    };
    assert!((request("chat") + request("embed") + idle - total).abs() < 1e-9);
    for route in ["chat", "embed"] {
        assert!(
            !text.contains(&format!(r#"gpu_set="{route}""#)),
            "{route} has no set of its own\n{text}"
        );
    }
    let report = charges.report(Some(&plan), t0 + secs(50));
    assert_eq!(report.routes.len(), 1, "{report:?}");
    assert_eq!(report.routes[0].gpu_set, "pool");
    assert_eq!(report.routes[0].routes, ["chat", "embed"]);

    // A reload that keeps the set keeps its ledger, whatever its routes.
    let reload = t0 + secs(60);
    let one = config(&SHARED.replace("  - name: embed\n", "  - name: other\n"));
    let next = in_force(&one, Some(&plan), reload);
    let text = scrape(&registry, &charges, &next, reload);
    let total = value(&text, "llm_gpu_seconds_total", set).unwrap();
    assert!((total - 120.0).abs() < 1e-9, "{text}");
    // Without the key, each route has GPUs of its own, counted from 0.
    let apart = config(&SHARED.replace("    gpu_set: pool\n", ""));
    let last = in_force(&apart, Some(&next), reload + secs(10));
    let text = scrape(&registry, &charges, &last, reload + secs(20));
    for route in ["chat", "embed"] {
        let labels = format!(r#"gpu_set="{route}""#);
        let total = value(&text, "llm_gpu_seconds_total", &labels).unwrap();
        assert!((total - 20.0).abs() < 1e-9, "{text}");
    }
    assert!(!text.contains(set), "{text}");
}
