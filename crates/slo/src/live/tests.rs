//! The live windows driven on tokio's paused clock: windows that slide
//! and let old slots go, their quantiles, the status of each objective and
//! its error budget, the history's points beside the windows, and the
//! server's own phases.

// Panicking on unexpected input is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::ring::SLOTS;
use super::*;
use crate::class::{Goodput, Objective, ObjectiveKind};
use crate::sketch::Sketch;
use meter::{Outcome, Summary};
use meter::{TokenSource, Usage};

const HOUR: Duration = Duration::from_secs(3600);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn class() -> Arc<SloClass> {
    Arc::new(SloClass {
        name: "chat".into(),
        description: String::new(),
        window: HOUR,
        objectives: vec![Objective {
            kind: ObjectiveKind::Ttft,
            threshold: ms(500),
            target: 0.9,
        }],
        goodput: Goodput {
            require: vec![ObjectiveKind::Ttft],
            target: Some(0.8),
        },
        per_tenant_alerts: false,
        exclude_slow_readers: false,
    })
}

/// An ok stream of 10 tokens with the given TTFT, judged against
/// [`class`].
fn request(ttft: Duration) -> Aggregate {
    let s = Summary {
        outcome: Outcome::Ok,
        status: Some(200),
        streamed: true,
        ttft: Some(ttft),
        ttft_visible: Some(ttft),
        e2el: Some(ttft + ms(90)),
        elapsed: ttft + ms(90),
        tpot: Some(ms(10)),
        output_tokens: Some((10, TokenSource::Usage)),
        usage: Usage::default(),
        server: meter::ServerTimings::default(),
        client_wait: std::time::Duration::ZERO,
        proxy_time: None,
        response_model: None,
        events: 12,
        token_events: 10,
        first_token_event: Some(1),
        first_visible_event: Some(1),
        terminal_event: None,
        parse_errors: 0,
    };
    let mut itl = Sketch::new();
    for _ in 0..9 {
        itl.add(ms(10));
    }
    Aggregate::request(
        &s,
        Some(crate::judge(&class(), &s, false)),
        itl,
        Some(ms(5)),
    )
}

fn window<'a>(r: &'a Report, name: &str) -> &'a WindowReport {
    r.series[0]
        .windows
        .iter()
        .find(|w| w.window == name)
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn windows_slide_and_old_slots_are_evicted() {
    let live = Live::new(Instant::now(), 0.0);
    live.set_classes(&[(*class()).clone()]);
    let series = live.series("r", "chat", "");
    // t = 0: 3 good, 1 bad (TTFT 800 ms > 500 ms).
    for ttft in [100, 200, 300, 800] {
        series.record(Instant::now(), &request(ms(ttft)), Some(HOUR), None);
    }
    tokio::time::advance(Duration::from_secs(30)).await;
    let r = live.report(Instant::now(), "");
    for name in ["1m", "5m", "1h"] {
        let w = window(&r, name);
        assert_eq!(w.requests, 4, "{name}");
        assert_eq!(w.seconds, 30.0, "{name}");
        let g = w.goodput.as_ref().unwrap();
        assert_eq!((g.good, g.bad, g.ratio), (3, 1, Some(0.75)));
        // (1 − 0.75) / (1 − 0.8) = 1.25.
        assert!((g.burn_rate.unwrap() - 1.25).abs() < 1e-9);
        assert_eq!(w.output_tokens, 40);
        assert!((w.request_rate - 4.0 / 30.0).abs() < 1e-9);
        assert_eq!(w.compliance[0].met, 3);
        assert_eq!(w.ttft.count, 4);
        assert_eq!(w.itl.count, 36);
        assert_eq!(w.itl.p99, Some(0.01));
    }

    // t = 60 s: 2 more. The 1m window holds slots (0, 60]: the first 4
    // have left it, but not the longer windows.
    tokio::time::advance(Duration::from_secs(30)).await;
    for ttft in [100, 100] {
        series.record(Instant::now(), &request(ms(ttft)), Some(HOUR), None);
    }
    let r = live.report(Instant::now(), "");
    assert_eq!(window(&r, "1m").requests, 2);
    assert_eq!(window(&r, "1m").seconds, 59.0);
    assert_eq!(window(&r, "1m").goodput.as_ref().unwrap().ratio, Some(1.0));
    assert_eq!(window(&r, "5m").requests, 6);
    assert_eq!(window(&r, "1h").requests, 6);

    // t = 5 min + 1 s: the 5m window (60 × 5 s slots) has let the first
    // 4 go; the hour keeps all 6.
    tokio::time::advance(Duration::from_secs(241)).await;
    let r = live.report(Instant::now(), "");
    assert_eq!(window(&r, "1m").requests, 0);
    assert_eq!(window(&r, "1m").ttft.p50, None);
    assert_eq!(window(&r, "1m").goodput.as_ref().unwrap().ratio, None);
    assert_eq!(window(&r, "5m").requests, 2);
    assert_eq!(window(&r, "1h").requests, 6);

    // After an hour and a minute everything is gone, and a slot reused
    // by a new request holds only the new one.
    tokio::time::advance(Duration::from_secs(3360)).await;
    let r = live.report(Instant::now(), "");
    assert_eq!(window(&r, "1h").requests, 0);
    series.record(Instant::now(), &request(ms(100)), Some(HOUR), None);
    let r = live.report(Instant::now(), "");
    for name in ["1m", "5m", "1h"] {
        assert_eq!(window(&r, name).requests, 1, "{name}");
    }
}

