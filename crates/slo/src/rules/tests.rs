//! The rule file checked as text, and by `promtool` for what text cannot
//! show: that Prometheus takes the rules, that the capacity rules give
//! the fleet's knee from several replicas' counters, and that the
//! chargeback rules give the fleet's bill from them.

// Panicking on unexpected input is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use super::burn::round_percent;
use super::*;
use crate::capacity::knee;
use crate::class::{Goodput, Objective, ObjectiveKind, SloClass};

fn class(goodput_target: Option<f64>) -> SloClass {
    class_named("chat", goodput_target)
}

/// A class `name` of one objective, TTFT at most 500 ms for 95 % of
/// requests, with a goodput target when given.
pub(super) fn class_named(name: &str, goodput_target: Option<f64>) -> SloClass {
    SloClass {
        name: name.into(),
        description: name.into(),
        window: crate::class::DEFAULT_WINDOW,
        objectives: vec![Objective {
            kind: ObjectiveKind::Ttft,
            threshold: Duration::from_millis(500),
            target: 0.95,
        }],
        goodput: Goodput {
            require: vec![ObjectiveKind::Ttft],
            target: goodput_target,
        },
        per_tenant_alerts: false,
        exclude_slow_readers: false,
    }
}

#[test]
fn every_sli_is_recorded_over_every_window_and_alerts_need_a_target() {
    let file = rules(&[class(None)], "llm");
    assert_eq!(file.groups.len(), 1);
    let group = &file.groups[0].rules;
    // ttft and goodput, seven windows each, recorded before any alert
    // reads them.
    let recorded = 2 * WINDOWS.len();
    assert!(group[..recorded].iter().all(|r| r.record.is_some()));
    // Only ttft has a target: page and ticket.
    let alerts = &group[recorded..];
    assert_eq!(alerts.len(), 2);
    assert!(alerts[0].expr.contains("(14.4 * (1 - 0.95))"));
    assert!(
        alerts[0]
            .expr
            .contains("slo:llm_slo_errors:ratio_rate5m{slo=\"chat\",objective=\"ttft\"}")
    );
    assert_eq!(alerts[1].labels["severity"], "ticket");
    let with_goodput = rules(&[class(Some(0.9))], "llm");
    assert_eq!(with_goodput.groups[0].rules.len(), recorded + 4);
    assert!(
        with_goodput.groups[0]
            .rules
            .iter()
            .all(|r| !r.expr.contains("tenant"))
    );
}

#[test]
fn per_tenant_alerts_add_ratios_and_alerts_by_tenant() {
    let mut c = class(Some(0.9));
    c.per_tenant_alerts = true;
    let file = rules(&[c], "llm");
    let group = &file.groups[0].rules;
    let recorded = 2 * 2 * WINDOWS.len();
    assert_eq!(group.len(), recorded + 2 * 4);
    assert!(group[..recorded].iter().all(|r| r.record.is_some()));
    let by_tenant: Vec<&Rule> = group
        .iter()
        .filter(|r| r.record.as_deref() == Some("slo:llm_slo_errors_by_tenant:ratio_rate5m"))
        .collect();
    assert_eq!(by_tenant.len(), 2);
    assert_eq!(
        by_tenant[0].expr,
        "sum by (slo, tenant) (rate(llm_slo_violations_total{slo=\"chat\",objective=\"ttft\",tenant!=\"\"}[5m]))\n/\nsum by (slo, tenant) (rate(llm_slo_requests_total{slo=\"chat\",tenant!=\"\"}[5m]))"
    );
    let alerts: Vec<&str> = group.iter().filter_map(|r| r.alert.as_deref()).collect();
    assert_eq!(
        alerts,
        [
            "SloErrorBudgetBurnFast",
            "SloErrorBudgetBurnSlow",
            "SloErrorBudgetBurnFast",
            "SloErrorBudgetBurnSlow",
            "SloErrorBudgetBurnFastPerTenant",
            "SloErrorBudgetBurnSlowPerTenant",
            "SloErrorBudgetBurnFastPerTenant",
            "SloErrorBudgetBurnSlowPerTenant",
        ]
    );
    let last = group.last().unwrap();
    assert!(
        last.expr.contains(
            "slo:llm_slo_errors_by_tenant:ratio_rate1d{slo=\"chat\",objective=\"goodput\"}"
        )
    );
    assert!(last.annotations["description"].contains("for tenant {{ $labels.tenant }}"));
}

