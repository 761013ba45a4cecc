//! Figures from samples and from `/proc`: percentiles, peak RSS, CPU time, load average.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Percentiles of a set of durations (nearest rank).
#[derive(Debug, Clone, Default)]
pub struct Dist {
    sorted: Vec<Duration>,
}

impl Dist {
    pub fn new(mut samples: Vec<Duration>) -> Self {
        samples.sort_unstable();
        Self { sorted: samples }
    }

    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    /// The `q` quantile (0 < q ≤ 1) in milliseconds; `None` without samples.
    pub fn ms(&self, q: f64) -> Option<f64> {
        if self.sorted.is_empty() {
            return None;
        }
        let rank = ((q * self.sorted.len() as f64).ceil() as usize).clamp(1, self.sorted.len());
        Some(ms(self.sorted[rank - 1]))
    }

    pub fn p50(&self) -> Option<f64> {
        self.ms(0.5)
    }

    pub fn p99(&self) -> Option<f64> {
        self.ms(0.99)
    }

    pub fn max(&self) -> Option<f64> {
        self.ms(1.0)
    }
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Peak resident set size of `pid` (`VmHWM`), in MiB.
pub fn peak_rss_mib(pid: u32) -> Option<f64> {
    status_kib(pid, "VmHWM:").map(|kib| kib as f64 / 1024.0)
}

/// Current resident set size of `pid` (`VmRSS`), in MiB.
pub fn rss_mib(pid: u32) -> Option<f64> {
    status_kib(pid, "VmRSS:").map(|kib| kib as f64 / 1024.0)
}

/// Resident memory of a process now, split as the kernel counts it: anonymous pages (its
/// heap and stacks) and file-backed pages (mostly its binary's code, shared with every
/// process that maps the same file and reclaimable by the kernel).
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct RssParts {
    pub anon_mib: f64,
    pub file_mib: f64,
    /// Of `file_mib`, the pages of the process's own executable (the rest: shared libraries).
    pub exe_mib: Option<f64>,
}

/// `RssAnon` and `RssFile` of `pid`, in MiB.
pub fn rss_parts(pid: u32) -> Option<RssParts> {
    Some(RssParts {
        anon_mib: status_kib(pid, "RssAnon:")? as f64 / 1024.0,
        file_mib: status_kib(pid, "RssFile:")? as f64 / 1024.0,
        exe_mib: exe_rss_kib(pid).map(|kib| kib as f64 / 1024.0),
    })
}

/// The resident pages of the mappings of `pid`'s own executable, from `/proc/PID/smaps`.
fn exe_rss_kib(pid: u32) -> Option<u64> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let exe = exe.to_str()?;
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).ok()?;
    let mut in_exe = false;
    let mut kib = 0;
    for line in smaps.lines() {
        let mut words = line.split_whitespace();
        let Some(first) = words.next() else { continue };
        if first == "Rss:" {
            if in_exe {
                kib += words.next()?.parse::<u64>().ok()?;
            }
        } else if !first.ends_with(':') {
            // A mapping's header: `ADDR-ADDR PERMS OFFSET DEV INODE [PATH]`.
            in_exe = line.ends_with(exe);
        }
    }
    Some(kib)
}

/// Threads of `pid`.
pub fn threads(pid: u32) -> Option<u64> {
    status_kib(pid, "Threads:")
}

/// Open file descriptors of `pid` whose target matches `what` (e.g. the server's SQLite
/// connections: `|t| t.ends_with("/state.db")`; its sockets: `|t| t.starts_with("socket:")`).
pub fn open_files(pid: u32, what: impl Fn(&str) -> bool) -> Option<usize> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    Some(
        fds.flatten()
            .filter_map(|fd| std::fs::read_link(fd.path()).ok())
            .filter(|target| what(&target.to_string_lossy()))
            .count(),
    )
}

fn status_kib(pid: u32, key: &str) -> Option<u64> {
    status_file_kib(&format!("/proc/{pid}/status"), key)
}

fn status_file_kib(path: &str, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(path).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// User plus system CPU time `pid` has used so far (`/proc/PID/stat` utime + stime).
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces), from field 3 (state) on.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    let hz = rustix::param::clock_ticks_per_second().max(1);
    Some(Duration::from_secs_f64((utime + stime) as f64 / hz as f64))
}

/// CPU time of the threads of `pid` whose name starts with `name` (a thread's name is
/// cut to 15 bytes by the kernel: `csivol-db-write` for the server's writer).
pub fn thread_cpu_time(pid: u32, name: &str) -> Option<Duration> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total = None;
    for t in tasks.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if !comm.trim_end().starts_with(name) {
            continue;
        }
        let stat = std::fs::read_to_string(t.path().join("stat")).ok()?;
        let rest = &stat[stat.rfind(')')? + 2..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 =
            fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        let hz = rustix::param::clock_ticks_per_second().max(1);
        *total.get_or_insert(Duration::ZERO) += Duration::from_secs_f64(ticks as f64 / hz as f64);
    }
    total
}

/// CPU time of several processes together.
pub fn cpu_time_of(pids: &[u32]) -> Duration {
    pids.iter().filter_map(|p| cpu_time(*p)).sum()
}

/// `<CPU model>, <memory> GiB RAM`, from `/proc/cpuinfo` and `/proc/meminfo`.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let mem_gib = status_file_kib("/proc/meminfo", "MemTotal:").map(|k| k as f64 / 1048576.0);
    match mem_gib {
        Some(m) => format!("{cpu}, {m:.0} GiB RAM"),
        None => cpu,
    }
}

/// CPU time the whole machine spent busy so far (all CPUs; `/proc/stat`: user, nice,
/// system, irq, softirq, steal).
pub fn machine_busy() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let busy = [0, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|i| v.get(*i))
        .sum::<u64>();
    let hz = rustix::param::clock_ticks_per_second().max(1);
    Some(Duration::from_secs_f64(busy as f64 / hz as f64))
}

/// The 1-minute load average.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Runs `f` on every item with at most `limit` in flight; returns the results in order.
pub async fn concurrently<T, R, F, Fut>(items: Vec<T>, limit: usize, f: F) -> Vec<R>
where
    T: Send + 'static,
    R: Send + 'static,
    F: Fn(T) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = R> + Send + 'static,
{
    let f = Arc::new(f);
    let permits = Arc::new(tokio::sync::Semaphore::new(limit.max(1)));
    let mut tasks = tokio::task::JoinSet::new();
    let n = items.len();
    for (i, item) in items.into_iter().enumerate() {
        let permit = Arc::clone(&permits)
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let f = Arc::clone(&f);
        tasks.spawn(async move {
            let r = f(item).await;
            drop(permit);
            (i, r)
        });
    }
    let mut out: Vec<Option<R>> = (0..n).map(|_| None).collect();
    while let Some(done) = tasks.join_next().await {
        let (i, r) = done.expect("a task panicked");
        out[i] = Some(r);
    }
    out.into_iter()
        .map(|r| r.expect("every task ran"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let d = Dist::new((1..=100).rev().map(Duration::from_millis).collect());
        assert_eq!(d.p50(), Some(50.0));
        assert_eq!(d.p99(), Some(99.0));
        assert_eq!(d.max(), Some(100.0));
        assert_eq!(Dist::new(vec![]).p50(), None);
        let one = Dist::new(vec![Duration::from_millis(7)]);
        assert_eq!((one.p50(), one.p99()), (Some(7.0), Some(7.0)));
    }

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        assert!(peak_rss_mib(me).is_some_and(|m| m > 0.0));
        assert!(cpu_time(me).is_some());
    }
}
