//! The process's own figures, read from `/proc/self` when scraped: resident memory,
//! CPU seconds, open file descriptors, threads.

use std::fmt::Write as _;

/// What `/proc/self` said at one scrape; zero where it could not be read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcessFigures {
    pub resident_bytes: u64,
    pub cpu_seconds: f64,
    pub open_fds: u64,
    pub max_fds: u64,
    pub threads: u64,
    pub start_time_seconds: f64,
}

impl ProcessFigures {
    /// Reads them now.
    pub fn read() -> ProcessFigures {
        let mut figures = ProcessFigures::default();
        if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
            for line in status.lines() {
                let value =
                    |l: &str| l.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                if line.starts_with("VmRSS:") {
                    figures.resident_bytes = value(line) * 1024;
                } else if line.starts_with("Threads:") {
                    figures.threads = value(line);
                }
            }
        }
        let ticks = crate::sys::clock_ticks_per_second().max(1) as f64;
        if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
            // Fields after the command (which may hold spaces) start after the last ')'.
            if let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) {
                let fields: Vec<&str> = rest.split_whitespace().collect();
                // utime and stime are fields 14 and 15 of the whole line (11 and 12
                // after the state field here), starttime field 22.
                let field = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                figures.cpu_seconds = (field(11) + field(12)) as f64 / ticks;
                let boot = boot_time_seconds();
                if boot > 0 {
                    figures.start_time_seconds = boot as f64 + field(19) as f64 / ticks;
                }
            }
        }
        figures.open_fds = std::fs::read_dir("/proc/self/fd").map(|d| d.count() as u64).unwrap_or(0);
        if let Ok(limits) = std::fs::read_to_string("/proc/self/limits") {
            figures.max_fds = limits
                .lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3)?.parse().ok())
                .unwrap_or(0);
        }
        figures
    }

    pub fn render(&self, out: &mut String) {
        let mut one = |name: &str, help: &str, kind: &str, value: String| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
        };
        one(
            "ticketing_process_resident_memory_bytes",
            "Resident memory of the node process.",
            "gauge",
            self.resident_bytes.to_string(),
        );
        one(
            "ticketing_process_cpu_seconds_total",
            "CPU time the node process used (user and system).",
            "counter",
            format!("{}", self.cpu_seconds),
        );
        one(
            "ticketing_process_open_fds",
            "File descriptors the node process has open.",
            "gauge",
            self.open_fds.to_string(),
        );
        one(
            "ticketing_process_max_fds",
            "The node process's open-files limit.",
            "gauge",
            self.max_fds.to_string(),
        );
        one("ticketing_process_threads", "Threads of the node process.", "gauge", self.threads.to_string());
        one(
            "ticketing_process_start_time_seconds",
            "When the node process started, in seconds since the Unix epoch.",
            "gauge",
            format!("{}", self.start_time_seconds),
        );
    }
}

/// The system's boot time (`btime` in /proc/stat), in seconds since the Unix epoch.
fn boot_time_seconds() -> u64 {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("btime ")?.trim().parse().ok()))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_memory_threads_and_descriptors() {
        let f = ProcessFigures::read();
        assert!(f.resident_bytes > 1 << 20, "{f:?}");
        assert!(f.threads >= 1 && f.open_fds >= 3 && f.max_fds >= f.open_fds, "{f:?}");
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        assert!(f.start_time_seconds > now - 3600.0 && f.start_time_seconds <= now + 1.0, "{f:?}");
    }
}
