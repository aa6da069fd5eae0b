//! `tokenmeter bench --smoke`: the benchmark rig runs end to end and its
//! report is complete and right about fidelity. No timing is asserted: the
//! figures of a smoke run on a shared machine mean nothing.

use std::process::Command;

use serde_json::Value;

/// Runs `tokenmeter bench --smoke` with `args` and `--json`: its stdout and
/// the JSON report. Fails the test if the bench fails.
fn smoke(args: &[&str]) -> (String, Value) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let out = Command::new(crate::common::BIN)
        .args(["bench", "--smoke"])
        .args(args)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed:\n{stdout}\n{stderr}");
    let report = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    (stdout, report)
}

#[test]
fn smoke_run_reports_every_leg_with_full_fidelity() {
    let (stdout, report) = smoke(&["--legs", "direct,tokenmeter,unmetered"]);
    assert!(stdout.contains("== stream-c4"), "{stdout}");

    assert!(report["command"].as_str().unwrap().contains("--smoke"));
    assert!(report["machine"]["nproc"].as_u64().unwrap() >= 1);
    let scenarios = report["scenarios"].as_array().unwrap();
    assert_eq!(scenarios.len(), 1);
    let legs = scenarios[0]["legs"].as_array().unwrap();
    let names: Vec<&str> = legs.iter().map(|l| l["leg"].as_str().unwrap()).collect();
    assert_eq!(names, ["direct", "tokenmeter", "unmetered"]);

    for leg in legs {
        let name = leg["leg"].as_str().unwrap();
        assert_eq!(leg["rounds"], 2, "{name}");
        // Each round of a proxy leg on a process of its own.
        let processes = if name == "direct" { 0 } else { 2 };
        assert_eq!(leg["processes"], processes, "{name}");
        assert_eq!(leg["errors"], 0, "{name}: {leg}");
        assert!(leg["measured_requests"].as_u64().unwrap() > 0, "{name}");
        assert!(leg["measured_chunks"].as_u64().unwrap() > 0, "{name}");
        for key in ["ttft_us", "chunk_latency_us", "gap_distortion_us"] {
            let q = &leg[key];
            assert!(q["count"].as_u64().unwrap() > 0, "{name} {key}");
            assert!(
                q["p50"].as_f64().unwrap() <= q["p99"].as_f64().unwrap(),
                "{name} {key}"
            );
            assert!(
                q["p99"].as_f64().unwrap() <= q["p999"].as_f64().unwrap(),
                "{name} {key}"
            );
        }

        // The spread over the two rounds brackets nothing impossible.
        let spread = &leg["spread"];
        for key in ["latency_p50_us", "latency_p99_us", "ttft_p99_us"] {
            let r = &spread[key];
            assert!(
                r["min"].as_f64().unwrap() <= r["max"].as_f64().unwrap(),
                "{name} {key}: {r}"
            );
        }
        assert!(
            spread["latency_p50_us"]["min"].as_f64().unwrap()
                <= leg["chunk_latency_us"]["p99"].as_f64().unwrap(),
            "{name}"
        );
        assert_eq!(
            spread["cpu_us_per_chunk"].is_null(),
            name == "direct",
            "{name}"
        );
        assert!(
            stdout.contains(&format!("spread over rounds ({name})")),
            "{stdout}"
        );

        // The offered load counts the chunks the simulator sent in the
        // measured windows: about as many as the client measured in them
        // (counted by receipt, not by send time), and one round's detail
        // per round.
        let offered = &leg["offered"];
        let per_ms = offered["mean_per_ms"].as_f64().unwrap();
        let windows_ms =
            leg["rounds"].as_f64().unwrap() * scenarios[0]["duration_s"].as_f64().unwrap() * 1000.0;
        let measured = leg["measured_chunks"].as_f64().unwrap();
        assert!(
            per_ms * windows_ms >= measured * 0.5 && per_ms * windows_ms <= measured * 2.0,
            "{name}: {offered} against {measured} measured chunks"
        );
        assert!(
            offered["burstiness"].as_f64().unwrap() >= 1.0,
            "{name}: {offered}"
        );
        assert!(
            offered["max_per_ms"].as_u64().unwrap() >= offered["p99_per_ms"].as_u64().unwrap(),
            "{name}: {offered}"
        );
        assert_eq!(leg["rounds_detail"].as_array().unwrap().len(), 2, "{name}");
        assert!(
            stdout.contains(&format!("offered load ({name})")),
            "{stdout}"
        );

        // Every byte the simulator sent arrived unchanged, one event per frame.
        let f = &leg["fidelity"];
        assert_eq!(f["byte_identical"], true, "{name}: {f}");
        assert_eq!(f["merged_frames"], 0, "{name}: {f}");
        assert_eq!(f["split_frames"], 0, "{name}: {f}");
        assert_eq!(f["client_responses"], f["sim"]["responses"], "{name}");
        assert_eq!(f["client_events"], f["sim"]["frames"], "{name}");
        assert_eq!(f["client_frames"], f["sim"]["frames"], "{name}");
        assert_eq!(f["client_hash_sum"], f["sim"]["hash_sum"], "{name}");
        assert!(f["sim"]["responses"].as_u64().unwrap() > 0, "{name}");

        // Deltas are against the direct leg; the proxies have their own CPU
        // and memory readings.
        assert!(
            leg["chunk_latency_vs_direct"]["p99_ratio"].is_number(),
            "{name}"
        );
        if name != "direct" {
            let cpu = &leg["cpu"];
            assert!(cpu["proxy_seconds"].as_f64().unwrap() > 0.0, "{name}");
            // The split into user space and kernel counts the same CPU, in
            // clock ticks: it is within a few ticks of the total.
            let chunks = leg["fidelity"]["client_events"].as_f64().unwrap();
            let split = (cpu["proxy_user_us_per_chunk"].as_f64().unwrap()
                + cpu["proxy_kernel_us_per_chunk"].as_f64().unwrap())
                * chunks
                / 1e6;
            let total = cpu["proxy_seconds"].as_f64().unwrap();
            assert!(
                split > 0.0 && (split - total).abs() <= 0.05 + total * 0.2,
                "{name}: user + kernel {split} s against {total} s"
            );
            assert!(leg["memory"]["peak_bytes"].as_u64().unwrap() > 0, "{name}");
            let memory = &leg["memory"];
            assert!(memory["after_bytes"].as_u64().unwrap() > 0, "{name}");
            // The anonymous part is part of the whole.
            for (part, whole) in [
                ("idle_anon_bytes", "idle_bytes"),
                ("after_anon_bytes", "after_bytes"),
            ] {
                let part = memory[part].as_u64().unwrap();
                assert!(
                    part > 0 && part <= memory[whole].as_u64().unwrap(),
                    "{name}"
                );
            }
            assert!(
                leg["memory"]["after_vs_idle"].as_f64().unwrap() > 0.0,
                "{name}"
            );
        }
    }

    // Every stream the client measured has the proxy's own TTFT beside it,
    // from its access-log line, and the proxy's clock runs inside the
    // client's (it starts later and stops earlier).
    let metered = &legs[1];
    let accuracy = &metered["metering_accuracy"];
    let client = accuracy["client_requests"].as_u64().unwrap();
    assert_eq!(client, metered["ttft_us"]["count"].as_u64().unwrap());
    assert_eq!(
        accuracy["paired_requests"].as_u64().unwrap(),
        client,
        "{accuracy}"
    );
    assert_eq!(accuracy["proxy_longer"], 0, "{accuracy}");
    assert!(
        accuracy["mean_diff_us"].as_f64().unwrap() > 0.0,
        "{accuracy}"
    );
    assert!(
        accuracy["proxy_mean_us"].as_f64().unwrap() >= 2_000.0,
        "the simulator waits 2 ms before the first token: {accuracy}"
    );
    assert!(
        stdout.contains("metering accuracy (tokenmeter)"),
        "{stdout}"
    );
    assert!(legs[2]["metering_accuracy"].is_null());
}

