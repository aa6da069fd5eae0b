//! The exporter of engine and GPU figures, over readings made by hand.

// Panicking on unexpected input is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use prometheus::{Encoder, TextEncoder};
use telemetry::{EngineFigures, EngineReading, GpuAggregate, ModelReading, Server, Spread};

use super::*;
use crate::scrape::Latest;

const INTERVAL: Duration = Duration::from_secs(5);

fn telemetry() -> Engines {
    Engines::new("llm", Arc::new(Live::new(Instant::now(), 0.0))).unwrap()
}

/// The exposition of `t` filled from `readings` at `now`.
fn text(t: &Engines, counted: &mut Counted, readings: Option<&Readings>, now: Instant) -> String {
    t.fill(counted, readings, &[], now);
    let mut out = Vec::new();
    TextEncoder::new().encode(&t.families(), &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

fn engine() -> Reading {
    Reading::Engine(EngineReading {
        server: Some(Server::Vllm),
        models: vec![ModelReading {
            model: Some("llama".to_owned()),
            figures: EngineFigures {
                running: Some(12.0),
                waiting: Some(3.0),
                kv_cache_usage: Some(0.5),
                prefix_cache_queries: Some(100.0),
                prefix_cache_hits: Some(25.0),
                prefix_cache_hit_rate: Some(0.25),
            },
        }],
        ..EngineReading::default()
    })
}

fn gpus(count: usize) -> Reading {
    let spread = |mean, max| Spread {
        mean: Some(mean),
        max: Some(max),
        reporting: count,
    };
    Reading::Gpu(GpuAggregate {
        count,
        utilization_percent: spread(50.0, 90.0),
        framebuffer_used_mib: spread(1024.0, 2048.0),
        graphics_engine_active: spread(0.4, 0.8),
        sm_active: spread(0.3, 0.6),
        // A figure no GPU reports is unknown: no sample.
        dram_active: Spread::default(),
        energy: Vec::new(),
    })
}

/// Readings of both targets with the engine's page and 2 GPUs, read at
/// `at`.
fn read_both(at: Instant) -> Readings {
    let r = readings();
    r.store_by_hand(
        0,
        Latest {
            at,
            reading: engine(),
        },
    );
    r.store_by_hand(
        1,
        Latest {
            at,
            reading: gpus(2),
        },
    );
    r
}

fn readings() -> Readings {
    Readings::by_hand(&[
        ("chat", Page::Engine, INTERVAL),
        ("chat", Page::Gpu, INTERVAL),
    ])
}

#[test]
fn fresh_readings_are_exported_under_our_names_with_the_route() {
    let t = telemetry();
    let at = Instant::now();
    let r = read_both(at);
    let out = text(&t, &mut Counted::default(), Some(&r), at);
    for line in [
        r#"llm_engine_info{route="chat",server="vllm"} 1"#,
        r#"llm_engine_requests_running{model="llama",route="chat"} 12"#,
        r#"llm_engine_requests_waiting{model="llama",route="chat"} 3"#,
        r#"llm_engine_kv_cache_usage_ratio{model="llama",route="chat"} 0.5"#,
        r#"llm_engine_prefix_cache_hit_ratio{model="llama",route="chat"} 0.25"#,
        r#"llm_gpus{route="chat"} 2"#,
        r#"llm_gpu_utilization_ratio{route="chat",stat="mean"} 0.5"#,
        r#"llm_gpu_utilization_ratio{route="chat",stat="max"} 0.9"#,
        r#"llm_gpu_framebuffer_used_bytes{route="chat",stat="mean"} 1073741824"#,
        r#"llm_gpu_framebuffer_used_bytes{route="chat",stat="max"} 2147483648"#,
        r#"llm_gpu_graphics_engine_active_ratio{route="chat",stat="max"} 0.8"#,
        r#"llm_gpu_sm_active_ratio{route="chat",stat="mean"} 0.3"#,
        r#"tokenmeter_scrape_failures_total{reason="timeout",route="chat",target="gpu"} 0"#,
    ] {
        assert!(out.contains(line), "{line} missing from\n{out}");
    }
    assert!(!out.contains("llm_gpu_dram_active_ratio{"), "{out}");
}

#[test]
fn stale_readings_vanish_rather_than_freeze() {
    let t = telemetry();
    let at = Instant::now();
    let r = read_both(at);
    let mut counted = Counted::default();
    let fresh = text(&t, &mut counted, Some(&r), at + INTERVAL * 3);
    assert!(fresh.contains("llm_engine_requests_running{"), "{fresh}");
    let stale = text(
        &t,
        &mut counted,
        Some(&r),
        at + INTERVAL * 3 + Duration::from_millis(1),
    );
    for gone in ["llm_engine_", "llm_gpus{", "llm_gpu_utilization_ratio{"] {
        assert!(!stale.contains(gone), "{gone} still in\n{stale}");
    }
    // The counters stay.
    assert!(
        stale.contains("tokenmeter_scrape_failures_total{"),
        "{stale}"
    );
    // No scraper at all: no figures either.
    let none = text(&t, &mut counted, None, at);
    assert!(!none.contains("llm_engine_"), "{none}");
}

#[test]
fn failures_keep_growing_across_scrapers() {
    let t = telemetry();
    let mut counted = Counted::default();
    let at = Instant::now();
    let first = readings();
    first.fail_by_hand(0, Reason::Connect, at);
    first.fail_by_hand(0, Reason::Connect, at);
    first.fail_by_hand(1, Reason::TooLarge, at);
    first.store_by_hand(
        1,
        Latest {
            at,
            reading: gpus(4),
        },
    );
    first.store_by_hand(
        1,
        Latest {
            at: at + INTERVAL,
            reading: gpus(4),
        },
    );
    let out = text(&t, &mut counted, Some(&first), at + INTERVAL);
    assert!(
        out.contains(
            r#"tokenmeter_scrape_failures_total{reason="connect",route="chat",target="engine"} 2"#
        ),
        "{out}"
    );
    assert!(
        out.contains(
            r#"tokenmeter_scrape_failures_total{reason="too_large",route="chat",target="gpu"} 1"#
        ),
        "{out}"
    );
    // Read again: nothing is counted twice.
    first.fail_by_hand(0, Reason::Connect, at);
    let out = text(&t, &mut counted, Some(&first), at + INTERVAL);
    assert!(
        out.contains(
            r#"tokenmeter_scrape_failures_total{reason="connect",route="chat",target="engine"} 3"#
        ),
        "{out}"
    );
    // A reload's new scraper starts from 0; its counts are added on top.
    let second = readings();
    second.fail_by_hand(0, Reason::Connect, at);
    second.store_by_hand(
        1,
        Latest {
            at,
            reading: gpus(1),
        },
    );
    second.store_by_hand(
        1,
        Latest {
            at: at + INTERVAL,
            reading: gpus(1),
        },
    );
    let out = text(&t, &mut counted, Some(&second), at + INTERVAL);
    assert!(
        out.contains(
            r#"tokenmeter_scrape_failures_total{reason="connect",route="chat",target="engine"} 4"#
        ),
        "{out}"
    );
}

#[test]
fn a_route_without_gpus_has_no_tokens_per_gpu_second() {
    let t = telemetry();
    let r = readings();
    let at = Instant::now();
    r.store_by_hand(
        1,
        Latest {
            at,
            reading: gpus(0),
        },
    );
    t.live.series("chat", "", "").start(at);
    let out = text(&t, &mut Counted::default(), Some(&r), at);
    assert!(out.contains(r#"llm_gpus{route="chat"} 0"#), "{out}");
    assert!(!out.contains("per_gpu_second{"), "{out}");
}

/// The families are the catalogue's, with its kinds, help and labels.
#[test]
fn the_families_are_the_catalogue_s() {
    let t = telemetry();
    let at = Instant::now();
    let r = read_both(at);
    t.fill(&mut Counted::default(), Some(&r), &[], at);
    let registry = prometheus::Registry::new();
    registry
        .register(Box::new(EnginesCollector(Arc::new(telemetry()))))
        .unwrap();
    for f in names::TELEMETRY {
        let again = prometheus::IntGauge::new(f.name("llm"), "again").unwrap();
        assert!(
            registry.register(Box::new(again)).is_err(),
            "{}",
            f.name("llm")
        );
    }
    for family in t.families() {
        let f = names::TELEMETRY
            .iter()
            .find(|f| f.name("llm") == family.name())
            .unwrap_or_else(|| panic!("{} is not in the catalogue", family.name()));
        assert_eq!(family.help(), f.help);
        let kind = match family.get_field_type() {
            prometheus::proto::MetricType::COUNTER => names::Kind::Counter,
            _ => names::Kind::Gauge,
        };
        assert_eq!(kind, f.kind, "{}", family.name());
        for metric in family.get_metric() {
            let labels: Vec<&str> = metric.get_label().iter().map(|l| l.name()).collect();
            let mut want = f.labels.to_vec();
            want.sort_unstable();
            assert_eq!(labels, want, "{}", family.name());
        }
    }
}

#[test]
fn the_report_shows_what_the_families_hold() {
    let t = telemetry();
    assert_eq!(
        t.report(None, &[], Instant::now()),
        TelemetryReport::default()
    );
    // A route with `gpus: 4` and no page: its count, no figure.
    let fixed = t.report(None, &[(Arc::from("batch"), 4)], Instant::now());
    let counted = fixed.routes[0].gpus.as_ref().unwrap();
    assert_eq!(
        (fixed.routes[0].route.as_str(), counted.count),
        ("batch", 4)
    );
    assert_eq!(counted.utilization_ratio.mean, None);
    // One whose engine is scraped: one entry, with both.
    let r = readings();
    r.store_by_hand(
        0,
        Latest {
            at: Instant::now(),
            reading: engine(),
        },
    );
    let both = t.report(Some(&r), &[(Arc::from("chat"), 2)], Instant::now());
    assert_eq!(both.routes.len(), 1, "{both:?}");
    assert!(both.routes[0].engine.is_some());
    assert_eq!(both.routes[0].gpus.as_ref().map(|g| g.count), Some(2));
    let at = Instant::now();
    let r = read_both(at);
    let report = t.report(Some(&r), &[], at);
    assert_eq!(report.routes.len(), 1);
    let chat = &report.routes[0];
    assert_eq!(chat.route, "chat");
    let engine = chat.engine.as_ref().unwrap();
    assert_eq!(engine.server, "vllm");
    assert_eq!(engine.models[0].model, "llama");
    assert_eq!(engine.models[0].running, Some(12.0));
    assert_eq!(engine.models[0].prefix_cache_hit_ratio, Some(0.25));
    let gpus = chat.gpus.as_ref().unwrap();
    assert_eq!(gpus.count, 2);
    assert_eq!(gpus.utilization_ratio.max, Some(0.9));
    assert_eq!(gpus.dram_active_ratio.mean, None);
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["routes"][0]["gpus"]["sm_active_ratio"]["mean"], 0.3);
    // Stale: nothing.
    let later = t.report(Some(&r), &[], at + INTERVAL * 4);
    assert!(later.routes.is_empty(), "{later:?}");
}