#[tokio::test(start_paused = true)]
async fn quantiles_follow_the_requests_of_the_window() {
    let live = Live::new(Instant::now(), 0.0);
    live.set_classes(&[(*class()).clone()]);
    let series = live.series("r", "chat", "");
    // TTFT 1..=100 ms, one request each.
    for i in 1..=100 {
        series.record(Instant::now(), &request(ms(i)), Some(HOUR), None);
    }
    tokio::time::advance(Duration::from_secs(1)).await;
    let r = live.report(Instant::now(), "");
    let ttft = &window(&r, "1m").ttft;
    let near = |got: Option<f64>, want: f64| {
        let got = got.unwrap();
        assert!((got - want).abs() <= want * 0.01, "{got} vs {want}");
    };
    // Rank ⌊q (n − 1)⌋ of 1..=100 ms.
    near(ttft.p50, 0.050);
    near(ttft.p95, 0.095);
    near(ttft.p99, 0.099);
    // A stale slot another thread moved on is not reset backwards.
    let mut ring = Ring::default();
    ring.add(SLOTS + 3, &request(ms(1)));
    ring.add(3, &request(ms(1)));
    let mut total = Aggregate::default();
    ring.collect(SLOTS + 3, &mut total);
    assert_eq!(total.requests, 1);
}

