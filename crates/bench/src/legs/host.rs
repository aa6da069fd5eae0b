//! What the rig sets up on the host: pinning to a core, the open-file
//! limit, and finding programs on `PATH`.

use std::path::PathBuf;

/// Pins the calling thread (and the threads it starts later) to `core`.
pub fn pin_current_thread(core: usize) -> std::io::Result<()> {
    use nix::sched::{CpuSet, sched_setaffinity};
    let mut set = CpuSet::new();
    set.set(core).map_err(std::io::Error::from)?;
    sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).map_err(std::io::Error::from)
}

/// Whether cores 0 and 1 are both available to this process.
pub fn two_cores() -> bool {
    nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0))
        .is_ok_and(|set| set.is_set(0) == Ok(true) && set.is_set(1) == Ok(true))
}

/// Raises the open-file limit (10,000 streams need about 30,000 sockets on
/// the host): to 262,144 when allowed (root may raise the hard limit), else
/// to the hard limit. Children inherit it.
pub fn raise_fd_limit() -> Option<u64> {
    use nix::sys::resource::{RLIM_INFINITY, Resource, getrlimit, setrlimit};
    const WANT: u64 = 262_144;
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    let want = if hard == RLIM_INFINITY {
        WANT
    } else {
        WANT.max(hard)
    };
    if setrlimit(Resource::RLIMIT_NOFILE, want, want).is_err() {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).ok()?;
    }
    let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    (soft != RLIM_INFINITY).then_some(soft)
}

/// Finds `program` on `PATH`.
pub fn which(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        let p = PathBuf::from(program);
        return p.is_file().then_some(p);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(program))
            .find(|p| p.is_file())
    })
}
