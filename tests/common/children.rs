//! Every child process a test waits for, waited for with a deadline: past it the child's
//! whole process group is killed and the test (not the run) fails, naming the command.
//!
//! [`run_within`] is `Command::output` with a deadline; [`Deadline`] guards a child the
//! test talks to (reading its output line by line, writing to its input) until it ends.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

/// The deadline of a run of the `ticketing` binary's CLI (it answers in well under a
/// second).
pub const CLI: Duration = Duration::from_secs(60);
/// The deadline of a small tool (a compiler probe, `openssl`, `readelf`, a test program).
pub const TOOL: Duration = Duration::from_secs(120);
/// The deadline of a build or a package's suite (`cc`, `go`, `mvn`, `npm`, `javac`).
pub const BUILD: Duration = Duration::from_secs(600);

/// How long the readers of a child's output may take after it exited: what it started
/// and left behind was killed with its group, so its pipes close at once.
const DRAIN: Duration = Duration::from_secs(30);

/// Sends SIGKILL to the process group `group` (a child started with `process_group(0)`
/// leads its own); an error (it is gone already) is ignored.
pub fn kill_group(group: u32) {
    if let Ok(group) = i32::try_from(group) {
        // SAFETY: kill(2) with a negative pid signals that process group; no memory.
        unsafe { libc::kill(-group, libc::SIGKILL) };
    }
}

/// Runs `cmd` (its arguments, directory and environment set) to its end with its
/// standard output and error captured, as `Command::output` does, in a process group of
/// its own, with no standard input. Past `within` the group is killed and the test
/// fails naming `what`, the command and the deadline, with what it printed. Whatever
/// the command started and left running is killed when it ends. Panics too if it cannot
/// be started.
pub fn run_within(cmd: &mut Command, within: Duration, what: &str) -> Output {
    try_run_within(cmd, within, what).unwrap_or_else(|e| panic!("cannot start {what} ({cmd:?}): {e}"))
}

/// [`run_within`] for a program that may be missing: `Err` when it cannot be started.
pub fn try_run_within(cmd: &mut Command, within: Duration, what: &str) -> std::io::Result<Output> {
    run_group_within(cmd, within, what, false)
}

/// [`run_within`] for a command whose work is to start services that outlive it (a
/// deployment script starting nodes): its group is killed only past `within`. What it
/// leaves running must not hold its output open (the services log to files).
pub fn run_within_leaving(cmd: &mut Command, within: Duration, what: &str) -> Output {
    run_group_within(cmd, within, what, true).unwrap_or_else(|e| panic!("cannot start {what} ({cmd:?}): {e}"))
}

fn run_group_within(cmd: &mut Command, within: Duration, what: &str, leave: bool) -> std::io::Result<Output> {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    let mut child = cmd.spawn()?;
    let group = child.id();
    let stdout = read_all(child.stdout.take().map(|s| Box::new(s) as Box<dyn Read + Send>));
    let stderr = read_all(child.stderr.take().map(|s| Box::new(s) as Box<dyn Read + Send>));
    let (ended, status) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = ended.send(child.wait());
    });
    let status = status.recv_timeout(within);
    if status.is_err() || !leave {
        kill_group(group);
    }
    let (stdout, stderr) = (stdout.recv_timeout(DRAIN), stderr.recv_timeout(DRAIN));
    let text = |got: &Result<Vec<u8>, mpsc::RecvTimeoutError>| {
        got.as_ref().map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default()
    };
    let status: ExitStatus = match status {
        Ok(status) => status?,
        Err(_) => panic!(
            "{what} ({cmd:?}) did not end within {within:?}: its process group was killed; its output:\n{}\n{}",
            text(&stdout),
            text(&stderr)
        ),
    };
    match (stdout, stderr) {
        (Ok(stdout), Ok(stderr)) => Ok(Output { status, stdout, stderr }),
        _ => panic!("{what} ({cmd:?}) ended ({status}) but its output stayed open for {DRAIN:?}"),
    }
}

/// Reads `from` to its end on a thread of its own; the bytes come on the channel.
fn read_all(from: Option<Box<dyn Read + Send>>) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut from) = from {
            let _ = from.read_to_end(&mut bytes);
        }
        let _ = tx.send(bytes);
    });
    rx
}

/// A deadline on a child the test talks to: past `within`, unless [`Deadline::end`] came
/// first, the child (its group, when it leads one) is killed, so the test's blocking
/// reads of its output end; [`Deadline::end`] then fails the test naming it. Dropped
/// without `end` (the test failed), it stops watching.
pub struct Deadline {
    done: Option<mpsc::Sender<()>>,
    expired: Arc<AtomicBool>,
    watcher: Option<JoinHandle<()>>,
    within: Duration,
    what: String,
}

impl Deadline {
    /// Watches `child` from now on. `group`: it was started with `process_group(0)`, and
    /// its whole group goes.
    pub fn watch(child: &Child, within: Duration, what: &str, group: bool) -> Deadline {
        let pid = child.id();
        let (done, wait) = mpsc::channel::<()>();
        let expired = Arc::new(AtomicBool::new(false));
        let flag = expired.clone();
        let watcher = std::thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(within) {
                flag.store(true, Ordering::Release);
                match group {
                    true => kill_group(pid),
                    // SAFETY: kill(2) of the child's pid, not yet reaped (the test waits
                    // for it after this deadline ends); no memory.
                    false => unsafe {
                        libc::kill(pid as i32, libc::SIGKILL);
                    },
                }
            }
        });
        Deadline { done: Some(done), expired, watcher: Some(watcher), within, what: what.to_owned() }
    }

    /// Stops watching; panics, naming the child and the deadline, if it was killed.
    pub fn end(mut self) {
        self.stop();
        assert!(
            !self.expired.load(Ordering::Acquire),
            "{} did not end within {:?}: it was killed",
            self.what,
            self.within
        );
    }

    fn stop(&mut self) {
        drop(self.done.take());
        if let Some(watcher) = self.watcher.take() {
            let _ = watcher.join();
        }
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `child.wait_with_output()` within `within`: past it the child is killed (its group
/// with `group`) and the test fails naming `what`.
pub fn output_within(child: Child, within: Duration, what: &str, group: bool) -> Output {
    let deadline = Deadline::watch(&child, within, what, group);
    let output = child.wait_with_output();
    deadline.end();
    output.unwrap_or_else(|e| panic!("waiting for {what}: {e}"))
}

/// `child.wait()` within `within`: past it the child is killed (its group with `group`)
/// and the test fails naming `what`.
pub fn wait_within(child: &mut Child, within: Duration, what: &str, group: bool) -> ExitStatus {
    let deadline = Deadline::watch(child, within, what, group);
    let status = child.wait();
    deadline.end();
    status.unwrap_or_else(|e| panic!("waiting for {what}: {e}"))
}

/// [`run_within`] as a method of the command, naming it by its program.
pub trait Within {
    /// `output()` within `within`; panics if it cannot be started or runs past it.
    fn output_within(&mut self, within: Duration) -> Output;
    /// `output()` within `within`; `Err` if it cannot be started (a missing tool).
    fn try_output_within(&mut self, within: Duration) -> std::io::Result<Output>;
}

impl Within for Command {
    fn output_within(&mut self, within: Duration) -> Output {
        let what = self.get_program().to_string_lossy().into_owned();
        run_within(self, within, &what)
    }

    fn try_output_within(&mut self, within: Duration) -> std::io::Result<Output> {
        let what = self.get_program().to_string_lossy().into_owned();
        try_run_within(self, within, &what)
    }
}
