//! Routine events log no warning (docs/operations.md "What the logs say"): on real
//! processes started as the self-healing recipe starts them (`join`, no node id, every
//! node's address as seeds; founded once by `ticketing admin found`), a rolling planned
//! restart of every voter under load (SIGTERM, the process exits, a fresh one at its
//! address joins as the next standby) and heals (a follower, then the leader,
//! SIGKILLed; a fresh process at its address; the autopilot swaps it in) leave not one WARN or ERROR line in any
//! node's log — a warning is for something an operator must act on, and none of these
//! asks for anything — and no node speaks of a node as still to be replaced after it
//! said that node left. Afterwards the recipe's `admin found`, run again with the
//! original addresses, says the cluster is founded already and exits 0.

mod common;

use std::cell::RefCell;
use std::collections::HashSet;
use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::facts_cluster::eventually_some;
use common::grants::Load;
use common::load::load_average;
use common::raw::{call, status};
use common::{
    bin, eventually, free_port_pair, with_fresh_ports, KillOnDrop, Server, ServerProcess, PEER_TOKEN, TOKEN,
};
use ticketing::proto::frame::{Request, Response};

/// The autopilot's smallest threshold for the default timing: a heal takes seconds.
const DEAD_MS: &str = "6000";
/// Bounds far above what each step takes on an idle machine, for a loaded one.
const STEP_WITHIN: Duration = Duration::from_secs(30);
const GRANT_WITHIN: Duration = Duration::from_secs(5);

/// One node process of the recipe, its log file and the id it drew.
struct Node {
    addr: SocketAddr,
    id: u64,
    process: ServerProcess,
}

/// The recipe's nodes: every process's output in a file of `dir`, kept after it ends.
struct Recipe {
    dir: PathBuf,
    seeds: String,
    live: Vec<Node>,
    gone: Vec<Node>,
    started: usize,
}

impl Recipe {
    /// Starts a process at `addr` as the unit does (`join`, no id, the seeds).
    fn start(&mut self, addr: SocketAddr) -> Node {
        self.try_start(addr).unwrap_or_else(|why| panic!("{why}"))
    }

    /// [`Recipe::start`], or why it did not listen.
    fn try_start(&mut self, addr: SocketAddr) -> Result<Node, String> {
        self.started += 1;
        let log = self.dir.join(format!("{}-{}.log", addr.ip(), self.started));
        let process = Server::new()
            .listen(&addr.to_string())
            .member(None, &addr.to_string(), &self.seeds, "join")
            .env("TICKETING_AUTOPILOT_DEAD_MS", DEAD_MS)
            .log_to(&log)
            .try_start()?;
        let id = eventually_some(Duration::from_secs(5), || status(addr)?.get("node_id")?.parse().ok())
            .unwrap_or_else(|| panic!("the node at {addr} answers no STATUS"));
        Ok(Node { addr, id, process })
    }

    /// The index (in `live`) of the node that says it leads, the highest term first.
    fn leader(&self) -> Option<usize> {
        let mut best: Option<(u64, usize)> = None;
        for (i, n) in self.live.iter().enumerate() {
            let Some(s) = status(n.addr) else { continue };
            let term = s.get("term").and_then(|t| t.parse().ok()).unwrap_or(0);
            if s.get("role").map(String::as_str) == Some("leader") && best.is_none_or(|(t, _)| term > t) {
                best = Some((term, i));
            }
        }
        best.map(|(_, i)| i)
    }

    /// The leader's MEMBERS, as `name=value` lines (empty without a leader).
    fn members(&self) -> String {
        let Some(l) = self.leader() else { return String::new() };
        match call(self.live[l].addr, &Request::Members, Duration::from_secs(2)) {
            Some(Response::Status { text }) => text,
            _ => String::new(),
        }
    }

    /// The voters and the standbys (ids) the leader names.
    fn roles(&self) -> (Vec<u64>, Vec<u64>) {
        let text = self.members();
        let ids = |l: &str| l.split(',').filter_map(|v| v.parse().ok()).collect::<Vec<u64>>();
        let voters = text
            .lines()
            .filter_map(|l| l.strip_prefix("member="))
            .filter_map(|l| {
                let mut parts = l.split(' ');
                let id = parts.next()?.parse().ok()?;
                (parts.next()? == "voter").then_some(id)
            })
            .collect();
        let standbys = text.lines().find_map(|l| l.strip_prefix("standbys=")).map(ids).unwrap_or_default();
        (voters, standbys)
    }

    fn wait_standby(&self, id: u64) {
        assert!(
            eventually(STEP_WITHIN, || self.roles().1.contains(&id)),
            "node {id} is no standby: {}\n{}",
            self.members(),
            self.logs()
        );
    }

