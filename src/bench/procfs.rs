//! What the kernel says about a process: CPU time and resident memory, read
//! from `/proc` (Linux only; elsewhere every reading is `None`).
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

use std::fs;

/// CPU seconds spent by `pid` so far: the scheduler's own run time of each
/// of its threads (`/proc/<pid>/task/*/schedstat`, nanoseconds), or, where
/// schedstats are off, `utime + stime` (clock ticks).
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    schedstat_seconds(pid).or_else(|| stat_seconds(pid))
}

fn schedstat_seconds(pid: u32) -> Option<f64> {
    let mut total: u64 = 0;
    for task in fs::read_dir(format!("/proc/{pid}/task")).ok()?.flatten() {
        let stat = fs::read_to_string(task.path().join("schedstat")).ok()?;
        total += stat.split_ascii_whitespace().next()?.parse::<u64>().ok()?;
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
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: the fields
    // that follow start after its last `)`.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    // After `)`: state is field 3, utime field 14, stime field 15.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    let ticks = rustix::param::clock_ticks_per_second() as f64;
    Some((utime as f64 / ticks, stime as f64 / ticks))
}

/// The parent process id of `pid`.
fn parent(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// `pid` and its direct children (nginx's master and its workers).
pub fn with_children(pid: u32) -> Vec<u32> {
    let mut pids = vec![pid];
    if let Ok(entries) = fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(child) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            if child != pid && parent(child) == Some(pid) {
                pids.push(child);
            }
        }
    }
    pids
}

/// A `kB` field of `/proc/<pid>/status`, in bytes.
fn status_bytes(pid: u32, field: &str) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line[field.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// Resident memory now, in bytes.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    status_bytes(pid, "VmRSS:")
}

/// The anonymous part of `VmRSS` (`RssAnon`): what the process allocated,
/// without the pages of its binary and libraries it has touched.
pub fn anon_rss_bytes(pid: u32) -> Option<u64> {
    status_bytes(pid, "RssAnon:")
}

/// Peak resident memory since start or the last [`reset_peak`], in bytes.
pub fn peak_rss_bytes(pid: u32) -> Option<u64> {
    status_bytes(pid, "VmHWM:")
}

/// Resets the peak resident memory of `pid` to its current value. Needs to
/// own the process (or be root); failure leaves the peak as it was.
pub fn reset_peak(pid: u32) -> bool {
    fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
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
