//! The `tokenmeter` binary: everything lives in the library.

/// jemalloc rather than the system allocator: with background threads it
/// returns freed memory to the system within seconds (its dirty-page decay),
/// where glibc's malloc keeps most of what thousands of streams freed
/// (docs/benchmarks.md has the memory figures).
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    // Purging on background threads is what returns memory when the process
    // is idle; without them jemalloc purges only as it allocates.
    #[cfg(not(target_env = "msvc"))]
    if let Err(e) = tikv_jemalloc_ctl::background_thread::write(true) {
        eprintln!("tokenmeter: jemalloc background threads unavailable: {e}");
    }
    tokenmeter::app::cli::main()
}
