//! llm-d's request and response headers, on real sockets: its objective
//! headers (`x-llm-d-slo-ttft-ms`, `x-llm-d-slo-tpot-ms`) judge a request
//! under `slo="declared"` and win over their former names; its fairness id
//! names the tenant through the generic `tenant: {header: ...}`; and a
//! response by which its gateway says it shed a request
//! (`x-llm-d-request-dropped-reason`) reaches the client as it came, is
//! counted by its bounded reason and blamed on the gateway
//! (`proxy_error`), never to the engine (`upstream_error`).

use std::net::SocketAddr;

use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpListener;

use crate::common::*;

const ROUTE: &str = "\
routes:
  - name: llmd
    upstream: http://127.0.0.1:1
    slo_request_headers: true
    tenant: {header: x-llm-d-inference-fairness-id}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llm_ds_objective_headers_are_declared_objectives_and_win_over_the_old_names() {
    let dir = tempfile::tempdir().unwrap();
    // A first token after 30 ms, then one every 20 ms.
    let Stack { proxy, .. } = Stack::start(schedule(30, 20, 5), |sim| {
        config_from_files(dir.path(), ROUTE, &[], sim)
    })
    .await;
    // (model, headers, verdict): the model tells the requests apart.
    type Case = (
        &'static str,
        &'static [(&'static str, &'static str)],
        &'static str,
    );
    let cases: [Case; 5] = [
        ("ttft-new", &[("x-llm-d-slo-ttft-ms", "1")], "bad"),
        (
            "ttft-both",
            &[("x-llm-d-slo-ttft-ms", "600000"), ("x-slo-ttft-ms", "1")],
            "good",
        ),
        ("ttft-old", &[("x-slo-ttft-ms", "1")], "bad"),
        ("tpot-new", &[("x-llm-d-slo-tpot-ms", "1")], "bad"),
        (
            "tpot-both",
            &[("x-llm-d-slo-tpot-ms", "60000"), ("x-slo-tpot-ms", "1")],
            "good",
        ),
    ];
    for (model, headers, _) in cases {
        let (head, body) = chat_request(model, true, headers);
        assert_eq!(
            raw_exchange(proxy.proxy_addr, &head, &body).await.status,
            200
        );
    }
    let samples = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_slo_requests_total", &[("slo", "declared")]) == cases.len() as f64
    })
    .await;
    for (model, _, verdict) in cases {
        let judged = [("slo", "declared"), ("model", model), ("verdict", verdict)];
        assert_eq!(
            sum(&samples, "llm_slo_requests_total", &judged),
            1.0,
            "{model}: {verdict}"
        );
    }
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llm_ds_fairness_id_names_the_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let Stack { proxy, .. } = Stack::start(schedule(5, 1, 3), |sim| {
        config_from_files(dir.path(), ROUTE, &[], sim)
    })
    .await;
    for headers in [&[("x-llm-d-inference-fairness-id", "team-a")][..], &[]] {
        let (head, body) = chat_request("m1", true, headers);
        assert_eq!(
            raw_exchange(proxy.proxy_addr, &head, &body).await.status,
            200
        );
    }
    let samples = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_total", &[]) == 2.0
    })
    .await;
    for tenant in ["team-a", "unknown"] {
        let labels = [("route", "llmd"), ("tenant", tenant), ("outcome", "ok")];
        assert_eq!(
            sum(&samples, "llm_requests_total", &labels),
            1.0,
            "{tenant}"
        );
        assert!(sum(&samples, "llm_output_tokens_total", &[("tenant", tenant)]) > 0.0);
    }
    proxy.stop().await;
}

/// The body llm-d's gateway answers a request it shed with.
const SHED_BODY: &str = "inference error: ResourceExhausted - system saturated";

/// A gateway that sheds every request: `429` with its reason, the one the
/// request names in `x-reason` (else `rejected-saturated`), as llm-d's
/// flow control answers when saturated.
async fn shedding_gateway() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                if !read_head_into(&mut stream, &mut head).await {
                    return;
                }
                let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
                let reason = head
                    .lines()
                    .find_map(|l| l.strip_prefix("x-reason: "))
                    .unwrap_or("rejected-saturated")
                    .trim()
                    .to_owned();
                let answer = format!(
                    "HTTP/1.1 429 Too Many Requests\r\nx-llm-d-request-dropped-reason: {reason}\r\nretry-after: 1\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{SHED_BODY}",
                    SHED_BODY.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    addr
}

/// Reads a request, its head and its `content-length` body, into `head`
/// (all of it, so that closing the connection resets nothing the proxy
/// has yet to read); `false` when the connection closes first.
async fn read_head_into(stream: &mut tokio::net::TcpStream, head: &mut Vec<u8>) -> bool {
    use tokio::io::AsyncReadExt as _;
    let mut buf = [0u8; 4096];
    let whole = |head: &[u8]| {
        let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") else {
            return false;
        };
        let text = String::from_utf8_lossy(&head[..end]).to_ascii_lowercase();
        let length: usize = text
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .map_or(0, |n| n.trim().parse().unwrap());
        head.len() >= end + 4 + length
    };
    while !whole(head) {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_the_gateway_shed_is_forwarded_counted_and_blamed_on_the_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let gateway = shedding_gateway().await;
    let proxy = start(config_from_files(dir.path(), ROUTE, &[], gateway)).await;

    let (head, body) = chat_request("m1", true, &[]);
    let resp = raw_exchange(proxy.proxy_addr, &head, &body).await;
    assert_eq!(resp.status, 429);
    assert_eq!(
        resp.header("x-llm-d-request-dropped-reason"),
        Some("rejected-saturated")
    );
    assert_eq!(resp.header("retry-after"), Some("1"));
    assert_eq!(resp.body(), SHED_BODY.as_bytes());
    let samples = scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_total", &[]) == 1.0
    })
    .await;
    let shed = [("route", "llmd"), ("reason", "rejected-saturated")];
    assert_eq!(
        sum(&samples, "tokenmeter_gateway_shed_requests_total", &shed),
        1.0
    );
    // The gateway's, not the engine's: no upstream_error.
    let outcome = |o| sum(&samples, "llm_requests_total", &[("outcome", o)]);
    assert_eq!(outcome("proxy_error"), 1.0);
    assert_eq!(outcome("upstream_error"), 0.0);
    assert_eq!(
        sum(&samples, "llm_requests_total", &[("status_class", "4xx")]),
        1.0
    );

    // A flood of reasons stays within the bound: 16 of them, then
    // `other`, and a reason that is no plausible name is `other` at once.
    let flood = 40;
    for i in 0..flood {
        let reason = format!("reason-{i}");
        let (head, body) = chat_request("m1", true, &[("x-reason", &reason)]);
        assert_eq!(
            raw_exchange(proxy.proxy_addr, &head, &body).await.status,
            429
        );
    }
    let total = 1.0 + f64::from(flood);
    let samples = scrape_until(proxy.admin_addr, |s| {
        sum(s, "tokenmeter_gateway_shed_requests_total", &[]) == total
    })
    .await;
    let series: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.name == "tokenmeter_gateway_shed_requests_total")
        .collect();
    assert_eq!(series.len(), 17, "{series:?}");
    let other = [("route", "llmd"), ("reason", "other")];
    // 15 of the flood's reasons took the slots left after the first.
    let shed_other = sum(&samples, "tokenmeter_gateway_shed_requests_total", &other);
    assert_eq!(shed_other, f64::from(flood - 15));
    assert_eq!(
        sum(
            &samples,
            "llm_requests_total",
            &[("outcome", "proxy_error")]
        ),
        total
    );
    proxy.stop().await;
}
