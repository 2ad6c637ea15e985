//! The process's own figures, read from `/proc/self` when scraped: resident memory,
//! CPU seconds, open file descriptors, threads.

use std::fmt::Write as _;

/// What `/proc/self` said at one scrape; `None` where it could not be read. A figure
/// that could not be read is left out of the exposition rather than shown as 0: a 0
/// would read as a counter reset (a spike in `rate()`) or as a node with no descriptors
/// open, when descriptors may be exactly what ran out.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcessFigures {
    pub resident_bytes: Option<u64>,
    pub cpu_seconds: Option<f64>,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
    pub threads: Option<u64>,
    pub start_time_seconds: Option<f64>,
}

impl ProcessFigures {
    /// Reads them now.
    pub fn read() -> ProcessFigures {
        let mut figures = ProcessFigures::default();
        if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
            for line in status.lines() {
                let value = |l: &str| l.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok());
                if line.starts_with("VmRSS:") {
                    figures.resident_bytes = value(line).map(|kib| kib * 1024);
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
                let field = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok());
                if let (Some(user), Some(system)) = (field(11), field(12)) {
                    figures.cpu_seconds = Some((user + system) as f64 / ticks);
                }
                if let (Some(boot), Some(start)) = (boot_time_seconds(), field(19)) {
                    figures.start_time_seconds = Some(boot as f64 + start as f64 / ticks);
                }
            }
        }
        figures.open_fds = std::fs::read_dir("/proc/self/fd").ok().map(|d| d.count() as u64);
        if let Ok(limits) = std::fs::read_to_string("/proc/self/limits") {
            figures.max_fds = limits
                .lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3)?.parse().ok());
        }
        figures
    }

    pub fn render(&self, out: &mut String) {
        let mut one = |name: &str, help: &str, kind: &str, value: Option<String>| {
            if let Some(value) = value {
                let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
            }
        };
        let int = |v: Option<u64>| v.map(|v| v.to_string());
        let float = |v: Option<f64>| v.map(|v| format!("{v}"));
        one(
            "ticketing_process_resident_memory_bytes",
            "Resident memory of the node process.",
            "gauge",
            int(self.resident_bytes),
        );
        one(
            "ticketing_process_cpu_seconds_total",
            "CPU time the node process used (user and system).",
            "counter",
            float(self.cpu_seconds),
        );
        one(
            "ticketing_process_open_fds",
            "File descriptors the node process has open.",
            "gauge",
            int(self.open_fds),
        );
        one("ticketing_process_max_fds", "The node process's open-files limit.", "gauge", int(self.max_fds));
        one("ticketing_process_threads", "Threads of the node process.", "gauge", int(self.threads));
        one(
            "ticketing_process_start_time_seconds",
            "When the node process started, in seconds since the Unix epoch.",
            "gauge",
            float(self.start_time_seconds),
        );
    }
}

/// The system's boot time (`btime` in /proc/stat), in seconds since the Unix epoch.
fn boot_time_seconds() -> Option<u64> {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("btime ")?.trim().parse().ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_memory_threads_and_descriptors() {
        let f = ProcessFigures::read();
        assert!(f.resident_bytes.unwrap() > 1 << 20, "{f:?}");
        let (threads, open, max) = (f.threads.unwrap(), f.open_fds.unwrap(), f.max_fds.unwrap());
        assert!(threads >= 1 && open >= 3 && max >= open, "{f:?}");
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        let start = f.start_time_seconds.unwrap();
        assert!(start > now - 3600.0 && start <= now + 1.0, "{f:?}");
    }

    #[test]
    fn a_figure_that_could_not_be_read_is_left_out() {
        let f = ProcessFigures { resident_bytes: Some(4096), ..Default::default() };
        let mut out = String::new();
        f.render(&mut out);
        assert!(out.contains("ticketing_process_resident_memory_bytes 4096\n"), "{out}");
        assert!(!out.contains("cpu_seconds") && !out.contains("open_fds"), "{out}");
    }
}
