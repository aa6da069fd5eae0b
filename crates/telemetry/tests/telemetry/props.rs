//! Whatever the bytes, parsing and reading end, without panic, within the
//! limits.

use proptest::prelude::*;
use telemetry::{GpuSelector, Limits, ParseError, parse, read_engine, read_gpus};

/// Reads `input` every way the crate can, and checks the limits held.
fn exercise(input: &[u8], limits: &Limits) {
    match parse(input, limits) {
        Ok(page) => {
            assert!(page.samples().len() <= limits.max_samples);
            assert!(
                page.samples()
                    .iter()
                    .all(|s| s.labels.len() <= limits.max_labels)
            );
            let engine = read_engine(&page);
            assert!(engine.ignored + engine.refused <= page.samples().len());
            let gpus = read_gpus(&page);
            let _ = gpus.aggregate(&GpuSelector::all());
        }
        Err(error) => {
            assert!(!error.kind().is_empty());
            assert!(!error.to_string().is_empty());
        }
    }
}

/// Pieces the format is made of, so that random lines come near to valid
/// ones and reach the parser's every branch.
fn piece() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "vllm:num_requests_running",
        "sglang:token_usage",
        "DCGM_FI_DEV_GPU_UTIL",
        "tgi_queue_size",
        "{",
        "}",
        "=",
        ",",
        "\"",
        "\\",
        "\\\"",
        " ",
        "\t",
        "\n",
        "\r\n",
        "#",
        "# TYPE ",
        "# HELP ",
        "# EOF",
        "model_name",
        "gpu",
        "UUID",
        "1",
        "0.5",
        "-1",
        "NaN",
        "+Inf",
        "1e309",
        "9223372036854775794",
        "é",
        "\u{0}",
    ])
}

proptest! {
    #[test]
    fn random_bytes(input in prop::collection::vec(any::<u8>(), 0..512)) {
        exercise(&input, &Limits::default());
    }

    #[test]
    fn random_lines(pieces in prop::collection::vec(piece(), 0..64)) {
        let text: String = pieces.concat();
        exercise(text.as_bytes(), &Limits::default());
        let tight = Limits { max_samples: 3, max_line_len: 40, max_labels: 2 };
        exercise(text.as_bytes(), &tight);
    }
}

#[test]
fn huge_pages_are_refused_at_the_limits() {
    let limits = Limits::default();
    // One line of 8 MiB: refused at its length, not read into memory.
    let line = vec![b'a'; 8 << 20];
    assert!(matches!(
        parse(&line, &limits),
        Err(ParseError::LineTooLong { line: 1, .. })
    ));
    // 8 MiB of samples: refused at the sample limit.
    let many = "x 1\n".repeat(2 << 20);
    assert!(matches!(
        parse(many.as_bytes(), &limits),
        Err(ParseError::TooManySamples { max: 100_000 })
    ));
    // 8 MiB of comments and blank lines hold nothing and parse.
    let comments = "# HELP x a help text\n\n".repeat(8 << 20 >> 5);
    assert!(parse(comments.as_bytes(), &limits).unwrap().is_empty());
}
