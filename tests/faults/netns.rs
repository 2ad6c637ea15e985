//! A network namespace owned by the run: created with `ip netns add`, entered by the
//! calling thread with `setns(2)` (threads and processes it starts inherit it), and
//! deleted when dropped. Every iptables/tc command runs through `ip netns exec`, so
//! nothing ever touches the host's network.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};

use crate::common::children::{output_within, Within, TOOL};

extern "C" {
    fn setns(fd: i32, nstype: i32) -> i32;
    fn geteuid() -> u32;
}
const CLONE_NEWNET: i32 = 0x4000_0000;

pub fn is_root() -> bool {
    unsafe { geteuid() == 0 }
}

pub struct Netns {
    pub name: String,
    /// Whether `tc qdisc … netem` works in this kernel.
    pub netem: bool,
}

fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.try_output_within(TOOL).map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!("{cmd:?}: {} {}", out.status, String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Deletes `tkt-<pid>` namespaces left by runs whose process is gone (a run killed
/// with SIGKILL cannot clean up after itself).
pub fn remove_stale() {
    let Ok(list) = run(Command::new("ip").args(["netns", "list"])) else { return };
    for line in list.lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let pid =
            name.strip_prefix("tkt-").and_then(|p| p.split('-').next()).and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid {
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                let _ = run(Command::new("ip").args(["netns", "del", name]));
            }
        }
    }
}

impl Netns {
    /// Creates the namespace and brings its loopback up, or says why it cannot.
    pub fn create() -> Result<Netns, String> {
        if !is_root() {
            return Err("not running as root".into());
        }
        run(Command::new("ip").arg("-V")).map_err(|e| format!("`ip` (iproute2) is not usable: {e}"))?;
        remove_stale();
        // One per call: tests of one process may each have their own.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let name = if n == 0 {
            format!("tkt-{}", std::process::id())
        } else {
            format!("tkt-{}-{n}", std::process::id())
        };
        let _ = run(Command::new("ip").args(["netns", "del", &name]));
        run(Command::new("ip").args(["netns", "add", &name]))?;
        let mut ns = Netns { name, netem: false };
        ns.exec(&["ip", "link", "set", "lo", "up"])?;
        ns.exec(&["iptables", "-S"]).map_err(|e| format!("iptables is not usable: {e}"))?;
        ns.exec(&["iptables", "-N", "TKT"])?;
        ns.exec(&["iptables", "-A", "INPUT", "-j", "TKT"])?;
        let netem = ns.exec(&["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"]).is_ok();
        let _ = ns.exec(&["tc", "qdisc", "del", "dev", "lo", "root"]);
        ns.netem = netem;
        Ok(ns)
    }

    /// Moves the calling thread into the namespace.
    pub fn enter(&self) -> Result<(), String> {
        let f =
            File::open(format!("/var/run/netns/{}", self.name)).map_err(|e| format!("open netns: {e}"))?;
        if unsafe { setns(f.as_raw_fd(), CLONE_NEWNET) } != 0 {
            return Err(format!("setns: {}", std::io::Error::last_os_error()));
        }
        Ok(())
    }

    pub fn exec(&self, args: &[&str]) -> Result<String, String> {
        run(Command::new("ip").args(["netns", "exec", &self.name]).args(args))
    }

    /// Applies iptables rules (lines of `iptables-restore` syntax for the filter
    /// table) atomically, replacing the TKT chain's rules.
    pub fn set_filter(&self, rules: &[String]) -> Result<(), String> {
        let mut text = String::from("*filter\n-F TKT\n");
        for r in rules {
            text.push_str(r);
            text.push('\n');
        }
        text.push_str("COMMIT\n");
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.name, "iptables-restore", "--noflush"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("iptables-restore: {e}"))?;
        child.stdin.take().unwrap().write_all(text.as_bytes()).map_err(|e| e.to_string())?;
        let out = output_within(child, TOOL, "iptables-restore", false);
        if out.status.success() {
            Ok(())
        } else {
            Err(format!("iptables-restore: {}", String::from_utf8_lossy(&out.stderr)))
        }
    }

    /// Marks every connection a process of `uid` opens with `mark` (so rules can tell
    /// which node dialed it: every node's outgoing connections come from 127.0.0.1).
    pub fn mark_uid(&self, uid: u32, mark: u32) -> Result<(), String> {
        self.exec(&[
            "iptables",
            "-t",
            "mangle",
            "-A",
            "OUTPUT",
            "-m",
            "conntrack",
            "--ctstate",
            "NEW",
            "-m",
            "owner",
            "--uid-owner",
            &uid.to_string(),
            "-j",
            "CONNMARK",
            "--set-mark",
            &mark.to_string(),
        ])
        .map(|_| ())
    }

    /// Removes every partition, loss and delay.
    pub fn heal(&self) -> Result<(), String> {
        let _ = self.exec(&["tc", "qdisc", "del", "dev", "lo", "root"]);
        self.set_filter(&[])?;
        // Existing conntrack entries keep their marks; nothing else to undo.
        Ok(())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run(Command::new("ip").args(["netns", "del", &self.name]));
    }
}

/// A namespace of the test's own, entered by the calling thread (the nodes it starts
/// inherit it), or `None` after saying on stderr why the test `test` is skipped.
pub fn for_test(test: &str) -> Option<Netns> {
    match Netns::create().and_then(|ns| ns.enter().map(|_| ns)) {
        Ok(ns) => Some(ns),
        Err(why) => {
            eprintln!("{test}: SKIPPED, no network namespace: {why}");
            None
        }
    }
}
