//! The rig and its legs: starting the simulator and the proxies under test
//! as child processes pinned to their cores, running one leg, and reading
//! what each process spent (CPU, memory) and what the simulator sent.
//!
//! Pinning (Linux, 2 cores or more): proxies run on core 0 (`taskset -c 0`),
//! the simulator on core 1 (`taskset -c 1`), and the bench process itself,
//! the load generator, pins itself to core 1 with `sched_setaffinity`
//! before its runtime starts ([`pin_current_thread`]). `--colocate` puts
//! the proxies on core 1 too.
//!
//! Legs: `direct` (the simulator itself), `tokenmeter` (metering on),
//! `unmetered` (tokenmeter with the route's `protocol: none`: it forwards
//! through the same code but never parses), and `nginx` (Debian's package,
//! `proxy_buffering off`, HTTP/1.1 keep-alive to the upstream) when an
//! `nginx` binary is found, and `baseline` (another tokenmeter binary,
//! `--baseline-bin`, metering on) to compare two builds in one run.
//!
//! Files: `kind.rs` names the legs, `host.rs` pins, raises the open-file
//! limit and finds programs, `process.rs` is one child process, `config.rs`
//! the proxies' generated configs, `rig.rs` starts the simulator and the
//! proxies, `run.rs` runs one leg and holds what it measured, `access.rs`
//! pairs a proxy's access log with the client's requests.

mod access;
mod config;
mod host;
mod kind;
mod process;
mod rig;
mod run;

pub use access::{Pairing, access_ttfts, pair};
pub use host::{pin_current_thread, raise_fd_limit, two_cores, which};
pub use kind::LegKind;
pub use rig::{Rig, RigOptions};
pub use run::{LegRun, SimTotals};
