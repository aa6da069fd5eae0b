//! `tokenmeter demo` out of the box: its page, the steady load judged
//! against the preset classes, the ramp on the batch-limited engine, the
//! tenants' bill, the agents' sessions, and a clean stop on SIGINT.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::*;

#[tokio::test]
async fn demo_runs_out_of_the_box_with_goodput_and_stops_on_sigint() {
    let mut child = Command::new(BIN)
        .args([
            "demo",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--rate",
            "20",
        ])
        .env("TOKENMETER_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // The page's address first, then where each part listens.
    let first = lines.next().expect("demo printed nothing").unwrap();
    let page = first.split("open http://").nth(1).unwrap();
    let admin: std::net::SocketAddr = page.split('/').next().unwrap().parse().unwrap();
    let second = lines.next().unwrap().unwrap();
    assert!(
        second.contains(&format!("admin on http://{admin}")),
        "{second}"
    );
    let html = get(admin, "/").await;
    assert_eq!(html.status, 200);
    assert!(
        String::from_utf8(html.body())
            .unwrap()
            .contains("<title>tokenmeter</title>")
    );
    // The steady load is judged against the preset SLO classes.
    let s = scrape_until(admin, |s| {
        sum(s, "llm_slo_requests_total", &[("slo", "chat")]) >= 3.0
    })
    .await;
    assert!(
        sum(&s, "llm_slo_requests_total", &[("slo", "chat")]) >= 3.0,
        "no goodput verdicts"
    );
    assert!(sum(&s, "llm_requests_total", &[("route", "chat")]) >= 3.0);
    // The ramp's clients reach the batch-limited engine through its route.
    let s = scrape_until(admin, |s| {
        sum(s, "llm_requests_total", &[("route", "batched")]) >= 2.0
    })
    .await;
    assert!(
        sum(
            &s,
            "llm_requests_total",
            &[("route", "batched"), ("slo", "chat")]
        ) >= 2.0
    );
    // Its engine's own page is scraped and re-exported with the route.
    let engine = [("route", "batched"), ("server", "vllm")];
    let s = scrape_until(admin, |s| value(s, "llm_engine_info", &engine) == 1.0).await;
    assert_eq!(value(&s, "llm_engine_info", &engine), 1.0);
    // The bill: both routes with a GPU, priced in USD, each charging its
    // clients' tenants (a tenant is listed once it is charged).
    let bill = demo_bill(admin).await;
    let routes = bill["routes"].as_array().unwrap();
    assert_eq!(routes.len(), BILLED.len(), "{bill}");
    for (route, (name, tenants)) in routes.iter().zip(BILLED) {
        assert_eq!(route["gpu_set"], name, "{bill}");
        assert_eq!(route["routes"], serde_json::json!([name]), "{bill}");
        assert_eq!(route["currency"], "USD", "{route}");
        let total = &route["windows"][1]["total"];
        assert!(total["cost"].as_f64().unwrap() > 0.0, "{route}");
        assert!(billed(route, tenants), "{route}");
    }
    // The agents' sessions on `chat`: open, their turns told apart.
    let chat = demo_sessions(admin).await;
    assert!(chat["active"].as_u64().unwrap() >= 1, "{chat}");
    let hour = &chat["windows"][2];
    for turn in ["first", "tool_result"] {
        let t = hour["turns"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["turn"] == turn);
        assert!(
            t.is_some_and(|t| t["requests"].as_u64() >= Some(1)),
            "{hour}"
        );
    }
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "exit status {status}");
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    assert!(rest.iter().any(|l| l.starts_with("load: ")), "{rest:?}");
    assert!(rest.iter().any(|l| l.starts_with("ramp: ")), "{rest:?}");
    assert!(rest.iter().any(|l| l.starts_with("agents: ")), "{rest:?}");
}

/// `/slo`'s sessions of route `chat` once a session is open there and a
/// tool's result has come back, or after 20 s.
async fn demo_sessions(admin: std::net::SocketAddr) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let slo = admin_json(admin, "/slo").await;
        let routes = slo["sessions"]["routes"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let chat = routes.into_iter().find(|r| r["route"] == "chat");
        if let Some(chat) = chat {
            let tool = chat["windows"][2]["turns"]
                .as_array()
                .and_then(|t| t.iter().find(|t| t["turn"] == "tool_result"))
                .and_then(|t| t["requests"].as_u64());
            let done = chat["active"].as_u64() >= Some(1) && tool >= Some(1);
            if done || tokio::time::Instant::now() > deadline {
                return chat;
            }
        } else if tokio::time::Instant::now() > deadline {
            return serde_json::Value::Null;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The demo's routes with a GPU and the tenants each charges soon: the
/// ramp's first client's on `batched`, the load's three on `chat`.
const BILLED: [(&str, &[&str]); 2] = [
    ("batched", &["assistant"]),
    ("chat", &["assistant", "search", "reports"]),
];

/// Whether `route`'s 5-minute bill charges each of `tenants`.
fn billed(route: &serde_json::Value, tenants: &[&str]) -> bool {
    let charged = route["windows"][1]["tenants"].as_array();
    tenants
        .iter()
        .all(|name| charged.is_some_and(|c| c.iter().any(|t| t["tenant"] == *name)))
}

/// `/slo`'s chargeback once each route of [`BILLED`] charges its tenants,
/// or after 20 s: a tenant's first charge comes when its first request
/// ends.
async fn demo_bill(admin: std::net::SocketAddr) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let bill = admin_json(admin, "/slo").await["chargeback"].take();
        let routes = bill["routes"].as_array().map_or(&[][..], Vec::as_slice);
        let done = routes.len() == BILLED.len()
            && routes.iter().zip(BILLED).all(|(r, (_, t))| billed(r, t));
        if done || tokio::time::Instant::now() > deadline {
            return bill;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
