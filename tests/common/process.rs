//! The one launcher of a real `ticketing server` process for the tests: [`Server`]
//! builds its environment (listen address, secrets, TLS, cluster membership, anything
//! else), starts it, and waits until it listens; [`ServerProcess`] is the running
//! process, killed when dropped.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ticketing::client::Client;

use super::children::{try_run_within, TOOL};
use super::facts_cluster::wait_stopped;
use super::wait::eventually_every;
use super::{PEER_TOKEN, TOKEN};

/// What the server's message says when its listen (or peer, or metrics) address is
/// taken: `ticketing: cannot start on ADDR: Address already in use (os error 98)`.
pub const ADDR_IN_USE: &str = "Address already in use";

/// The `ticketing` binary of this build.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_ticketing")
}

/// The last `lines` lines of the file at `path` (a node's log).
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// How a server is started. [`Server::new`] is a standalone node on an ephemeral
/// loopback port with the client secret [`TOKEN`] and `RUST_LOG=info`; every option
/// adds environment or changes how the process runs. Variables are set in the order
/// given, a later one replacing an earlier one of the same name.
pub struct Server {
    program: PathBuf,
    env: Vec<(String, String)>,
    /// Standard output and error into this file instead of the `log` channel.
    log_file: Option<PathBuf>,
    uid: Option<(u32, u32)>,
    start_within: Duration,
}

impl Default for Server {
    fn default() -> Server {
        Server::new()
    }
}

impl Server {
    pub fn new() -> Server {
        Server {
            program: PathBuf::from(bin()),
            env: Vec::new(),
            log_file: None,
            uid: None,
            start_within: Duration::from_secs(10),
        }
        .env("TICKETING_LISTEN", "127.0.0.1:0")
        .env("TICKETING_AUTH_TOKEN", TOKEN)
        .env("RUST_LOG", "info")
    }

    pub fn env(mut self, name: &str, value: &str) -> Server {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    pub fn envs(mut self, vars: &[(&str, &str)]) -> Server {
        for (name, value) in vars {
            self = self.env(name, value);
        }
        self
    }

    pub fn listen(self, addr: &str) -> Server {
        self.env("TICKETING_LISTEN", addr)
    }

    /// TLS on the client port with this certificate chain and key (PEM files).
    pub fn tls(self, cert: &str, key: &str) -> Server {
        self.env("TICKETING_TLS_CERT", cert).env("TICKETING_TLS_KEY", key)
    }

    /// A cluster node at `at` (its peers dial it there) among `peers` (`ID@ADDR,...`),
    /// started as `state` (`new` or `join`), with the peer secret [`PEER_TOKEN`]. Its
    /// NodeId is `id`, or one it draws itself when `None`.
    pub fn member(mut self, id: Option<u64>, at: &str, peers: &str, state: &str) -> Server {
        if let Some(id) = id {
            self = self.env("TICKETING_NODE_ID", &id.to_string());
        }
        self.env("TICKETING_CLUSTER_SELF", at)
            .env("TICKETING_CLUSTER_PEERS", peers)
            .env("TICKETING_CLUSTER_STATE", state)
            .env("TICKETING_PEER_AUTH_TOKEN", PEER_TOKEN)
    }

    /// Runs this binary instead of the build's.
    pub fn program(mut self, path: &Path) -> Server {
        self.program = path.to_owned();
        self
    }

    /// Runs the process as this user and group.
    pub fn run_as(mut self, uid: u32, gid: u32) -> Server {
        self.uid = Some((uid, gid));
        self
    }

    /// Writes the process's output to `path`: its log is read from there (with [`tail`]),
    /// and [`ServerProcess::wait_log`] is not available.
    pub fn log_to(mut self, path: &Path) -> Server {
        self.log_file = Some(path.to_owned());
        self
    }

    /// How long it may take to print its listen address (default 10 s).
    pub fn start_within(mut self, within: Duration) -> Server {
        self.start_within = within;
        self
    }

    /// Starts it; panics with its log if it does not listen.
    pub fn start(self) -> ServerProcess {
        self.try_start().unwrap_or_else(|why| panic!("{why}"))
    }

    /// Starts it and waits until it listens; why not, with its log, if it does not. A
    /// server that could not bind its address says so first (see
    /// [`addr_in_use`](super::ports::addr_in_use)).
    pub fn try_start(self) -> Result<ServerProcess, String> {
        let mut cmd = Command::new(&self.program);
        cmd.arg("server").env_clear().stdin(Stdio::null());
        for (name, value) in &self.env {
            cmd.env(name, value);
        }
        if let Some((uid, gid)) = self.uid {
            cmd.uid(uid).gid(gid);
        }
        match &self.log_file {
            Some(path) => {
                let file = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
                cmd.stdout(file.try_clone().unwrap()).stderr(file);
            }
            None => {
                cmd.stdout(Stdio::null()).stderr(Stdio::piped());
            }
        }
        // The child is killed and waited for by `ServerProcess::drop`.
        #[allow(clippy::zombie_processes)]
        let child = cmd.spawn().map_err(|e| format!("start {}: {e}", self.program.display()))?;
        let (tx, rx) = mpsc::channel();
        let mut server = ServerProcess { child, addr: "0.0.0.0:0".parse().unwrap(), log: rx };
        let listening = match &self.log_file {
            Some(path) => wait_in_file(&mut server.child, path, self.start_within),
            None => {
                forward_stderr(&mut server.child, tx);
                wait_in_channel(&server.log, self.start_within)
            }
        };
        match listening {
            Ok(addr) => {
                server.addr = addr;
                Ok(server)
            }
            Err((exited, log)) => {
                let exit = match exited {
                    true => format!("exited ({:?})", server.wait_exit(Duration::from_secs(10))),
                    false => format!("printed no listen address within {:?}", self.start_within),
                };
                let taken = match log.contains(ADDR_IN_USE) {
                    true => format!("its address was taken ({ADDR_IN_USE}): "),
                    false => String::new(),
                };
                Err(format!("{taken}the server {exit}; environment {:?}; its log:\n{log}", self.env))
            }
        }
    }
}

/// The address in a `... listening on ADDR ...` line.
fn listen_address(line: &str) -> Option<SocketAddr> {
    line.split(" listening on ").nth(1)?.split_whitespace().next()?.parse().ok()
}

/// Sends every line of the child's standard error to `tx` (and, with
/// TICKETING_TEST_LOGS=DIR, to DIR/<pid>.log for debugging).
fn forward_stderr(child: &mut Child, tx: mpsc::Sender<String>) {
    let stderr = child.stderr.take().unwrap();
    let mut keep = std::env::var_os("TICKETING_TEST_LOGS").map(|dir| {
        let path = Path::new(&dir).join(format!("{}.log", child.id()));
        std::fs::File::create(path).expect("log file")
    });
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if let Some(file) = keep.as_mut() {
                let _ = writeln!(file, "{line}");
            }
            let _ = tx.send(line);
        }
    });
}