    /// A planned restart of `live[i]`: SIGTERM, its exit (status 0), a fresh process at
    /// its address, until that one is a standby.
    fn restart(&mut self, i: usize) {
        let (old, addr) = (self.live[i].id, self.live[i].addr);
        assert!(self.live[i].process.signal("-TERM"), "SIGTERM to node {old}");
        let code = self.live[i].process.wait_exit(STEP_WITHIN);
        assert_eq!(code, Some(0), "node {old} after SIGTERM\n{}", self.logs());
        let gone = self.live.remove(i);
        self.gone.push(gone);
        let fresh = self.start(addr);
        let id = fresh.id;
        self.live.push(fresh);
        self.wait_standby(id);
        eprintln!(
            "planned restart of node {old}: node {id} is the next standby (load average {:.1})",
            load_average()
        );
    }

    /// A heal of `live[i]`: SIGKILL, a fresh process at its address, until the leader's
    /// voters are three again without it.
    fn heal(&mut self, i: usize) {
        let (old, addr) = (self.live[i].id, self.live[i].addr);
        self.live[i].process.kill();
        let killed = Instant::now();
        let gone = self.live.remove(i);
        self.gone.push(gone);
        let fresh = self.start(addr);
        self.live.push(fresh);
        let healed = || {
            let (voters, _) = self.roles();
            voters.len() == 3 && !voters.contains(&old)
        };
        assert!(
            eventually(STEP_WITHIN, healed),
            "node {old} was not replaced: {}\n{}",
            self.members(),
            self.logs()
        );
        eprintln!("heal of node {old}: voters {:?} {:?} after the kill", self.roles().0, killed.elapsed());
    }

    /// Every log file's lines, named by file.
    fn lines(&self) -> Vec<(String, String)> {
        let mut files: Vec<PathBuf> =
            std::fs::read_dir(&self.dir).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        let mut out = Vec::new();
        for path in files {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            for line in std::fs::read_to_string(&path).unwrap_or_default().lines() {
                out.push((name.clone(), line.to_owned()));
            }
        }
        out
    }

    fn logs(&self) -> String {
        self.lines().iter().map(|(f, l)| format!("{f}: {l}")).collect::<Vec<_>>().join("\n")
    }
}

/// `ticketing admin found ADDRS` with the operator secret: (exit status, stdout,
/// stderr). It asks each node for up to 10 s; killed if it runs past 30 s.
fn found(addrs: &str) -> (i32, String, String) {
    let child = Command::new(bin())
        .args(["admin", "found", addrs])
        .env_clear()
        .env("TICKETING_AUTH_TOKEN", TOKEN)
        .env("TICKETING_PEER_AUTH_TOKEN", PEER_TOKEN)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let child = RefCell::new(KillOnDrop(child));
    let exited = eventually(Duration::from_secs(30), || child.borrow_mut().0.try_wait().unwrap().is_some());
    assert!(exited, "admin found {addrs} still runs after 30 s");
    let mut child = child.into_inner();
    let (mut out, mut err) = (String::new(), String::new());
    child.0.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    child.0.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    (child.0.wait().unwrap().code().unwrap_or(-1), out, err)
}

/// Lines that speak of node N as of a node still to be replaced (`… where node N ran: …`,
/// `node N ran at this node's address …`) after the same log said `node N left the
/// cluster`: its place was settled, and the line would be false.
fn said_after_it_left(lines: &[(String, String)]) -> Vec<String> {
    let mut left: HashSet<(String, String)> = HashSet::new();
    let mut out = Vec::new();
    for (f, l) in lines {
        let text = l.split_once("] ").map_or(l.as_str(), |(_, t)| t);
        if let Some(id) = text.strip_prefix("node ").and_then(|t| t.strip_suffix(" left the cluster")) {
            left.insert((f.clone(), id.to_owned()));
        }
        let named = text
            .split_once(", where node ")
            .and_then(|(_, t)| t.split_once(" ran"))
            .or_else(|| text.strip_prefix("node ").and_then(|t| t.split_once(" ran at this node's address")))
            .map(|(id, _)| id.to_owned());
        if named.is_some_and(|id| left.contains(&(f.clone(), id))) {
            out.push(format!("{f}: {l}"));
        }
    }
    out
}

/// The lines of `lines` logged at WARN or ERROR.
fn warnings(lines: &[(String, String)]) -> Vec<String> {
    lines
        .iter()
        .filter(|(_, l)| l.contains(" WARN ") || l.contains(" ERROR "))
        .map(|(f, l)| format!("{f}: {l}"))
        .collect()
}

