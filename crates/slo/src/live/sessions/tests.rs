//! A route's sessions and turns on tokio's paused clock: TTFT by kind of
//! turn, the follow-up cache-hit ratio, the sessions that ended and their
//! costliest, each window letting go of what is older than it.

// Panicking on unexpected input is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn end(key: &str, cost: f64, turns: u64) -> SessionEnd<'_> {
    SessionEnd {
        key,
        tenant: "team",
        turns,
        duration: ms(3000),
        model: ms(2000),
        gaps: ms(1000),
        gap_count: 2,
        tokens: 100,
        gpu_seconds: cost * 10.0,
        cost: Some(cost),
        currency: "USD",
        good: true,
    }
}

#[test]
fn a_long_key_is_cut_after_eight_characters() {
    assert_eq!(shorten("task-1"), "task-1");
    assert_eq!(shorten("12345678"), "12345678");
    assert_eq!(shorten("123456789"), "12345678…");
    assert_eq!(
        shorten("sha256:0123456789abcdef0123456789abcdef"),
        "sha256:0…"
    );
    // Characters, not bytes.
    assert_eq!(shorten("ééééééééé"), "éééééééé…");
}

#[tokio::test(start_paused = true)]
async fn turns_are_told_apart_and_continued_turns_give_the_cache_hit_ratio() {
    let now = Instant::now();
    let w = SessionWindows::new(now);
    let r = w.route("chat");
    // Ten first turns, 100 ms to 1 s to their first token.
    for i in 1..=10 {
        r.turn(now, Turn::First, Some(ms(100 * i)), Some(10), None);
    }
    for (turn, ttft, prompt, cached) in [
        (Turn::ToolResult, 40, 100, Some(60)),
        (Turn::FollowUp, 1000, 200, Some(20)),
        (Turn::FollowUp, 2000, 200, Some(20)),
        (Turn::None, 0, 0, None),
    ] {
        let ttft = (ttft > 0).then(|| ms(ttft));
        r.turn(now, turn, ttft, Some(prompt), cached);
    }
    let report = w.report(now + ms(500), &[]);
    assert_eq!(report.routes.len(), 1);
    let route = &report.routes[0];
    assert_eq!((route.route.as_str(), route.active), ("chat", 0));
    for win in &route.windows {
        let t = |name: &str| win.turns.iter().find(|t| t.turn == name).unwrap();
        assert_eq!(t("first").requests, 10);
        // The values of rank ⌊q (n − 1)⌋, within 1 %.
        let (p50, p90) = (t("first").ttft.p50.unwrap(), t("first").ttft.p90.unwrap());
        assert!((p50 - 0.5).abs() <= 0.005, "{p50}");
        assert!((p90 - 0.9).abs() <= 0.009, "{p90}");
        assert_eq!(t("first").cached_prompt_tokens, None);
        assert_eq!(t("follow_up").ttft.count, 2);
        assert_eq!(t("follow_up").cached_prompt_tokens, Some(40));
        assert_eq!(t("none").requests, 1);
        assert_eq!(t("none").ttft.count, 0);
        // (60 + 40) / (100 + 400)
        let ratio = win.follow_up_cache_hit_ratio.unwrap();
        assert!((ratio - 0.2).abs() < 1e-12, "{ratio}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_costliest_sessions_of_each_window_are_kept_and_age_out() {
    let start = Instant::now();
    let w = SessionWindows::new(start);
    let r = w.route("chat");
    // Fifteen sessions end, one a second, the later ones dearer, but for
    // one cheap long key.
    let keys: Vec<String> = (0..15).map(|i| format!("session-{i:02}-abcdef")).collect();
    for (i, key) in keys.iter().enumerate() {
        let cost = if i == 7 { 0.001 } else { i as f64 };
        r.ended(start + Duration::from_secs(i as u64), &end(key, cost, 3));
    }
    let now = start + Duration::from_secs(15);
    let report = w.report(now, &[(Arc::from("chat"), 4)]);
    let route = &report.routes[0];
    assert_eq!(route.active, 4);
    let win = &route.windows[0];
    assert_eq!(win.window, "1m");
    assert_eq!(win.ended.sessions, 15);
    assert_eq!(win.ended.turns, 45);
    assert_eq!(win.ended.gaps, 30);
    assert!((win.ended.model_seconds - 30.0).abs() < 1e-9);
    assert!((win.ended.gap_seconds - 15.0).abs() < 1e-9);
    assert!((win.model_share.unwrap() - 2.0 / 3.0).abs() < 1e-9);
    let costs: Vec<f64> = win.costliest.iter().map(|s| s.cost.unwrap()).collect();
    assert_eq!(
        costs,
        [14.0, 13.0, 12.0, 11.0, 10.0, 9.0, 8.0, 6.0, 5.0, 4.0]
    );
    let top = &win.costliest[0];
    assert_eq!(top.key, "session-…");
    assert_eq!(top.currency.as_deref(), Some("USD"));
    assert_eq!((top.turns, top.tenant.as_str()), (3, "team"));
    // A minute on, the 1m window has none; the 5m and the hour still do.
    let later = w.report(now + Duration::from_secs(61), &[]);
    let windows = &later.routes[0].windows;
    assert_eq!(windows[0].ended.sessions, 0);
    assert!(windows[0].costliest.is_empty());
    assert_eq!(windows[0].model_share, None);
    assert_eq!(windows[1].ended.sessions, 15);
    assert_eq!(windows[2].costliest.len(), TOP);
}

#[test]
fn without_a_price_sessions_rank_by_gpu_seconds_then_tokens() {
    let mut top = Vec::new();
    let session = |gpu_seconds: f64, tokens: u64| CostlySession {
        key: String::new(),
        tenant: String::new(),
        turns: 1,
        duration_seconds: 1.0,
        model_seconds: 1.0,
        gap_seconds: 0.0,
        tokens,
        gpu_seconds,
        cost: None,
        currency: None,
        good: true,
    };
    for (g, t) in [(0.0, 5), (2.0, 1), (0.0, 9), (1.0, 0)] {
        keep(&mut top, session(g, t));
    }
    let order: Vec<(f64, u64)> = top.iter().map(|s| (s.gpu_seconds, s.tokens)).collect();
    assert_eq!(order, [(2.0, 1), (1.0, 0), (0.0, 9), (0.0, 5)]);
}
