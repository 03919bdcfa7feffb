//! The CPU time a hop spent, read from `/proc` (Linux): what a request costs
//! the proxy itself, apart from the waiting that a busy machine adds to its
//! latency.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The kernel's unit for CPU times in `/proc` (`USER_HZ`), 100 per second
/// on every Linux architecture ballast runs on.
const TICKS_PER_SECOND: u64 = 100;

/// Whose CPU time to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Who {
    /// The threads of this process whose names start with one of these.
    Threads(Vec<String>),
    /// A process and its children (nginx's master and workers).
    Process(u32),
    /// Every process of this name (a database server's backends).
    Named(&'static str),
}

/// User and system time used so far; `None` where `/proc` cannot tell.
pub fn used(who: &Who) -> Option<Duration> {
    if !Path::new("/proc/self/stat").exists() {
        return None;
    }
    let ticks: u64 = match who {
        Who::Threads(names) => {
            own_threads(names).iter().filter_map(|task| Stat::read(task)).map(|s| s.ticks).sum()
        }
        // A process's own line counts its threads, those gone included.
        _ => processes(who).iter().filter_map(|process| Stat::read(process)).map(|s| s.ticks).sum(),
    };
    Some(Duration::from_millis(ticks * 1000 / TICKS_PER_SECOND))
}

/// The kernel's ids of the threads `who` names (for a process, its own
/// and its children's threads), as `perf stat --tid` takes them.
pub fn threads(who: &Who) -> Vec<u32> {
    let tasks = match who {
        Who::Threads(names) => own_threads(names),
        _ => processes(who).iter().flat_map(|process| entries(&process.join("task"))).collect(),
    };
    tasks.iter().filter_map(|task| task.file_name()?.to_str()?.parse().ok()).collect()
}

/// The directories of this process's threads whose names start with one of `names`.
fn own_threads(names: &[String]) -> Vec<PathBuf> {
    entries(Path::new("/proc/self/task"))
        .into_iter()
        .filter(|task| Stat::read(task).is_some_and(|s| names.iter().any(|n| s.comm.starts_with(n))))
        .collect()
}

/// The `/proc` directories of the processes `who` names: a process and its
/// children, or every process of a name.
fn processes(who: &Who) -> Vec<PathBuf> {
    let proc = Path::new("/proc");
    match who {
        Who::Threads(_) => Vec::new(),
        Who::Process(pid) => {
            let children =
                entries(proc).into_iter().filter(|p| Stat::read(p).is_some_and(|s| s.ppid == *pid));
            std::iter::once(proc.join(pid.to_string())).chain(children).collect()
        }
        Who::Named(name) => {
            entries(proc).into_iter().filter(|p| Stat::read(p).is_some_and(|s| s.comm == *name)).collect()
        }
    }
}

/// The entries of a directory; none where it cannot be read.
fn entries(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir).into_iter().flatten().flatten().map(|entry| entry.path()).collect()
}

/// The fields of `/proc/…/stat` used here.
struct Stat {
    comm: String,
    ppid: u32,
    /// utime + stime.
    ticks: u64,
}

impl Stat {
    fn read(dir: &Path) -> Option<Stat> {
        let text = std::fs::read_to_string(dir.join("stat")).ok()?;
        // `pid (comm) state ppid …`: the name may hold spaces and parentheses.
        let (head, rest) = text.rsplit_once(')')?;
        let comm = head.split_once('(')?.1.to_owned();
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
        Some(Stat { comm, ppid: u32::try_from(field(4)?).ok()?, ticks: field(14)? + field(15)? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_thread_shows_up_under_its_name() {
        let (done, measured) = std::sync::mpsc::channel::<()>();
        let spin = std::thread::Builder::new()
            .name("cpu-test-spin".into())
            .spawn(move || {
                let start = std::time::Instant::now();
                let mut x = 0u64;
                while start.elapsed() < Duration::from_millis(300) {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
                // Alive until measured: a finished thread leaves /proc/self/task.
                let _ = measured.recv();
                x
            })
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while used(&Who::Threads(vec!["cpu-test-spin".to_owned()])).unwrap_or_default() == Duration::ZERO {
            assert!(std::time::Instant::now() < deadline, "no CPU time seen for a spinning thread");
            std::thread::sleep(Duration::from_millis(20));
        }
        drop(done);
        spin.join().unwrap();
        assert_eq!(used(&Who::Threads(vec!["no-such-thread".to_owned()])), Some(Duration::ZERO));
    }
}
