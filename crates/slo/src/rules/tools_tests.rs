//! The PromQL of each kind of histogram, the object names, and the Pyrra
//! and Sloth objects checked as data. (`tests/it/slo_tools.rs` checks them
//! against the tools' schemas and promtool.)

// Panicking on unexpected input is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use super::objects::object_name;
use super::tests::class_named as class;
use super::*;

#[test]
fn each_kind_of_histogram_is_read_its_own_way() {
    let (c, n) = (Histograms::Classic, Histograms::Native);
    assert_eq!(
        c.quantile("0.95", "h", "slo=\"a\"", "route", "5m"),
        "histogram_quantile(0.95, sum by (route, le) (rate(h_bucket{slo=\"a\"}[5m])))"
    );
    assert_eq!(
        n.quantile("0.95", "h", "slo=\"a\"", "route", "5m"),
        "histogram_quantile(0.95, sum by (route) (rate(h{slo=\"a\"}[5m])))"
    );
    assert_eq!(
        n.quantile("0.5", "h", "", "", "5m"),
        "histogram_quantile(0.5, sum(rate(h{}[5m])))"
    );
    assert_eq!(
        c.count_rate("h", "", "slo", "1h"),
        "sum by (slo) (rate(h_count{}[1h]))"
    );
    assert_eq!(
        n.sum_rate("h", "", "slo", "1h"),
        "histogram_sum(sum by (slo) (rate(h{}[1h])))"
    );
    let half = Duration::from_millis(500);
    assert_eq!(
        c.fraction_within(half, "h", "slo=\"a\"", "slo", "5m"),
        "sum by (slo) (rate(h_bucket{slo=\"a\",le=\"0.5\"}[5m]))\n/\nsum by (slo) (rate(h_count{slo=\"a\"}[5m]))"
    );
    assert_eq!(
        n.fraction_within(half, "h", "slo=\"a\"", "slo", "5m"),
        "histogram_fraction(0, 0.5, sum by (slo) (rate(h{slo=\"a\"}[5m])))"
    );
    assert_eq!(
        n.heatmap("h", "x=\"1\"", "1m"),
        "sum(increase(h{x=\"1\"}[1m]))"
    );
}

#[test]
fn durations_are_prometheus_durations_and_bounds_le_values() {
    assert_eq!(prom_duration(Duration::from_secs(28 * 86_400)), "28d");
    assert_eq!(prom_duration(Duration::from_secs(7_200)), "2h");
    assert_eq!(prom_duration(Duration::from_secs(300)), "5m");
    assert_eq!(prom_duration(Duration::from_secs(90)), "90s");
    assert_eq!(prom_duration(Duration::from_millis(500)), "500ms");
    assert_eq!(prom_duration(Duration::from_millis(1500)), "1500ms");
    assert_eq!(prom_duration(Duration::from_micros(10)), "1ms");
    assert_eq!(bound_label(Duration::from_secs(3)), "3");
    assert_eq!(bound_label(Duration::from_millis(50)), "0.05");
}

#[test]
fn object_names_are_dns_1123_labels_and_distinct() {
    assert_eq!(object_name("chat", "ttft"), "chat-ttft");
    assert_eq!(
        object_name("code-completion", "errors"),
        "code-completion-errors"
    );
    let odd = ["Chat", "chat_", "a.b:c", "_", &"x".repeat(80)];
    let mut seen = std::collections::HashSet::new();
    for name in odd {
        let n = object_name(name, "ttft");
        assert!(n.len() <= 63, "{n}");
        assert!(
            n.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
            "{n}"
        );
        assert!(!n.starts_with('-') && !n.ends_with('-'), "{n}");
        assert!(seen.insert(n.clone()), "{n} twice");
        assert_ne!(n, "chat-ttft");
    }
}

