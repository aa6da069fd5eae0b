//! What the kernel says about a process: CPU time and resident memory, read
//! from `/proc` through the `procfs` crate (already in the build for the
//! `process_*` metrics); an unreadable reading is `None`.
//!
//! CPU is the scheduler's run time of every live thread of the process
//! (`/proc/<pid>/task/*/schedstat`, in nanoseconds), or `utime + stime` of
//! `/proc/<pid>/stat` (all threads, in clock ticks) where schedstats are
//! unavailable, so it counts what the process cost, whichever thread spent
//! it. Threads that exited during a leg are missed by the first; the
//! processes measured here keep theirs. The split between user space and
//! the kernel comes from `utime` and `stime` alone. Memory is `VmRSS` (now)
//! and `VmHWM` (peak since the last reset) of `/proc/<pid>/status`, in
//! bytes; the peak is reset between legs by writing `5` to
//! `/proc/<pid>/clear_refs`.

use ::procfs::process::{ClearRefs, Process};

fn process(pid: u32) -> Option<Process> {
    Process::new(i32::try_from(pid).ok()?).ok()
}

/// CPU seconds spent by `pid` so far: the scheduler's own run time of each
/// of its threads (`/proc/<pid>/task/*/schedstat`, nanoseconds), or, where
/// schedstats are off, `utime + stime` (clock ticks).
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    schedstat_seconds(pid).or_else(|| stat_seconds(pid))
}

fn schedstat_seconds(pid: u32) -> Option<f64> {
    let mut total: u64 = 0;
    for task in process(pid)?.tasks().ok()? {
        total += task.ok()?.schedstat().ok()?.sum_exec_runtime;
    }
    Some(total as f64 / 1e9)
}

fn stat_seconds(pid: u32) -> Option<f64> {
    let (user, system) = user_system_seconds(pid)?;
    Some(user + system)
}

/// CPU seconds `pid` has spent so far in user space and in the kernel, every
/// thread (`utime` and `stime` of `/proc/<pid>/stat`, in clock ticks, 10 ms
/// on most systems).
pub fn user_system_seconds(pid: u32) -> Option<(f64, f64)> {
    let stat = process(pid)?.stat().ok()?;
    let ticks = ::procfs::ticks_per_second() as f64;
    Some((stat.utime as f64 / ticks, stat.stime as f64 / ticks))
}

/// `pid` and its direct children (nginx's master and its workers).
pub fn with_children(pid: u32) -> Vec<u32> {
    let mut pids = vec![pid];
    let Ok(all) = ::procfs::process::all_processes() else {
        return pids;
    };
    for p in all.flatten() {
        let Ok(child) = u32::try_from(p.pid) else {
            continue;
        };
        let parent = p.stat().ok().and_then(|s| u32::try_from(s.ppid).ok());
        if child != pid && parent == Some(pid) {
            pids.push(child);
        }
    }
    pids
}

/// Resident memory now, in bytes.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    Some(process(pid)?.status().ok()?.vmrss? * 1024)
}

/// The anonymous part of `VmRSS` (`RssAnon`): what the process allocated,
/// without the pages of its binary and libraries it has touched.
pub fn anon_rss_bytes(pid: u32) -> Option<u64> {
    Some(process(pid)?.status().ok()?.rssanon? * 1024)
}

/// Peak resident memory since start or the last [`reset_peak`], in bytes.
pub fn peak_rss_bytes(pid: u32) -> Option<u64> {
    Some(process(pid)?.status().ok()?.vmhwm? * 1024)
}

/// Resets the peak resident memory of `pid` to its current value. Needs to
/// own the process (or be root); failure leaves the peak as it was.
pub fn reset_peak(pid: u32) -> bool {
    process(pid).is_some_and(|p| p.clear_refs(ClearRefs::PeakRSS).is_ok())
}

/// Sums a reading over several processes; `None` if any is unreadable.
pub fn sum<T: std::iter::Sum<T>>(pids: &[u32], read: impl Fn(u32) -> Option<T>) -> Option<T> {
    pids.iter().map(|&p| read(p)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        assert!(cpu_seconds(me).is_some());
        assert!(stat_seconds(me).is_some());
        assert!(user_system_seconds(me).is_some_and(|(u, s)| u >= 0.0 && s >= 0.0));
        assert!(rss_bytes(me).is_some_and(|r| r > 0));
        assert!(anon_rss_bytes(me).is_some_and(|a| a > 0 && Some(a) <= rss_bytes(me)));
        assert!(peak_rss_bytes(me) >= rss_bytes(me).map(|r| r / 2));
        assert_eq!(with_children(me)[0], me);
    }
}