#[test]
fn a_rolling_planned_restart_and_a_heal_log_no_warning_and_found_again_says_founded_already() {
    // The four at planned addresses (the seeds); again on new ports, with new logs (a
    // failed start's log is no routine event), when one's address was taken.
    let (_dir, addrs, founders, mut recipe) = with_fresh_ports("the recipe's four nodes", || {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port_pair();
        let addrs: Vec<SocketAddr> =
            (1..=4).map(|i| format!("127.0.0.{i}:{port}").parse().unwrap()).collect();
        let seeds = addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(",");
        let founders = addrs[..3].iter().map(|a| a.to_string()).collect::<Vec<_>>().join(",");
        let mut recipe =
            Recipe { dir: dir.path().to_path_buf(), seeds, live: Vec::new(), gone: Vec::new(), started: 0 };
        for addr in &addrs {
            let node = recipe.try_start(*addr)?;
            recipe.live.push(node);
        }
        Ok((dir, addrs, founders, recipe))
    });
    // Founded once; the fourth node joins as a standby.
    let (code, out, err) = found(&founders);
    assert_eq!(code, 0, "admin found: {out}{err}\n{}", recipe.logs());
    let fourth = recipe.live[3].id;
    recipe.wait_standby(fourth);
    let again = || {
        let (code, out, err) = found(&founders);
        (code == 0 && out.starts_with("founded already: "), format!("{code}: {out}{err}"))
    };
    assert!(eventually(Duration::from_secs(10), || again().0), "admin found again: {}", again().1);

    let started = Instant::now();
    let load = Load::start(addrs.iter().map(|a| a.to_string()).collect(), 4, 3);
    assert!(eventually(GRANT_WITHIN, || load.grants_since(started) > 0), "the load runs");

    // A rolling restart: the leader, a follower, the leader again (each a voter).
    for step in 0..3 {
        let leader = eventually_some(STEP_WITHIN, || recipe.leader()).expect("a leader");
        let voters = recipe.roles().0;
        let i = if step == 1 {
            (0..recipe.live.len()).find(|i| *i != leader && voters.contains(&recipe.live[*i].id)).unwrap()
        } else {
            leader
        };
        recipe.restart(i);
        let after = Instant::now();
        assert!(
            eventually(GRANT_WITHIN, || load.grants_since(after) > 0),
            "grants go on after restart {step}"
        );
    }

    // Heals: a follower voter dies and its process manager starts a fresh process;
    // then the leader.
    for who in ["follower", "leader"] {
        let leader = eventually_some(STEP_WITHIN, || recipe.leader()).expect("a leader");
        let voters = recipe.roles().0;
        let i = match who {
            "leader" => leader,
            _ => {
                (0..recipe.live.len()).find(|i| *i != leader && voters.contains(&recipe.live[*i].id)).unwrap()
            }
        };
        recipe.heal(i);
        let after = Instant::now();
        assert!(
            eventually(GRANT_WITHIN, || load.grants_since(after) > 0),
            "grants go on after the {who}'s heal"
        );
    }
    let grants = load.finish().unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{grants} grants, none doubled, tokens increasing");

    let lines = recipe.lines();
    let warned = warnings(&lines);
    eprintln!("{} log lines, {} at WARN or ERROR:\n{}", lines.len(), warned.len(), warned.join("\n"));
    if let Some(keep) = std::env::var_os("TICKETING_TEST_LOGS") {
        for (f, l) in &lines {
            use std::io::Write;
            let mut file =
                std::fs::OpenOptions::new().create(true).append(true).open(Path::new(&keep).join(f)).unwrap();
            writeln!(file, "{l}").unwrap();
        }
    }

    let stale = said_after_it_left(&lines);
    assert!(stale.is_empty(), "lines about a node after it left:\n{}", stale.join("\n"));

    // The recipe's founding, run again with the original addresses, which now run other
    // node ids (voters and a standby): founded already.
    assert!(
        eventually(Duration::from_secs(10), || again().0),
        "admin found after the restarts: {}",
        again().1
    );
    assert!(
        warned.is_empty(),
        "{} WARN or ERROR lines in routine events:\n{}",
        warned.len(),
        warned.join("\n")
    );
}

#[test]
fn the_check_for_lines_after_a_node_left_sees_them() {
    let line = |t: &str| ("a.log".to_owned(), format!("[2026-01-01T00:00:00.000Z INFO  ticketing::x] {t}"));
    let before = line("node 7 now runs at 127.0.0.1:1, where node 3 ran: a restarted process under a new id");
    let own = line("node 3 ran at this node's address 127.0.0.1:1 before it (a process that ended)");
    let left = line("node 3 left the cluster");
    assert!(said_after_it_left(&[before.clone(), own.clone(), left.clone()]).is_empty());
    assert_eq!(said_after_it_left(&[left.clone(), before.clone(), own.clone()]).len(), 2);
    let elsewhere = ("b.log".to_owned(), before.1.clone());
    assert!(said_after_it_left(&[left, elsewhere]).is_empty(), "another node's log");
}