#[test]
fn capacity_rules_write_out_the_knee_rule_bucket_by_bucket() {
    let mut without = class(None);
    without.name = "none".into();
    without.objectives.clear();
    let groups = capacity_groups(&[class(Some(0.9)), without], "llm");
    // A class without a target has no knee.
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].name, "capacity:chat");
    let rules = &groups[0].rules;
    let names: Vec<&str> = rules.iter().filter_map(|r| r.record.as_deref()).collect();
    // Per window: judged, ttft and goodput met, holds, knee, capacity
    // measured and lower, headroom.
    assert_eq!(names.len(), 2 * 8);
    assert_eq!(
        &names[..8],
        [
            "slo:llm_slo_load_judged:increase5m",
            "slo:llm_slo_load_met:ratio_increase5m",
            "slo:llm_slo_load_met:ratio_increase5m",
            "slo:llm_slo_load_holds:increase5m",
            "slo:llm_slo_load_knee:increase5m",
            "slo:llm_slo_capacity_concurrency:increase5m",
            "slo:llm_slo_capacity_concurrency:increase5m",
            "slo:llm_slo_headroom_concurrency:increase5m",
        ]
    );
    assert!(names[8..].iter().all(|n| n.ends_with("increase1h")));
    assert_eq!(
        rules[0].expr,
        "sum by (route, model, slo, load_le) (increase(llm_slo_load_requests_total{slo=\"chat\"}[5m]))"
    );
    assert_eq!(rules[1].labels["objective"], "ttft");
    assert!(rules[1].expr.contains(
        "sum by (route, model, slo, load_le) (increase(llm_slo_load_violations_total{slo=\"chat\",objective=\"ttft\"}[5m]))\n  or\n    slo:llm_slo_load_judged:increase5m{slo=\"chat\"} * 0"
    ));
    assert_eq!(rules[2].labels["objective"], "goodput");
    assert!(rules[2].expr.contains("verdict=\"good\""));
    let holds = &rules[3].expr;
    assert!(holds.contains(
        "slo:llm_slo_load_met:ratio_increase5m{slo=\"chat\",objective=\"ttft\"} < bool 0.95"
    ));
    assert!(holds.contains("objective=\"goodput\"} < bool 0.9"));
    // At least 20 (one miss of p95), and enough for one miss of 90 %.
    assert!(holds.ends_with("slo:llm_slo_load_judged:increase5m{slo=\"chat\"} >= 20"));
    let knee = &rules[4].expr;
    assert!(knee.starts_with(
        "max by (route, model, slo) (\n    slo:llm_slo_load_holds:increase5m{slo=\"chat\",load_le=\"1\"} == 0\n  or\n    (slo:llm_slo_load_holds:increase5m{slo=\"chat\",load_le=\"1\"} == 1) * 1\n  or"
    ));
    assert!(knee.contains(
        "(slo:llm_slo_load_holds:increase5m{slo=\"chat\",load_le=\"6\"} == 1) * 6 unless on (route, model, slo) slo:llm_slo_load_holds:increase5m{slo=\"chat\",load_le=~\"1|2|3|4\"} == 0"
    ));
    // The overflow bucket stands for its lowest load.
    assert!(knee.contains("load_le=\"+Inf\"} == 1) * 2049 unless"));
    assert_eq!(knee.matches(" unless ").count(), knee::BUCKETS - 1);
    assert_eq!(
        rules[5].expr,
        "slo:llm_slo_load_knee:increase5m{slo=\"chat\"}\nand on (route, model, slo)\nslo:llm_slo_load_holds:increase5m{slo=\"chat\"} == 0"
    );
    assert_eq!(rules[5].labels["bound"], "measured");
    assert_eq!(rules[6].labels["bound"], "lower");
    assert!(rules[6].expr.contains("\nunless on (route, model, slo)\n"));
    assert_eq!(
        rules[7].expr,
        "slo:llm_slo_capacity_concurrency:increase5m{slo=\"chat\"}\n- on (route, model) group_left\nsum by (route, model) (llm_requests_in_flight)"
    );
}