/// `--baseline-bin` adds a `baseline` leg (another build, metering on) right
/// after `tokenmeter`, measured and fingerprinted like the others.
#[test]
fn smoke_run_with_a_baseline_binary() {
    let bin = crate::common::BIN;
    let (_, report) = smoke(&["--legs", "tokenmeter", "--baseline-bin", bin]);
    let notes = report["notes"].to_string();
    assert!(notes.contains("baseline: "), "{notes}");
    let legs = report["scenarios"][0]["legs"].as_array().unwrap();
    let names: Vec<&str> = legs.iter().map(|l| l["leg"].as_str().unwrap()).collect();
    assert_eq!(names, ["tokenmeter", "baseline"]);
    let baseline = &legs[1];
    assert_eq!(baseline["errors"], 0, "{baseline}");
    let f = &baseline["fidelity"];
    assert_eq!(f["byte_identical"], true, "{f}");
    assert_eq!(f["client_frames"], f["sim"]["frames"], "{f}");
    assert!(baseline["cpu"]["proxy_seconds"].as_f64().unwrap() > 0.0);
    let accuracy = &baseline["metering_accuracy"];
    assert!(
        accuracy["paired_requests"].as_u64().unwrap() > 0,
        "{accuracy}"
    );
}

/// `--colocate` puts the proxy on the rig's core (when the bench pins at
/// all) and says so.
#[test]
fn smoke_run_co_located() {
    let (_, report) = smoke(&["--legs", "direct,tokenmeter", "--colocate"]);
    let notes = report["notes"].to_string();
    if notes.contains("pinned") && !notes.contains("not pinned") {
        assert!(notes.contains("all on core 1"), "{notes}");
    }
    let legs = report["scenarios"][0]["legs"].as_array().unwrap();
    assert_eq!(legs[1]["fidelity"]["byte_identical"], true);
}

