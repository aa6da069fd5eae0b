//! A long stream's ITL gaps reach `/metrics` while it streams: the proxy
//! holds them in the request's own state and publishes them each time
//! those held span a second (docs/metrics.md, "Inter-token latency"), so
//! a scrape in the middle of the stream finds every gap but those of the
//! last second, and the end publishes the rest.

use std::time::Duration;

use crate::common::*;

/// How long the proxy holds gaps before it publishes them.
const PUBLISH_EVERY: f64 = 1.0;

/// Each token is sent, then awaited at the client, so the proxy read it
/// inside (sent, received): spans between the proxy's readings are
/// bracketed by what the test saw, and no bound rests on a slack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_streams_gaps_reach_metrics_within_a_second_before_it_ends() {
    let (upstream, mut gates) = gated_upstream().await;
    let proxy = start(config_for(upstream)).await;
    let mut stream = GatedStream::open(proxy.proxy_addr, &mut gates).await;
    // 1.8 s of tokens 100 ms apart: 18 gaps.
    for n in 1..=19 {
        if n > 1 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        stream.token().await;
    }
    let times = stream.times.clone();

    // The stream is open: what the proxy published of its 18 gaps.
    let s = scrape(proxy.admin_addr).await.1;
    assert_eq!(sum(&s, "llm_requests_total", &[]), 0.0, "the stream ended");
    let published = sum(&s, "llm_inter_token_latency_seconds_count", &[]) as usize;
    let published_sum = sum(&s, "llm_inter_token_latency_seconds_sum", &[]);
    let last = times.len() - 1;
    assert!(
        (1..=last).contains(&published),
        "{published} of {last} gaps"
    );
    // The gaps still held span less than a second of the proxy's time,
    // which is at least the time from the client's receipt of the first
    // held token to the sending of the last.
    let held = last - published;
    let held_at_least = (times[last].0 - times[published].1).as_secs_f64();
    assert!(
        held_at_least < PUBLISH_EVERY,
        "{held} gaps held over at least {held_at_least:.3} s"
    );
    // The published gaps are those between the first token and token
    // `published`, as the proxy timed them.
    let shortest = (times[published].0 - times[0].1).as_secs_f64();
    let longest = (times[published].1 - times[0].0).as_secs_f64();
    assert!(
        published_sum >= shortest - 1e-6 && published_sum <= longest + 1e-6,
        "published {published_sum:.4} s of gaps, the client saw {shortest:.4} to {longest:.4} s"
    );

    // The end publishes the rest.
    stream.finish().await;
    let s = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_total", &[("outcome", "ok")]) == 1.0
    })
    .await;
    assert_eq!(
        sum(&s, "llm_inter_token_latency_seconds_count", &[]),
        last as f64
    );
    let all = sum(&s, "llm_inter_token_latency_seconds_sum", &[]);
    let (shortest, longest) = (
        (times[last].0 - times[0].1).as_secs_f64(),
        (times[last].1 - times[0].0).as_secs_f64(),
    );
    assert!(
        all >= shortest - 1e-6 && all <= longest + 1e-6,
        "{all:.4} s"
    );
    proxy.stop().await;
}