#[test]
fn pyrra_objects_follow_the_histograms_and_the_goodput_target() {
    let classes = [class("chat", None), class("docs", Some(0.9))];
    let classic = pyrra::pyrra(&classes, "llm", Histograms::Classic);
    let names: Vec<&str> = classic.iter().map(|o| o.metadata.name.as_str()).collect();
    // A class without a goodput target has no errors objective.
    assert_eq!(names, ["chat-ttft", "docs-ttft", "docs-errors"]);
    let latency = classic[0].spec.indicator.latency.as_ref().unwrap();
    assert_eq!(
        latency.success.metric,
        "llm_time_to_first_token_seconds_bucket{slo=\"chat\",le=\"0.5\"}"
    );
    assert_eq!(
        latency.total.metric,
        "llm_time_to_first_token_seconds_count{slo=\"chat\"}"
    );
    assert_eq!(classic[0].spec.target, "95");
    assert_eq!(classic[0].spec.window, "28d");
    let errors = classic[2].spec.indicator.ratio.as_ref().unwrap();
    assert_eq!(
        errors.errors.metric,
        "llm_requests_total{slo=\"docs\",outcome=~\"upstream_error|timeout|proxy_error\"}"
    );
    assert_eq!(classic[2].spec.target, "90");
    let native = pyrra::pyrra(&classes, "llm", Histograms::Native);
    let latency = native[0].spec.indicator.latency_native.as_ref().unwrap();
    assert_eq!(latency.latency, "500ms");
    assert_eq!(
        latency.total.metric,
        "llm_time_to_first_token_seconds{slo=\"chat\"}"
    );
    assert!(native[0].spec.indicator.latency.is_none());
    let yaml = pyrra::to_yaml(&native).unwrap();
    assert_eq!(yaml.matches("kind: ServiceLevelObjective").count(), 3);
}

#[test]
fn sloth_specs_are_one_per_window_with_the_queries_windowed() {
    let mut week = class("week", Some(0.99));
    week.window = Duration::from_secs(7 * 86_400);
    let classes = [class("chat", None), week];
    let specs = sloth::sloth(&classes, "llm", Histograms::Classic);
    assert_eq!(specs.len(), 2);
    assert_eq!(specs[0].0, Duration::from_secs(7 * 86_400));
    let week = &specs[0].1.slos;
    assert_eq!(week.len(), 2);
    assert_eq!(week[1].name, "week-errors");
    assert_eq!(week[1].objective, 99.0);
    let chat = &specs[1].1.slos[0].sli.events;
    assert_eq!(
        chat.error_query,
        "sum by (slo) (rate(llm_time_to_first_token_seconds_count{slo=\"chat\"}[{{.window}}]))\n-\nsum by (slo) (rate(llm_time_to_first_token_seconds_bucket{slo=\"chat\",le=\"0.5\"}[{{.window}}]))"
    );
    let native = sloth::sloth(&classes, "llm", Histograms::Native);
    let chat = &native[1].1.slos[0].sli.events;
    assert_eq!(
        chat.total_query,
        "histogram_count(sum by (slo) (rate(llm_time_to_first_token_seconds{slo=\"chat\"}[{{.window}}])))"
    );
    assert!(chat.error_query.contains(
        "(1 - histogram_fraction(0, 0.5, sum by (slo) (rate(llm_time_to_first_token_seconds{slo=\"chat\"}[{{.window}}]))))"
    ));
    let yaml = sloth::to_yaml(&specs).unwrap();
    assert!(yaml.contains("sloth generate --default-slo-period=7d"));
    assert!(yaml.contains("sloth generate --default-slo-period=28d"));
}

#[test]
fn native_latency_rules_read_the_histograms_by_class() {
    let groups = native_latency_groups(&[class("chat", None)], "llm");
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].name, "latency:chat");
    let rules = &groups[0].rules;
    assert_eq!(rules.len(), 2 * LATENCY_WINDOWS.len());
    assert_eq!(
        rules[0].record.as_deref(),
        Some("slo:llm_slo_latency_within:ratio_rate5m")
    );
    assert_eq!(
        rules[0].expr,
        "histogram_fraction(0, 0.5, sum by (slo) (rate(llm_time_to_first_token_seconds{slo=\"chat\"}[5m])))"
    );
    assert_eq!(rules[1].labels["quantile"], "0.95");
    assert_eq!(
        rules[1].expr,
        "histogram_quantile(0.95, sum by (slo) (rate(llm_time_to_first_token_seconds{slo=\"chat\"}[5m])))"
    );
}