/// `--tls`: the proxy legs terminate TLS from the load generator, with the
/// run's certificate, and still forward every byte; `direct` stays plain.
/// Each leg says how many handshakes it made and what they negotiated.
#[test]
fn smoke_run_with_tls_on_the_proxy_legs() {
    let (stdout, report) = smoke(&["--legs", "direct,tokenmeter,nginx", "--tls"]);
    assert!(stdout.contains("TLS on:"), "{stdout}");
    assert!(report["notes"].to_string().contains("TLS on"));
    let legs = report["scenarios"][0]["legs"].as_array().unwrap();
    // nginx is skipped where it is not installed.
    assert!(legs.len() >= 2, "{legs:?}");
    for leg in legs {
        let name = leg["leg"].as_str().unwrap();
        assert_eq!(leg["errors"], 0, "{name}: {leg}");
        assert!(leg["measured_requests"].as_u64().unwrap() > 0, "{name}");
        assert_eq!(leg["fidelity"]["byte_identical"], true, "{name}");
        let connections = leg["connections"].as_u64().unwrap();
        assert!(connections > 0, "{name}");
        let tls = &leg["tls"];
        if name == "direct" {
            assert!(tls.is_null(), "{tls}");
            continue;
        }
        // Kept alive: one handshake per connection, not per request.
        assert_eq!(tls["handshakes"].as_u64().unwrap(), connections, "{tls}");
        assert!(
            tls["requests_per_handshake"].as_f64().unwrap() > 1.0,
            "{tls}"
        );
        assert!(
            tls["negotiated"].as_str().unwrap().starts_with("TLSv1_3"),
            "{tls}"
        );
        assert!(
            stdout.contains(&format!("connections ({name}): {connections} opened")),
            "{stdout}"
        );
    }
}