/// The listen address from the log channel; else whether it exited, and the lines read.
fn wait_in_channel(log: &mpsc::Receiver<String>, within: Duration) -> Result<SocketAddr, (bool, String)> {
    let deadline = Instant::now() + within;
    // What it printed before it listened: shown if it never does.
    let mut before = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match log.recv_timeout(left) {
            Ok(line) => match listen_address(&line) {
                Some(addr) => return Ok(addr),
                None => before.push(line),
            },
            Err(e) => return Err((e == mpsc::RecvTimeoutError::Disconnected, before.join("\n"))),
        }
    }
}

/// The listen address from the log file; else whether it exited, and the file's tail.
fn wait_in_file(child: &mut Child, path: &Path, within: Duration) -> Result<SocketAddr, (bool, String)> {
    // Every 20 ms: each look reads the whole file. Ends on the line or on the exit.
    let seen = eventually_every(within, Duration::from_millis(20), || {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        match text.lines().find_map(listen_address) {
            Some(addr) => Some(Ok(addr)),
            None => matches!(child.try_wait(), Ok(Some(_))).then(|| Err((true, tail(path, 20)))),
        }
    });
    seen.unwrap_or_else(|| Err((false, tail(path, 20))))
}

/// How often a wait for a process's exit looks: fine enough for the tests that time
/// how long a stop took.
const EXIT_POLL: Duration = Duration::from_millis(10);

/// A `ticketing server` process; killed when dropped.
pub struct ServerProcess {
    pub child: Child,
    /// Where it listens (as its log says).
    pub addr: SocketAddr,
    /// Its log lines from when it listened on (empty when logging to a file).
    pub log: mpsc::Receiver<String>,
}

impl ServerProcess {
    /// The exit code once the process has exited by itself, waiting up to `within`;
    /// `None` if it still runs then (or was killed by a signal).
    pub fn wait_exit(&mut self, within: Duration) -> Option<i32> {
        self.exit_status(within)?.code()
    }

    /// The exit status once the process has exited, waiting up to `within`.
    fn exit_status(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        eventually_every(within, EXIT_POLL, || self.child.try_wait().unwrap())
    }

    /// The exit code once the process has exited by itself, waiting up to `within`;
    /// panics (naming `what`) if it is still running then.
    pub fn exit_code_within(&mut self, within: Duration, what: &str) -> Option<i32> {
        self.exit_status(within).unwrap_or_else(|| panic!("{what} kept running")).code()
    }

    /// Sends `sig` (`-STOP`, `-CONT`, `-TERM`...) with kill(1); whether it was sent.
    /// `-STOP` returns only once every thread of the process has stopped (false if that
    /// takes over 10 s): kill(1) returns before the signal takes effect, and a thread
    /// still running could answer the request a test sends to the "paused" server next.
    pub fn signal(&self, sig: &str) -> bool {
        let pid = self.child.id();
        let mut kill = Command::new("kill");
        let sent = try_run_within(kill.args([sig, &pid.to_string()]), TOOL, "kill")
            .is_ok_and(|o| o.status.success());
        sent && (sig != "-STOP" || wait_stopped(pid, Duration::from_secs(10)))
    }

    /// SIGKILL, and reaped.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The first line of its log from now on that `matches`, waiting up to `within`;
    /// panics (naming `what`, with the lines read) if none comes.
    pub fn wait_log(&self, within: Duration, what: &str, matches: impl Fn(&str) -> bool) -> String {
        self.log_until(within, what, matches).pop().unwrap()
    }

    /// [`ServerProcess::wait_log`], returning the lines read before the match too.
    pub fn log_until(&self, within: Duration, what: &str, matches: impl Fn(&str) -> bool) -> Vec<String> {
        let deadline = Instant::now() + within;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.log.recv_timeout(left) {
                Ok(line) => {
                    let found = matches(&line);
                    seen.push(line);
                    if found {
                        return seen;
                    }
                }
                Err(_) => panic!("no line of {what} within {within:?}; the log:\n{}", seen.join("\n")),
            }
        }
    }

    /// An official client of this server with the secret [`TOKEN`], as `owner`.
    pub fn client(&self, owner: &str) -> Client {
        Client::builder().addrs([self.addr.to_string()]).auth_token(TOKEN).owner(owner).build().unwrap()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts a standalone server on an ephemeral loopback port with `extra` environment.
pub fn start_server(extra: &[(&str, &str)]) -> ServerProcess {
    Server::new().envs(extra).start()
}

/// A child process killed (and reaped) however the test ends.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
