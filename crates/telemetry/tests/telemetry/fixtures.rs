//! Each server's page, as the server writes it (`tests/data/`), read
//! through the public API: every fixture through one `check` helper, and
//! every fixture cut at every byte offset.

use telemetry::{
    EngineFigures, GpuAggregate, GpuEnergy, GpuLabel, GpuSelector, Limits, Page, Server, Spread,
    parse, read_engine, read_gpus,
};

const FIXTURES: [&str; 9] = [
    "vllm.prom",
    "sglang.prom",
    "sglang-old.prom",
    "tgi.prom",
    "llamacpp.prom",
    "llamacpp-old.prom",
    "dcgm-a100.prom",
    "dcgm-no-prof.prom",
    "openmetrics.prom",
];

fn bytes(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn page(name: &str) -> Page {
    parse(&bytes(name), &Limits::default()).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn close(a: Option<f64>, b: Option<f64>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => (a - b).abs() <= 1e-9 * a.abs().max(1.0),
        (a, b) => a == b,
    }
}

/// Reads `fixture` as an engine page and compares it with what it must
/// yield: the server, each model's figures, and the samples not read.
fn check(fixture: &str, server: Server, models: &[(Option<&str>, EngineFigures)], ignored: usize) {
    let reading = read_engine(&page(fixture));
    assert_eq!(reading.server, Some(server), "{fixture}");
    let got: Vec<_> = reading
        .models
        .iter()
        .map(|m| (m.model.as_deref(), m.figures))
        .collect();
    assert_eq!(got, models, "{fixture}");
    assert_eq!(
        (reading.ignored, reading.refused),
        (ignored, 0),
        "{fixture}"
    );
}

fn figures(running: f64, waiting: f64) -> EngineFigures {
    EngineFigures {
        running: Some(running),
        waiting: Some(waiting),
        ..EngineFigures::default()
    }
}

#[test]
fn vllm_with_two_data_parallel_engines() {
    let model = Some("meta-llama/Llama-3.1-8B-Instruct");
    let expected = EngineFigures {
        kv_cache_usage: Some(0.5),
        prefix_cache_queries: Some(61440.0),
        prefix_cache_hits: Some(20480.0),
        ..figures(21.0, 3.0)
    };
    check("vllm.prom", Server::Vllm, &[(model, expected)], 19);
}

#[test]
fn sglang_current_and_oldest_labels() {
    let expected = EngineFigures {
        kv_cache_usage: Some(0.28),
        prefix_cache_hit_rate: Some(0.007507552643049313),
        ..figures(7.0, 2.0)
    };
    check(
        "sglang.prom",
        Server::Sglang,
        &[(Some("Qwen/Qwen3-8B"), expected)],
        7,
    );
    let expected = EngineFigures {
        kv_cache_usage: Some(0.5),
        prefix_cache_hit_rate: Some(0.25),
        ..figures(3.0, 0.0)
    };
    check(
        "sglang-old.prom",
        Server::Sglang,
        &[(Some("google/gemma-2-9b-it"), expected)],
        1,
    );
}

#[test]
fn tgi_names_no_model() {
    check("tgi.prom", Server::Tgi, &[(None, figures(32.0, 4.0))], 7);
}

#[test]
fn llamacpp_with_and_without_the_kv_ratio() {
    check(
        "llamacpp.prom",
        Server::LlamaCpp,
        &[(None, figures(2.0, 1.0))],
        8,
    );
    let expected = EngineFigures {
        kv_cache_usage: Some(0.0625),
        ..figures(1.0, 0.0)
    };
    check(
        "llamacpp-old.prom",
        Server::LlamaCpp,
        &[(None, expected)],
        5,
    );
}

#[test]
fn openmetrics_counters_without_total_are_read() {
    let reading = read_engine(&page("openmetrics.prom"));
    assert_eq!(reading.server, Some(Server::Vllm));
    let f = reading.models[0].figures;
    assert_eq!(f.prefix_cache_queries, Some(100.0));
    assert_eq!(f.prefix_cache_hits, Some(25.0));
    assert_eq!(f.running, Some(1.0));
}

fn spread(mean: Option<f64>, max: Option<f64>, reporting: usize) -> Spread {
    Spread {
        mean,
        max,
        reporting,
    }
}

/// A GPU's energy figures with its power alone.
fn power(id: &str, watts: f64) -> GpuEnergy {
    GpuEnergy {
        id: id.to_owned(),
        energy_millijoules: None,
        power_watts: Some(watts),
    }
}

fn assert_aggregate(got: GpuAggregate, want: GpuAggregate) {
    assert_eq!(got.count, want.count);
    assert_eq!(got.energy, want.energy);
    for (name, g, w) in [
        ("util", got.utilization_percent, want.utilization_percent),
        ("fb", got.framebuffer_used_mib, want.framebuffer_used_mib),
        (
            "gr",
            got.graphics_engine_active,
            want.graphics_engine_active,
        ),
        ("sm", got.sm_active, want.sm_active),
        ("dram", got.dram_active, want.dram_active),
    ] {
        assert!(
            close(g.mean, w.mean) && close(g.max, w.max) && g.reporting == w.reporting,
            "{name}: {g:?} != {w:?}"
        );
    }
}

#[test]
fn dcgm_selects_the_gpus_of_a_route() {
    let reading = read_gpus(&page("dcgm-a100.prom"));
    assert_eq!(
        (reading.gpus.len(), reading.ignored, reading.refused),
        (4, 8, 0)
    );
    let first = &reading.gpus[0];
    assert_eq!(first.label("modelName"), Some("NVIDIA A100-SXM4-80GB"));
    assert_eq!(first.label("pod"), Some("vllm-0"));

    let uuid = |n: u32| format!("GPU-8a3f1d2e-5b6c-4d7e-9f80-1a2b3c4d5e0{n}");
    let vllm = GpuSelector::all().with(GpuLabel::Uuid, [uuid(1), uuid(2)]);
    assert_aggregate(
        reading.aggregate(&vllm),
        GpuAggregate {
            count: 2,
            utilization_percent: spread(Some(90.0), Some(97.0), 2),
            framebuffer_used_mib: spread(Some(71168.0), Some(71234.0), 2),
            graphics_engine_active: spread(Some(0.8565), Some(0.912), 2),
            sm_active: spread(Some(0.887), Some(0.887), 1),
            dram_active: spread(Some(0.475), Some(0.503), 2),
            // The page has no energy counter; every GPU's power.
            energy: vec![power(&uuid(1), 61.823), power(&uuid(2), 61.823)],
        },
    );

    let rest = GpuSelector::all()
        .with(GpuLabel::Gpu, ["2".to_owned(), "3".to_owned()])
        .with(GpuLabel::Hostname, ["gpu-node-1".to_owned()]);
    assert_aggregate(
        reading.aggregate(&rest),
        GpuAggregate {
            count: 2,
            utilization_percent: spread(Some(6.0), Some(12.0), 2),
            framebuffer_used_mib: spread(Some(2051.0), Some(4102.0), 2),
            graphics_engine_active: spread(Some(0.017), Some(0.034), 2),
            sm_active: spread(None, None, 0),
            dram_active: spread(Some(0.0055), Some(0.011), 2),
            energy: vec![power(&uuid(3), 61.823), power(&uuid(4), 61.823)],
        },
    );

    assert_eq!(reading.aggregate(&GpuSelector::all()).count, 4);
    let elsewhere = GpuSelector::all().with(GpuLabel::Hostname, ["gpu-node-2".to_owned()]);
    assert_eq!(reading.aggregate(&elsewhere), GpuAggregate::default());
}

#[test]
fn dcgm_without_profiling_fields_reports_them_unknown() {
    let reading = read_gpus(&page("dcgm-no-prof.prom"));
    assert_eq!(
        (reading.gpus.len(), reading.ignored, reading.refused),
        (2, 4, 1)
    );
    assert_aggregate(
        reading.aggregate(&GpuSelector::all()),
        GpuAggregate {
            count: 2,
            utilization_percent: spread(Some(0.0), Some(0.0), 1),
            framebuffer_used_mib: spread(Some(11155.0), Some(22310.0), 2),
            // Neither energy nor power on the page.
            energy: ["52", "53"]
                .map(|end| GpuEnergy {
                    id: format!("GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e{end}"),
                    ..GpuEnergy::default()
                })
                .into(),
            ..GpuAggregate::default()
        },
    );
}

#[test]
fn pages_of_other_kinds_read_as_nothing() {
    let engine = read_engine(&page("dcgm-a100.prom"));
    assert_eq!((engine.server, engine.models.len()), (None, 0));
    let gpus = read_gpus(&page("vllm.prom"));
    assert!(gpus.gpus.is_empty());
    assert_eq!(gpus.ignored, 29);
}

/// A page cut anywhere (a body cut short by its size bound, a connection
/// that broke) parses or is refused, never panics, and never yields a
/// sample the whole page does not hold.
#[test]
fn every_fixture_cut_at_every_byte() {
    for fixture in FIXTURES {
        let whole = bytes(fixture);
        let full = page(fixture);
        for cut in 0..=whole.len() {
            let Ok(part) = parse(&whole[..cut], &Limits::default()) else {
                continue;
            };
            // Only the last line can differ: a value cut short is a
            // smaller number, or a name cut short another name.
            let n = part.samples().len();
            assert!(n <= full.samples().len(), "{fixture} at {cut}");
            if n > 1 {
                assert_eq!(part.samples()[..n - 1], full.samples()[..n - 1]);
            }
            // Reading is linear in the samples, whatever they are: once
            // per line is enough to show a cut page reads without panic.
            if whole.get(cut) == Some(&b'\n') {
                let _ = read_engine(&part);
                let _ = read_gpus(&part);
            }
        }
    }
}