/// Two replicas in front of one engine, each counting requests by the
/// engine's load: summed, their counters give the fleet's knee, which
/// neither replica's own counts would (each has too few at load 4).
/// `promtool test rules` checks the generated rules on those series.
#[test]
fn capacity_rules_give_the_fleets_knee_needs_tool_promtool() {
    let dir = std::env::temp_dir().join(format!("slo-capacity-rules-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // And a class of every objective and a goodput target, for
    // `promtool check rules`.
    let mut every = class(Some(0.9));
    every.name = "every".into();
    for (kind, target) in [(ObjectiveKind::Tpot, 0.99), (ObjectiveKind::E2el, 0.999)] {
        every.objectives.push(Objective {
            kind,
            threshold: Duration::from_secs(1),
            target,
        });
    }
    let classes = [class(None), every];
    let mut file = rules(&classes, "llm");
    file.groups.extend(capacity_groups(&classes, "llm"));
    assert_eq!(file.groups.len(), 4);
    check_and_test(&dir, &file, CAPACITY_TEST);
}

/// Writes `file` as `rules.yml` and `test` as `rules.test.yaml` in `dir`,
/// runs `promtool check rules` and `promtool test rules` there, and removes
/// `dir`.
fn check_and_test(dir: &std::path::Path, file: &RuleFile, test: &str) {
    std::fs::write(dir.join("rules.yml"), to_yaml(file).unwrap()).unwrap();
    std::fs::write(dir.join("rules.test.yaml"), test).unwrap();
    for args in [
        &["check", "rules", "rules.yml"][..],
        &["test", "rules", "rules.test.yaml"][..],
    ] {
        let out = std::process::Command::new("promtool")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("promtool not found: install Debian's `prometheus` package (see README)");
        assert!(
            out.status.success(),
            "promtool {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// Per minute and replica (a, b), by load bucket: model `m` holds TTFT
/// p95 up to 4 and breaks from 5 (knee 4; at 4 each replica has 15
/// requests in 5 minutes, too few alone, 30 together); `m2` saw loads
/// 1 and 2 only (a lower bound, 2); `m3` breaks at 1 (0); `m4` has too
/// few requests (nothing). In flight now: 3 to `m`, 1 to `m2` and `m3`.
const CAPACITY_TEST: &str = r#"rule_files:
  - rules.yml
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - {series: 'llm_slo_load_requests_total{instance="a",route="r",model="m",slo="chat",load_le="1",verdict="good"}', values: '0+5x10'}
      - {series: 'llm_slo_load_requests_total{instance="b",route="r",model="m",slo="chat",load_le="1",verdict="good"}', values: '0+5x10'}
      - {series: 'llm_slo_load_requests_total{instance="a",route="r",model="m",slo="chat",load_le="2",verdict="good"}', values: '0+5x10'}
      - {series: 'llm_slo_load_requests_total{instance="b",route="r",model="m",slo="chat",load_le="3",verdict="good"}', values: '0+5x10'}
      - {series: 'llm_slo_load_requests_total{instance="a",route="r",model="m",slo="chat",load_le="4",verdict="good"}', values: '0+3x10'}
      - {series: 'llm_slo_load_requests_total{instance="b",route="r",model="m",slo="chat",load_le="4",verdict="good"}', values: '0+3x10'}
      - {series: 'llm_slo_load_requests_total{instance="a",route="r",model="m",slo="chat",load_le="6",verdict="good"}', values: '0+3x10'}
      - {series: 'llm_slo_load_requests_total{instance="a",route="r",model="m",slo="chat",load_le="6",verdict="bad"}', values: '0+1x10'}
      - {series: 'llm_slo_load_violations_total{instance="a",route="r",model="m",slo="chat",load_le="6",objective="ttft"}', values: '0+1x10'}
      - {series: 'llm_slo_load_requests_total{instance="b",route="r",model="m",slo="chat",load_le="8",verdict="good"}', values: '0+2x10'}
      - {series: 'llm_slo_load_requests_total{instance="b",route="r",model="m",slo="chat",load_le="8",verdict="bad"}', values: '0+2x10'}
      - {series: 'llm_slo_load_violations_total{instance="b",route="r",model="m",slo="chat",load_le="8",objective="ttft"}', values: '0+2x10'}
      - {series: 'llm_slo_load_requests_total{instance="a",route="r",model="m2",slo="chat",load_le="1",verdict="good"}', values: '0+5x10'}
      - {series: 'llm_slo_load_requests_total{instance="b",route="r",model="m2",slo="chat",load_le="2",verdict="good"}', values: '0+5x10'}
      - {series: 'llm_slo_load_requests_total{instance="a",route="r",model="m3",slo="chat",load_le="1",verdict="good"}', values: '0+2x10'}
      - {series: 'llm_slo_load_requests_total{instance="a",route="r",model="m3",slo="chat",load_le="1",verdict="bad"}', values: '0+3x10'}
      - {series: 'llm_slo_load_violations_total{instance="a",route="r",model="m3",slo="chat",load_le="1",objective="ttft"}', values: '0+3x10'}
      - {series: 'llm_slo_load_requests_total{instance="a",route="r",model="m4",slo="chat",load_le="1",verdict="good"}', values: '0+1x10'}
      - {series: 'llm_requests_in_flight{instance="a",route="r",model="m",slo="chat"}', values: '2x10'}
      - {series: 'llm_requests_in_flight{instance="b",route="r",model="m",slo="chat"}', values: '1x10'}
      - {series: 'llm_requests_in_flight{instance="a",route="r",model="m2",slo="chat"}', values: '1x10'}
      - {series: 'llm_requests_in_flight{instance="b",route="r",model="m3",slo="chat"}', values: '1x10'}
    promql_expr_test:
      - expr: slo:llm_slo_load_holds:increase5m{model="m"}
        eval_time: 10m
        exp_samples:
          - {labels: 'slo:llm_slo_load_holds:increase5m{route="r",model="m",slo="chat",load_le="1"}', value: 1}
          - {labels: 'slo:llm_slo_load_holds:increase5m{route="r",model="m",slo="chat",load_le="2"}', value: 1}
          - {labels: 'slo:llm_slo_load_holds:increase5m{route="r",model="m",slo="chat",load_le="3"}', value: 1}
          - {labels: 'slo:llm_slo_load_holds:increase5m{route="r",model="m",slo="chat",load_le="4"}', value: 1}
          - {labels: 'slo:llm_slo_load_holds:increase5m{route="r",model="m",slo="chat",load_le="6"}', value: 0}
          - {labels: 'slo:llm_slo_load_holds:increase5m{route="r",model="m",slo="chat",load_le="8"}', value: 0}
      - expr: slo:llm_slo_capacity_concurrency:increase5m
        eval_time: 10m
        exp_samples:
          - {labels: 'slo:llm_slo_capacity_concurrency:increase5m{route="r",model="m",slo="chat",bound="measured"}', value: 4}
          - {labels: 'slo:llm_slo_capacity_concurrency:increase5m{route="r",model="m2",slo="chat",bound="lower"}', value: 2}
          - {labels: 'slo:llm_slo_capacity_concurrency:increase5m{route="r",model="m3",slo="chat",bound="measured"}', value: 0}
      - expr: slo:llm_slo_headroom_concurrency:increase5m
        eval_time: 10m
        exp_samples:
          - {labels: 'slo:llm_slo_headroom_concurrency:increase5m{route="r",model="m",slo="chat",bound="measured"}', value: 1}
          - {labels: 'slo:llm_slo_headroom_concurrency:increase5m{route="r",model="m2",slo="chat",bound="lower"}', value: 1}
          - {labels: 'slo:llm_slo_headroom_concurrency:increase5m{route="r",model="m3",slo="chat",bound="measured"}', value: -1}
      - expr: slo:llm_slo_capacity_concurrency:increase1h{model="m"}
        eval_time: 10m
        exp_samples:
          - {labels: 'slo:llm_slo_capacity_concurrency:increase1h{route="r",model="m",slo="chat",bound="measured"}', value: 4}
"#;

#[test]
fn percent_text_has_no_float_noise() {
    assert_eq!(round_percent(1.0 - 0.95).to_string(), "5");
    assert_eq!(round_percent(1.0 - 0.999).to_string(), "0.1");
}

#[test]
fn chargeback_rules_are_recorded_over_each_window_in_evaluation_order() {
    let group = chargeback_group("acme", &CHARGEBACK_WINDOWS);
    assert_eq!(group.name, "chargeback");
    let names: Vec<&str> = group
        .rules
        .iter()
        .map(|r| r.record.as_deref().unwrap())
        .collect();
    assert_eq!(names.len(), 2 * 8);
    assert_eq!(
        &names[..8],
        [
            "chargeback:acme_gpu_seconds:rate5m",
            "chargeback:acme_request_gpu_seconds:rate5m",
            "chargeback:acme_gpu_idle_seconds:rate5m",
            "chargeback:acme_request_gpu_cost:rate5m",
            "chargeback:acme_gpu_idle:ratio_rate5m",
            "chargeback:acme_request_gpu_waste:ratio_rate5m",
            "chargeback:acme_request_gpu_cost_per_million_good_output_tokens:ratio_rate5m",
            "chargeback:acme_request_gpu_joules_per_good_output_token:ratio_rate5m",
        ]
    );
    assert!(names[8..].iter().all(|n| n.ends_with("rate1h")));
    let exprs: Vec<&str> = group.rules.iter().map(|r| r.expr.as_str()).collect();
    // The GPUs and idle are every replica's, so averaged; the tenants'
    // charges are each replica's own, so summed.
    assert_eq!(
        exprs[0],
        "avg by (gpu_set) (rate(acme_gpu_seconds_total[5m]))"
    );
    assert_eq!(
        exprs[1],
        "sum by (gpu_set, route, tenant) (rate(acme_request_gpu_seconds_total[5m]))"
    );
    assert_eq!(
        exprs[2],
        "avg by (gpu_set) (rate(acme_gpu_idle_seconds_total[5m]))"
    );
    // Each tenant's bill, in its currency.
    assert_eq!(
        exprs[3],
        "sum by (gpu_set, route, tenant, currency) (rate(acme_request_gpu_cost_total[5m]))"
    );
    assert_eq!(
        exprs[4],
        "chargeback:acme_gpu_idle_seconds:rate5m\n/\n(chargeback:acme_gpu_seconds:rate5m > 0)"
    );
    assert_eq!(
        exprs[5],
        "(\n  sum by (gpu_set, route, tenant) (rate(acme_request_gpu_seconds_total{good=\"false\"}[5m]))\nor\n  chargeback:acme_request_gpu_seconds:rate5m * 0\n)\n/\n(chargeback:acme_request_gpu_seconds:rate5m > 0)"
    );
    assert!(exprs[6].starts_with(
        "1e6 * (\n  sum by (route, tenant, currency) (rate(acme_request_gpu_cost_total[5m]))\n  / on (route, tenant) group_left ()\n"
    ));
    assert!(
        exprs[6]
            .contains("sum by (route, tenant) (rate(acme_slo_good_output_tokens_total[5m])) > 0")
    );
    assert!(exprs[7].starts_with(
        "sum by (route, tenant) (rate(acme_request_gpu_energy_joules_total[5m]))\n/ on (route, tenant)\n"
    ));
    assert!(
        group
            .rules
            .iter()
            .all(|r| r.labels.is_empty() && r.alert.is_none())
    );
}

/// Two replicas in front of one engine of one GPU, which is busy three
/// quarters of the time: each charges its tenants half of the busy time
/// and counts the same idle quarter. The fleet's tenants plus idle are one
/// replica's GPU time, and the shares come out exact (every rate is a
/// binary fraction, so no rounding).
#[test]
fn chargeback_rules_give_the_fleets_bill_needs_tool_promtool() {
    let dir = std::env::temp_dir().join(format!("slo-chargeback-rules-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = RuleFile {
        groups: vec![chargeback_group("llm", &CHARGEBACK_WINDOWS)],
    };
    check_and_test(&dir, &file, CHARGEBACK_TEST);
}

/// Per minute and replica (a, b) of GPU set `s`, one GPU in front of which
/// are routes `r1` (tenant `t1`) and `r2` (`t2`, `t3`): 60 GPU-seconds,
/// 15 of them idle on both. Charged (GPU-seconds per minute): on a, `t1`
/// 15 good and 7.5 not; on b, `t1` 7.5 good, `t2` 7.5 good, `t3` 7.5 not
/// (each replica 22.5, half the busy 45). So per second, the fleet's `t1`
/// 0.5 (a quarter waste), `t2` 0.125 (none), `t3` 0.125 (all); with idle
/// 0.25 they are the GPU's 1. Cost is 0.25 per GPU-second (900 USD per
/// GPU-hour) and energy 256 J per GPU-second, so `t1`'s 16 good tokens a
/// second (12 on a, 4 on b) cost 0.125 / 16 × 1e6 = 7812.5 USD per
/// million and 128 / 16 = 8 J each; `t2`'s 2 cost 0.03125 / 2 × 1e6 =
/// 15625 and 16 J each; `t3` has no good token, so no such figure. Over
/// 70 minutes, so that the hour's window is covered too.
const CHARGEBACK_TEST: &str = r#"rule_files:
  - rules.yml
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - {series: 'llm_gpu_seconds_total{instance="a",gpu_set="s"}', values: '0+60x70'}
      - {series: 'llm_gpu_seconds_total{instance="b",gpu_set="s"}', values: '0+60x70'}
      - {series: 'llm_gpu_idle_seconds_total{instance="a",gpu_set="s"}', values: '0+15x70'}
      - {series: 'llm_gpu_idle_seconds_total{instance="b",gpu_set="s"}', values: '0+15x70'}
      - {series: 'llm_gpu_other_replicas_seconds_total{instance="a",gpu_set="s"}', values: '0+22.5x70'}
      - {series: 'llm_gpu_other_replicas_seconds_total{instance="b",gpu_set="s"}', values: '0+22.5x70'}
      - {series: 'llm_request_gpu_seconds_total{instance="a",route="r1",gpu_set="s",model="m",tenant="t1",slo="chat",good="true"}', values: '0+15x70'}
      - {series: 'llm_request_gpu_seconds_total{instance="a",route="r1",gpu_set="s",model="m",tenant="t1",slo="chat",good="false"}', values: '0+7.5x70'}
      - {series: 'llm_request_gpu_seconds_total{instance="b",route="r1",gpu_set="s",model="m",tenant="t1",slo="chat",good="true"}', values: '0+7.5x70'}
      - {series: 'llm_request_gpu_seconds_total{instance="b",route="r2",gpu_set="s",model="m",tenant="t2",slo="chat",good="true"}', values: '0+7.5x70'}
      - {series: 'llm_request_gpu_seconds_total{instance="b",route="r2",gpu_set="s",model="m",tenant="t3",slo="chat",good="false"}', values: '0+7.5x70'}
      - {series: 'llm_request_gpu_cost_total{instance="a",route="r1",gpu_set="s",model="m",tenant="t1",slo="chat",good="true",currency="USD"}', values: '0+3.75x70'}
      - {series: 'llm_request_gpu_cost_total{instance="a",route="r1",gpu_set="s",model="m",tenant="t1",slo="chat",good="false",currency="USD"}', values: '0+1.875x70'}
      - {series: 'llm_request_gpu_cost_total{instance="b",route="r1",gpu_set="s",model="m",tenant="t1",slo="chat",good="true",currency="USD"}', values: '0+1.875x70'}
      - {series: 'llm_request_gpu_cost_total{instance="b",route="r2",gpu_set="s",model="m",tenant="t2",slo="chat",good="true",currency="USD"}', values: '0+1.875x70'}
      - {series: 'llm_request_gpu_cost_total{instance="b",route="r2",gpu_set="s",model="m",tenant="t3",slo="chat",good="false",currency="USD"}', values: '0+1.875x70'}
      - {series: 'llm_request_gpu_energy_joules_total{instance="a",route="r1",gpu_set="s",model="m",tenant="t1",slo="chat",good="true"}', values: '0+3840x70'}
      - {series: 'llm_request_gpu_energy_joules_total{instance="a",route="r1",gpu_set="s",model="m",tenant="t1",slo="chat",good="false"}', values: '0+1920x70'}
      - {series: 'llm_request_gpu_energy_joules_total{instance="b",route="r1",gpu_set="s",model="m",tenant="t1",slo="chat",good="true"}', values: '0+1920x70'}
      - {series: 'llm_request_gpu_energy_joules_total{instance="b",route="r2",gpu_set="s",model="m",tenant="t2",slo="chat",good="true"}', values: '0+1920x70'}
      - {series: 'llm_request_gpu_energy_joules_total{instance="b",route="r2",gpu_set="s",model="m",tenant="t3",slo="chat",good="false"}', values: '0+1920x70'}
      - {series: 'llm_slo_good_output_tokens_total{instance="a",route="r1",model="m",tenant="t1",slo="chat",operation="chat"}', values: '0+720x70'}
      - {series: 'llm_slo_good_output_tokens_total{instance="b",route="r1",model="m",tenant="t1",slo="chat",operation="chat"}', values: '0+240x70'}
      - {series: 'llm_slo_good_output_tokens_total{instance="b",route="r2",model="m",tenant="t2",slo="chat",operation="chat"}', values: '0+120x70'}
      - {series: 'llm_slo_good_output_tokens_total{instance="b",route="r2",model="m",tenant="t3",slo="chat",operation="chat"}', values: '0x70'}
    promql_expr_test:
      - expr: chargeback:llm_gpu_seconds:rate5m
        eval_time: 70m
        exp_samples:
          - {labels: 'chargeback:llm_gpu_seconds:rate5m{gpu_set="s"}', value: 1}
      - expr: chargeback:llm_request_gpu_seconds:rate5m
        eval_time: 70m
        exp_samples:
          - {labels: 'chargeback:llm_request_gpu_seconds:rate5m{gpu_set="s",route="r1",tenant="t1"}', value: 0.5}
          - {labels: 'chargeback:llm_request_gpu_seconds:rate5m{gpu_set="s",route="r2",tenant="t2"}', value: 0.125}
          - {labels: 'chargeback:llm_request_gpu_seconds:rate5m{gpu_set="s",route="r2",tenant="t3"}', value: 0.125}
      - expr: chargeback:llm_gpu_idle_seconds:rate5m
        eval_time: 70m
        exp_samples:
          - {labels: 'chargeback:llm_gpu_idle_seconds:rate5m{gpu_set="s"}', value: 0.25}
      # Each tenant's bill per second, summed over replicas: t1 7.5 USD a
      # minute (5.625 on a, 1.875 on b), t2 and t3 1.875.
      - expr: chargeback:llm_request_gpu_cost:rate5m
        eval_time: 70m
        exp_samples:
          - {labels: 'chargeback:llm_request_gpu_cost:rate5m{gpu_set="s",route="r1",tenant="t1",currency="USD"}', value: 0.125}
          - {labels: 'chargeback:llm_request_gpu_cost:rate5m{gpu_set="s",route="r2",tenant="t2",currency="USD"}', value: 0.03125}
          - {labels: 'chargeback:llm_request_gpu_cost:rate5m{gpu_set="s",route="r2",tenant="t3",currency="USD"}', value: 0.03125}
      # The fleet's tenants plus idle, less one replica's GPU time: 0.
      - expr: sum by (gpu_set) (chargeback:llm_request_gpu_seconds:rate5m) + chargeback:llm_gpu_idle_seconds:rate5m - on (gpu_set) rate(llm_gpu_seconds_total{instance="a"}[5m])
        eval_time: 70m
        exp_samples:
          - {labels: '{gpu_set="s"}', value: 0}
      - expr: chargeback:llm_gpu_idle:ratio_rate5m
        eval_time: 70m
        exp_samples:
          - {labels: 'chargeback:llm_gpu_idle:ratio_rate5m{gpu_set="s"}', value: 0.25}
      - expr: chargeback:llm_request_gpu_waste:ratio_rate5m
        eval_time: 70m
        exp_samples:
          - {labels: 'chargeback:llm_request_gpu_waste:ratio_rate5m{gpu_set="s",route="r1",tenant="t1"}', value: 0.25}
          - {labels: 'chargeback:llm_request_gpu_waste:ratio_rate5m{gpu_set="s",route="r2",tenant="t2"}', value: 0}
          - {labels: 'chargeback:llm_request_gpu_waste:ratio_rate5m{gpu_set="s",route="r2",tenant="t3"}', value: 1}
      - expr: chargeback:llm_request_gpu_cost_per_million_good_output_tokens:ratio_rate5m
        eval_time: 70m
        exp_samples:
          - {labels: 'chargeback:llm_request_gpu_cost_per_million_good_output_tokens:ratio_rate5m{route="r1",tenant="t1",currency="USD"}', value: 7812.5}
          - {labels: 'chargeback:llm_request_gpu_cost_per_million_good_output_tokens:ratio_rate5m{route="r2",tenant="t2",currency="USD"}', value: 15625}
      - expr: chargeback:llm_request_gpu_joules_per_good_output_token:ratio_rate5m
        eval_time: 70m
        exp_samples:
          - {labels: 'chargeback:llm_request_gpu_joules_per_good_output_token:ratio_rate5m{route="r1",tenant="t1"}', value: 8}
          - {labels: 'chargeback:llm_request_gpu_joules_per_good_output_token:ratio_rate5m{route="r2",tenant="t2"}', value: 16}
      - expr: chargeback:llm_gpu_idle:ratio_rate1h
        eval_time: 70m
        exp_samples:
          - {labels: 'chargeback:llm_gpu_idle:ratio_rate1h{gpu_set="s"}', value: 0.25}
      - expr: chargeback:llm_request_gpu_waste:ratio_rate1h{tenant="t1"}
        eval_time: 70m
        exp_samples:
          - {labels: 'chargeback:llm_request_gpu_waste:ratio_rate1h{gpu_set="s",route="r1",tenant="t1"}', value: 0.25}
"#;
