//! What is counted, and against whom: a stream ends at its terminal event,
//! counters never go down, blame goes to the right side, and label slots
//! cannot be squatted.

use std::time::Duration;

use crate::common::*;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::{answer, chat_stream, frame, hex, settle};

// A stream ends at its terminal event.

#[tokio::test]
async fn a_client_that_leaves_right_after_done_completed_its_request() {
    let (upstream, mut gates) = gated_upstream().await;
    let proxy = start(config_for(upstream)).await;
    let (head, body) = chat_request("m1", true, &[]);
    let mut client = TcpStream::connect(proxy.proxy_addr).await.unwrap();
    client.write_all(head.as_bytes()).await.unwrap();
    client.write_all(&body).await.unwrap();
    let gate = gates.recv().await.unwrap();
    for event in chat_stream("1").split_inclusive("\n\n") {
        gate.send(frame(event)).await.unwrap();
    }
    read_until(&mut client, b"[DONE]").await;
    // As the sync `openai` SDK does: gone at `[DONE]`, while the upstream's
    // body has not ended yet.
    drop(client);
    // Something more from the upstream: the proxy finds the client gone.
    let _ = gate.send(frame(": trailing keep-alive\n\n")).await;
    let s = settle(proxy.admin_addr, 1.0).await;
    assert_eq!(sum(&s, "llm_requests_total", &[("outcome", "ok")]), 1.0);
    assert_eq!(
        sum(&s, "llm_requests_total", &[("outcome", "client_abort")]),
        0.0
    );
    assert_eq!(sum(&s, "llm_e2e_request_latency_seconds_count", &[]), 1.0);
    assert_eq!(sum(&s, "llm_time_per_output_token_seconds_count", &[]), 0.0);
    assert_eq!(
        sum(&s, "llm_output_tokens_total", &[("source", "usage")]),
        1.0
    );
    drop(gate);
    proxy.stop().await;
}

#[tokio::test]
async fn a_client_that_leaves_before_done_aborted() {
    let (upstream, mut gates) = gated_upstream().await;
    let proxy = start(config_for(upstream)).await;
    let (head, body) = chat_request("m1", true, &[]);
    let mut client = TcpStream::connect(proxy.proxy_addr).await.unwrap();
    client.write_all(head.as_bytes()).await.unwrap();
    client.write_all(&body).await.unwrap();
    let gate = gates.recv().await.unwrap();
    let stream = chat_stream("1");
    let (usage_and_token, _done) = stream.rsplit_once("data: [DONE]").unwrap();
    gate.send(frame(usage_and_token)).await.unwrap();
    read_until(&mut client, b"usage").await;
    drop(client);
    let _ = gate.send(frame(": keep-alive\n\n")).await;
    let s = settle(proxy.admin_addr, 1.0).await;
    assert_eq!(
        sum(&s, "llm_requests_total", &[("outcome", "client_abort")]),
        1.0
    );
    assert_eq!(sum(&s, "llm_e2e_request_latency_seconds_count", &[]), 0.0);
    drop(gate);
    proxy.stop().await;
}

// Counters never go down.

#[tokio::test]
async fn implausible_usage_is_rejected_and_the_token_counters_stay_monotonic() {
    let upstream = scripted_upstream().await;
    let proxy = start(config_for(upstream)).await;
    let send = |completion_tokens: &'static str| async move {
        let inline = hex(chat_stream(completion_tokens).as_bytes());
        let (head, body) = chat_request("m1", true, &[("x-body-hex", &inline)]);
        let resp = raw_exchange(proxy.proxy_addr, &head, &body).await;
        assert_eq!(resp.status, 200);
    };
    send("5").await;
    let s = settle(proxy.admin_addr, 1.0).await;
    let output = |s: &[Sample]| sum(s, "llm_output_tokens_total", &[]);
    assert_eq!(output(&s), 5.0);
    for (i, bogus) in ["18446744073709551615", "10000001", "-3", "2.5", "\"7\""]
        .into_iter()
        .enumerate()
    {
        send(bogus).await;
        let s = settle(proxy.admin_addr, 2.0 + i as f64).await;
        assert_eq!(output(&s), 5.0, "after {bogus}");
        assert_eq!(
            sum(
                &s,
                "tokenmeter_stream_parse_errors_total",
                &[("kind", "implausible_usage")]
            ),
            1.0 + i as f64,
            "after {bogus}"
        );
        // The stream itself was fine: only its count is unknown.
        assert_eq!(
            sum(&s, "llm_requests_total", &[("outcome", "ok")]),
            2.0 + i as f64
        );
    }
    // The cap is a setting; at it, a count is taken.
    send("10000000").await;
    let s = settle(proxy.admin_addr, 7.0).await;
    assert_eq!(output(&s), 10_000_005.0);
    proxy.stop().await;
}

