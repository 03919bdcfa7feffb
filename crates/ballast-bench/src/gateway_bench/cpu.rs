//! The CPU time a hop spent, read from `/proc` (Linux): what a request costs
//! the proxy itself, apart from the waiting that a busy machine adds to its
//! latency.

use std::path::Path;
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
    let ticks = match who {
        Who::Threads(names) => {
            let mut ticks = 0;
            for task in std::fs::read_dir("/proc/self/task").ok()? {
                let stat = Stat::read(&task.ok()?.path())?;
                if names.iter().any(|name| stat.comm.starts_with(name)) {
                    ticks += stat.ticks;
                }
            }
            ticks
        }
        Who::Process(pid) => {
            let mut ticks = Stat::read(&Path::new("/proc").join(pid.to_string()))?.ticks;
            for entry in std::fs::read_dir("/proc").ok()?.flatten() {
                if let Some(stat) = Stat::read(&entry.path()).filter(|s| s.ppid == *pid) {
                    ticks += stat.ticks;
                }
            }
            ticks
        }
        Who::Named(name) => std::fs::read_dir("/proc")
            .ok()?
            .flatten()
            .filter_map(|entry| Stat::read(&entry.path()))
            .filter(|stat| stat.comm == *name)
            .map(|stat| stat.ticks)
            .sum(),
    };
    Some(Duration::from_millis(ticks * 1000 / TICKS_PER_SECOND))
}

/// The kernel's ids of the threads `who` names (for a process, its own
/// and its children's threads), as `perf stat --tid` takes them.
pub fn threads(who: &Who) -> Vec<u32> {
    let tasks = |dir: &Path| -> Vec<u32> {
        std::fs::read_dir(dir.join("task"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|task| task.file_name().to_str()?.parse().ok())
            .collect()
    };
    let proc = Path::new("/proc");
    match who {
        Who::Threads(names) => std::fs::read_dir("/proc/self/task")
            .into_iter()
            .flatten()
            .flatten()
            .filter(|task| {
                Stat::read(&task.path()).is_some_and(|s| names.iter().any(|n| s.comm.starts_with(n)))
            })
            .filter_map(|task| task.file_name().to_str()?.parse().ok())
            .collect(),
        Who::Process(pid) => {
            let mut ids = tasks(&proc.join(pid.to_string()));
            for entry in std::fs::read_dir(proc).into_iter().flatten().flatten() {
                if Stat::read(&entry.path()).is_some_and(|s| s.ppid == *pid) {
                    ids.extend(tasks(&entry.path()));
                }
            }
            ids
        }
        Who::Named(name) => std::fs::read_dir(proc)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|entry| Stat::read(&entry.path()).is_some_and(|s| s.comm == *name))
            .flat_map(|entry| tasks(&entry.path()))
            .collect(),
    }
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
