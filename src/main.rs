//! The `tokenmeter` binary: everything lives in the library.

fn main() -> std::process::ExitCode {
    tokenmeter::app::cli::main()
}