// Blame goes to the right side.

#[tokio::test]
async fn a_malformed_client_body_past_the_read_ahead_is_the_clients_400() {
    let upstream = scripted_upstream().await;
    let mut config = config_for(upstream);
    config.proxy.max_request_body_bytes = 16;
    let proxy = start(config).await;
    let mut client = TcpStream::connect(proxy.proxy_addr).await.unwrap();
    let head = "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-echo: 1\r\n\
                content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
    client.write_all(head.as_bytes()).await.unwrap();
    // More than the read-ahead, so the body is streaming to the upstream
    // when it breaks.
    let good = format!("20\r\n{}\r\n", "{\"model\":\"m1\",\"messages\":[],   }");
    client.write_all(good.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    client.write_all(b"zz-not-a-size\r\n\r\n").await.unwrap();
    let resp = answer(&mut client).await;
    assert_eq!(resp.status, 400, "{resp:?}");
    assert_eq!(resp.header("x-tokenmeter-error"), Some("request_body"));
    let s = settle(proxy.admin_addr, 1.0).await;
    assert_eq!(
        sum(&s, "llm_requests_total", &[("outcome", "client_abort")]),
        1.0
    );
    assert_eq!(
        sum(&s, "llm_requests_total", &[("outcome", "upstream_error")]),
        0.0
    );
    proxy.stop().await;
}

/// A llama.cpp `/completion` request names no model: it is labelled with
/// the one its stream names, even when only the terminal event names it
/// (as llama.cpp's does), on every series, its stream's timings included.
#[tokio::test]
async fn a_request_naming_no_model_is_labelled_with_its_responses_model() {
    let upstream = scripted_upstream().await;
    let proxy = start(config_for(upstream)).await;
    let token = |t: &str| format!("data: {{\"content\":\"{t}\",\"stop\":false}}\n\n");
    let streams = [
        // The model only at the end, as llama.cpp's own stream.
        format!(
            "{}{}{}data: {{\"content\":\"\",\"stop\":true,\"model\":\"tiny\",\
             \"tokens_predicted\":3,\"tokens_evaluated\":2}}\n\n",
            token("a"),
            token("b"),
            token("c")
        ),
        // On every event.
        (0..3)
            .map(|_| "data: {\"content\":\"a\",\"stop\":false,\"model\":\"tiny\"}\n\n")
            .collect(),
    ];
    let body = r#"{"prompt":"hi","stream":true}"#;
    for (i, stream) in streams.iter().enumerate() {
        let head = format!(
            "POST /completion HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\
             x-body-hex: {}\r\nx-pace-ms: 20\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n\r\n",
            hex(stream.as_bytes()),
            body.len()
        );
        let resp = raw_exchange(proxy.proxy_addr, &head, body.as_bytes()).await;
        assert_eq!(resp.status, 200);
        // Its two gaps of about 20 ms, kept until the end by the first.
        let s = settle(proxy.admin_addr, i as f64 + 1.0).await;
        let gaps = sum(&s, "llm_inter_token_latency_seconds_sum", &[]);
        assert!(gaps > 0.02 * (i as f64 + 1.0) && gaps < 0.5, "{gaps}");
    }
    let s = settle(proxy.admin_addr, 2.0).await;
    let unknown = [("model", "unknown")];
    let tiny = [("model", "tiny")];
    assert_eq!(sum(&s, "llm_requests_total", &tiny), 2.0);
    assert_eq!(sum(&s, "llm_requests_total", &unknown), 0.0);
    for family in [
        "llm_time_to_response_headers_seconds_count",
        "llm_time_to_first_token_seconds_count",
        "llm_e2e_request_latency_seconds_count",
    ] {
        assert_eq!(sum(&s, family, &tiny), 2.0, "{family}");
        assert_eq!(sum(&s, family, &unknown), 0.0, "{family}");
    }
    let itl = "llm_inter_token_latency_seconds_count";
    assert_eq!(sum(&s, itl, &tiny), 4.0);
    assert_eq!(sum(&s, itl, &unknown), 0.0);
    assert_eq!(sum(&s, "llm_output_tokens_total", &tiny), 6.0);
    // In flight under `unknown` until the response named its model, then
    // under it; none left.
    assert_eq!(sum(&s, "llm_requests_in_flight", &[]), 0.0);
    assert!(
        !s.iter().any(|x| x.name.starts_with("llm_")
            && x.labels.get("model").is_some_and(|m| m == "unknown")
            && x.value != 0.0),
        "nothing counted under unknown"
    );
    proxy.stop().await;
}

// Label slots cannot be squatted.

/// A body naming `model` twice is labelled with the last, as the Python
/// servers behind the proxy (vLLM, SGLang: `json.loads`) read it.
#[tokio::test]
async fn a_body_with_two_model_keys_is_labelled_with_the_last() {
    let upstream = scripted_upstream().await;
    let proxy = start(config_for(upstream)).await;
    let body = r#"{"model":"first","messages":[],"model":"second"}"#;
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\
         x-status: 200\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    for _ in 0..2 {
        let resp = raw_exchange(proxy.proxy_addr, &head, body.as_bytes()).await;
        assert_eq!(resp.status, 200);
    }
    let s = settle(proxy.admin_addr, 2.0).await;
    let models: std::collections::BTreeSet<&str> = s
        .iter()
        .filter(|x| x.name.starts_with("llm_") || x.name.starts_with("tokenmeter_"))
        .filter_map(|x| x.labels.get("model").map(String::as_str))
        .collect();
    // The first request waited for its 2xx under `other`; none is `first`.
    assert!(!models.contains("first"), "{models:?}");
    assert_eq!(sum(&s, "llm_requests_total", &[("model", "second")]), 2.0);
    proxy.stop().await;
}

#[tokio::test]
async fn made_up_model_names_do_not_take_the_label_slots_of_real_ones() {
    let upstream = scripted_upstream().await;
    let proxy = start(config_for(upstream)).await;
    let request = |model: String, status: u16| async move {
        let body = format!(r#"{{"model":"{model}","messages":[]}}"#);
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\
             x-status: {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        raw_exchange(proxy.proxy_addr, &head, body.as_bytes()).await
    };
    // 200 names the upstream does not serve (it answers 404), more than
    // the 100 slots.
    for i in 0..200 {
        let resp = request(format!("made-up-{i}-{}", i * 7919 % 1000), 404).await;
        assert_eq!(resp.status, 404);
    }
    let resp = request("llama-3.1-8b".to_owned(), 200).await;
    assert_eq!(resp.status, 200);
    let s = settle(proxy.admin_addr, 201.0).await;
    assert_eq!(
        sum(&s, "llm_requests_total", &[("model", "llama-3.1-8b")]),
        1.0
    );
    assert_eq!(sum(&s, "llm_requests_total", &[("model", "other")]), 200.0);
    assert_eq!(
        value(&s, "tokenmeter_model_label_overflow_total", &[]),
        200.0
    );
    let models: std::collections::BTreeSet<&str> = s
        .iter()
        .filter(|x| x.name == "llm_requests_total")
        .filter_map(|x| x.labels.get("model").map(String::as_str))
        .collect();
    assert_eq!(models, ["llama-3.1-8b", "other"].into());
    // Its first request moved to its label at its response head: no series
    // of `other` holds a part of it.
    let headers = "llm_time_to_response_headers_seconds_count";
    assert_eq!(sum(&s, headers, &[("model", "llama-3.1-8b")]), 1.0);
    assert_eq!(sum(&s, headers, &[("model", "other")]), 200.0);
    // Answered once, the name has its slot from the next request's head.
    let resp = request("llama-3.1-8b".to_owned(), 200).await;
    assert_eq!(resp.status, 200);
    let s = settle(proxy.admin_addr, 202.0).await;
    assert_eq!(
        sum(&s, "llm_requests_total", &[("model", "llama-3.1-8b")]),
        2.0
    );
    proxy.stop().await;
}

/// 2,000 made-up names, each sent once to an upstream that answers
/// anything with a 200, take the first three quarters of the slots at
/// most: a real model, asked again, still gets its label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_made_up_names_answered_200_leaves_a_slot_for_a_real_model() {
    let upstream = scripted_upstream().await;
    let proxy = start(config_for(upstream)).await;
    let addr = proxy.proxy_addr;
    let request = move |model: String| async move {
        let body = format!(r#"{{"model":"{model}","messages":[]}}"#);
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\
             x-status: 200\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        raw_exchange(addr, &head, body.as_bytes()).await.status
    };
    let mut flood = tokio::task::JoinSet::new();
    for client in 0..8 {
        flood.spawn(async move {
            for i in (client..2000).step_by(8) {
                assert_eq!(request(format!("made-up-{i}")).await, 200);
            }
        });
    }
    while let Some(done) = flood.join_next().await {
        done.unwrap();
    }
    // Asked three times: the first answer puts it on probation, the second
    // gives it a slot at its response head.
    for _ in 0..3 {
        assert_eq!(request("llama-3.1-8b".to_owned()).await, 200);
    }
    let s = settle(proxy.admin_addr, 2003.0).await;
    let real = [("model", "llama-3.1-8b")];
    assert_eq!(sum(&s, "llm_requests_total", &real), 2.0);
    // The default 100 slots: 75 went to the first names answered, the
    // other 1,925 of the flood (and the real model's first request) are
    // `other`, counted.
    let models: std::collections::BTreeSet<&str> = s
        .iter()
        .filter(|x| x.name == "llm_requests_total")
        .filter_map(|x| x.labels.get("model").map(String::as_str))
        .collect();
    assert_eq!(models.len(), 75 + 2, "{models:?}");
    assert!(models.contains("other") && models.contains("llama-3.1-8b"));
    let other = sum(&s, "llm_requests_total", &[("model", "other")]);
    assert_eq!(other, 1926.0);
    assert_eq!(
        value(&s, "tokenmeter_model_label_overflow_total", &[]),
        other
    );
    proxy.stop().await;
}

#[tokio::test]
async fn a_client_that_leaves_mid_body_is_a_client_abort_not_an_upstream_error() {
    let upstream = scripted_upstream().await;
    let mut config = config_for(upstream);
    config.proxy.max_request_body_bytes = 16;
    let proxy = start(config).await;
    let mut client = TcpStream::connect(proxy.proxy_addr).await.unwrap();
    client
        .write_all(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-echo: 1\r\n\
              content-type: application/json\r\ncontent-length: 1000\r\n\r\n\
              {\"model\":\"m1\",\"messages\":[",
        )
        .await
        .unwrap();
    // Streaming to the upstream by now (more than the read-ahead): gone.
    scrape_until(proxy.admin_addr, |s| {
        sum(s, "llm_requests_in_flight", &[]) == 1.0
    })
    .await;
    drop(client);
    let s = settle(proxy.admin_addr, 1.0).await;
    assert_eq!(
        sum(&s, "llm_requests_total", &[("outcome", "client_abort")]),
        1.0
    );
    assert_eq!(
        sum(&s, "llm_requests_total", &[("outcome", "upstream_error")]),
        0.0
    );
    proxy.stop().await;
}
