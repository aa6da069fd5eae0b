//! `tokenmeter-bench`: the benchmark rig (`tokenmeter bench` runs it), kept
//! out of the product binary.

fn main() -> std::process::ExitCode {
    bench::main()
}