fn states(r: &Report) -> Vec<(&'static str, &'static str)> {
    r.series[0]
        .status
        .iter()
        .map(|s| (s.objective, s.state))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn status_follows_compliance_and_the_error_budget() {
    let live = Live::new(Instant::now(), 0.0);
    live.set_classes(&[(*class()).clone()]);
    let series = live.series("r", "chat", "");
    let r = live.report(Instant::now(), "");
    assert!(r.series[0].status.iter().all(|s| s.state == "no_data"));
    // 20 good: TTFT 90 % target, goodput 80 % target.
    for _ in 0..20 {
        series.record(Instant::now(), &request(ms(100)), Some(HOUR), None);
    }
    let r = live.report(Instant::now(), "");
    assert_eq!(states(&r), [("ttft", "ok"), ("goodput", "ok")]);
    let ttft = &r.series[0].status[0];
    assert_eq!(
        (ttft.budget.judged, ttft.budget.met, ttft.budget.left),
        (20, 20, Some(1.0))
    );
    assert_eq!(ttft.budget.window_seconds, 3600.0);
    // 4 bad: 20/24 within the threshold in 5 minutes, below 90 %, and
    // 4 misses of the 2.4 the budget allows.
    for _ in 0..4 {
        series.record(Instant::now(), &request(ms(900)), Some(HOUR), None);
    }
    let r = live.report(Instant::now(), "");
    // Goodput is within its target (20 of 24 good, 80 %) but has a
    // sixth of its budget left (4 bad of the 4.8 allowed).
    assert_eq!(states(&r), [("ttft", "breach"), ("goodput", "warning")]);
    let ttft = &r.series[0].status[0];
    assert!((ttft.ratio_5m.unwrap() - 20.0 / 24.0).abs() < 1e-9);
    assert!((ttft.burn_rate_5m.unwrap() - (4.0 / 24.0) / 0.1).abs() < 1e-9);
    assert!((ttft.budget.left.unwrap() - (1.0 - 4.0 / 2.4)).abs() < 1e-9);
    // The goodput budget: 20 of 24 good against 80 %.
    let goodput = &r.series[0].status[1];
    assert_eq!((goodput.budget.met, goodput.threshold_seconds), (20, None));
    // Six minutes later, 20 more good: the last 5 minutes comply, the
    // hour does (40 of 44), but less than a quarter of the budget is
    // left (4 misses of 4.4).
    tokio::time::advance(Duration::from_secs(360)).await;
    for _ in 0..20 {
        series.record(Instant::now(), &request(ms(100)), Some(HOUR), None);
    }
    let r = live.report(Instant::now(), "");
    assert_eq!(r.series[0].status[0].state, "warning");
    assert_eq!(r.series[0].status[0].ratio_5m, Some(1.0));
    // Past the class's window (an hour) nothing is left to judge by.
    tokio::time::advance(Duration::from_secs(3700)).await;
    let r = live.report(Instant::now(), "");
    assert_eq!(states(&r), [("ttft", "no_data"), ("goodput", "no_data")]);
}

#[tokio::test(start_paused = true)]
async fn history_points_agree_with_the_windows() {
    let live = Live::new(Instant::now(), 1_000_000.0);
    live.set_classes(&[(*class()).clone()]);
    let series = live.series("r", "chat", "");
    tokio::time::advance(Duration::from_secs(20)).await;
    for _ in 1..=100 {
        series.start(Instant::now());
    }
    let r = live.report(Instant::now(), "");
    assert_eq!(r.series[0].in_flight, 100);
    for i in 1..=100 {
        series.record(
            Instant::now(),
            &request(ms(i)),
            Some(HOUR),
            Some((i * 10, 0.001 * i as f64)),
        );
    }
    tokio::time::advance(Duration::from_secs(5)).await;
    let r = live.report(Instant::now(), "");
    let h = live.history(Instant::now(), Some("r"), Some("chat"), "", None);
    assert_eq!(h.len(), 1);
    let h = &h[0];
    assert_eq!(h.objectives, r.series[0].objectives);
    // Points 2 (20 s) only: the series was created at 20 s.
    assert_eq!(h.points.len(), 1);
    let p = &h.points[0];
    assert_eq!((p.t, p.seconds), (1_000_020.0, 5.0));
    let w = window(&r, "1m");
    assert_eq!(p.requests, w.requests);
    assert_eq!(p.outcomes.ok, w.ok);
    assert_eq!(p.output_tokens, w.output_tokens);
    assert_eq!(
        (p.ttft.clone(), p.itl.clone(), p.e2el.clone()),
        (w.ttft.clone(), w.itl.clone(), w.e2el.clone())
    );
    let g = w.goodput.as_ref().unwrap();
    assert_eq!((p.good, p.bad), (g.good, g.bad));
    assert_eq!((p.in_flight_peak, p.in_flight_end), (100, 0));
    assert_eq!(p.headers.p50, Some(0.005));
    // Streams of TTFT i ms and E2EL i + 90 ms, headers at 5 ms.
    assert_eq!(p.phases.requests, 100);
    assert!((p.phases.headers_seconds - 0.5).abs() < 1e-9);
    assert!((p.phases.decode_seconds - 9.0).abs() < 1e-9);
    assert_eq!(h.scatter.len(), 100);
    assert_eq!(h.scatter[0], [1_000_020.0, 10.0, 0.001]);
    // Asked from a later time: nothing before it.
    let later = live.history(Instant::now(), None, None, "", Some(1_000_030.0));
    assert!(later[0].points.is_empty() && later[0].scatter.is_empty());
    assert!(
        live.history(Instant::now(), Some("x"), None, "", None)
            .is_empty()
    );
}

#[test]
fn series_without_a_class_report_no_goodput() {
    let live = Live::new(Instant::now(), 0.0);
    let s = Summary {
        outcome: Outcome::UpstreamError,
        status: Some(502),
        streamed: false,
        ttft: None,
        ttft_visible: None,
        e2el: None,
        elapsed: ms(5),
        tpot: None,
        output_tokens: None,
        usage: Usage::default(),
        server: meter::ServerTimings::default(),
        client_wait: std::time::Duration::ZERO,
        proxy_time: None,
        response_model: None,
        events: 0,
        token_events: 0,
        first_token_event: None,
        first_visible_event: None,
        terminal_event: None,
        parse_errors: 0,
    };
    live.series("r", "", "").record(
        Instant::now(),
        &Aggregate::request(&s, None, Sketch::new(), None),
        None,
        None,
    );
    let r = live.report(Instant::now(), "");
    let w = window(&r, "1m");
    assert_eq!((w.requests, w.ok), (1, 0));
    assert!(w.goodput.is_none() && w.compliance.is_empty());
    assert!(r.series[0].objectives.is_empty());
}

/// The server's phases reach `/slo` as percentiles and the history as
/// sums of the streams that reported all of them; a server that
/// reports prefill and decode only (llama.cpp) has its percentiles but
/// no split, and an outside time below zero is not taken.
#[tokio::test(start_paused = true)]
async fn the_servers_phases_are_reported_where_known() {
    let live = Live::new(Instant::now(), 1_000_000.0);
    live.set_classes(&[]);
    let series = live.series("r", "", "");
    let streamed = |ttft: u64, server: meter::ServerTimings| {
        let s = Summary {
            outcome: Outcome::Ok,
            status: Some(200),
            streamed: true,
            ttft: Some(ms(ttft)),
            ttft_visible: Some(ms(ttft)),
            e2el: Some(ms(ttft + 500)),
            elapsed: ms(ttft + 500),
            tpot: Some(ms(10)),
            output_tokens: Some((51, TokenSource::Usage)),
            usage: Usage::default(),
            server,
            client_wait: std::time::Duration::ZERO,
            proxy_time: None,
            response_model: None,
            events: 53,
            token_events: 51,
            first_token_event: Some(1),
            first_visible_event: Some(1),
            terminal_event: None,
            parse_errors: 0,
        };
        Aggregate::request(&s, None, Sketch::new(), Some(ms(5)))
    };
    let all = |queue, prefill| meter::ServerTimings {
        queue: Some(queue),
        prefill: Some(prefill),
        decode: Some(0.5),
    };
    // vLLM-like: 100 ms queued, 200 ms prefill, 100 ms outside.
    series.record(Instant::now(), &streamed(400, all(0.1, 0.2)), None, None);
    // llama.cpp-like: no queue.
    let llama = meter::ServerTimings {
        queue: None,
        ..all(0.0, 0.3)
    };
    series.record(Instant::now(), &streamed(400, llama), None, None);
    // Clocks that disagree: the server counts 500 ms of a 400 ms TTFT.
    series.record(Instant::now(), &streamed(400, all(0.2, 0.3)), None, None);
    tokio::time::advance(Duration::from_secs(5)).await;
    let r = live.report(Instant::now(), "");
    let w = window(&r, "1m");
    assert_eq!(w.queue.count, 2);
    assert_eq!(w.prefill.count, 3);
    assert_eq!(w.decode.count, 3);
    assert_eq!(w.outside.count, 1);
    let near = |got: Option<f64>, want: f64| {
        assert!(
            (got.unwrap() - want).abs() <= want * 0.011,
            "{got:?} for {want}"
        );
    };
    near(w.outside.p50, 0.1);
    near(w.decode.p99, 0.5);
    let h = live.history(Instant::now(), Some("r"), None, "", None);
    let p = &h[0].points[0];
    assert_eq!((p.prefill.count, p.outside.count), (3, 1));
    let e = &p.engine_phases;
    assert_eq!(e.requests, 1);
    for (got, want) in [
        (e.queue_seconds, 0.1),
        (e.prefill_seconds, 0.2),
        (e.decode_seconds, 0.5),
        (e.outside_seconds, 0.1),
    ] {
        assert!((got - want).abs() < 1e-9, "{e:?}");
    }
    assert_eq!(p.phases.requests, 3, "the split at the head stays");
}
