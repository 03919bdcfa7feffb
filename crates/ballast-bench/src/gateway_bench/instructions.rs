//! The instructions a hop executed, counted by the CPU's performance
//! counters through `perf stat` attached to the hop's threads for the
//! length of a measurement. Unlike CPU time, an instruction count does not
//! swing with what else the machine runs, its frequency or its hour. Where
//! the counters cannot be read — no `perf`, or a virtual machine that
//! passes no performance counters through (`<not supported>`) — the count
//! is `None` and [`Counting::stop`] says why.

use std::process::{Child, Command, Stdio};

use super::cpu::{self, Who};

/// `perf stat` counting the instructions of some threads, until stopped.
pub struct Counting {
    child: Child,
}

impl Counting {
    /// Starts counting the instructions of the threads `who` names, user
    /// and kernel (a proxy's system calls are its cost too).
    pub fn start(who: &Who) -> Result<Counting, String> {
        let threads = cpu::threads(who);
        if threads.is_empty() {
            return Err("no thread to count".to_owned());
        }
        let list: Vec<String> = threads.iter().map(u32::to_string).collect();
        let child = Command::new("perf")
            .args(["stat", "-x", ",", "--no-big-num", "-e", "instructions", "--tid", &list.join(",")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("perf cannot be run ({e}): apt-get install linux-perf"))?;
        // perf attaches before it reads a signal; a stop sent sooner ends it uncounted.
        std::thread::sleep(std::time::Duration::from_millis(100));
        Ok(Counting { child })
    }

    /// Stops counting: the instructions since [`start`](Self::start).
    pub fn stop(self) -> Result<u64, String> {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-INT", &pid]).status();
        let out = self.child.wait_with_output().map_err(|e| format!("perf: {e}"))?;
        let text = String::from_utf8_lossy(&out.stderr);
        parse(&text)
    }
}

/// The count from `perf stat -x ,`'s report: `COUNT,UNIT,EVENT,…`.
fn parse(report: &str) -> Result<u64, String> {
    let line = report
        .lines()
        .find(|l| l.split(',').nth(2).is_some_and(|e| e.starts_with("instructions")))
        .ok_or_else(|| format!("perf counted no instructions: {}", report.trim()))?;
    let count = line.split(',').next().unwrap_or_default();
    count.parse().map_err(|_| format!("perf: instructions {count} (no performance counters here)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_is_read_and_a_machine_without_counters_says_so() {
        assert_eq!(parse("123456,,instructions:u,2000000,100.00,,\n"), Ok(123_456));
        assert_eq!(parse("123456,,instructions,2000000,100.00,,\n"), Ok(123_456));
        let none = parse("<not supported>,,instructions,0,100.00,,\n").unwrap_err();
        assert!(none.contains("not supported") && none.contains("no performance counters"), "{none}");
        assert!(parse("").is_err());
    }
}
