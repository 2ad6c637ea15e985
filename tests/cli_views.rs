//! The views tell the truth at every moment of a rolling restart and of a kill -9 of
//! the leader: `status`, `top --once`, `admin members` and every node's `/metrics`,
//! polled every 100 ms by threads of their own while the cluster changes, each sample
//! checked against what the test knows of every process at that time (docs/cli.md,
//! docs/metrics.md).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::rolling::Nodes;
use common::*;

/// The autopilot's threshold here (the least it allows with the default election
/// timeout): a dead voter stays a voter at least this long after its death.
const DEAD_MS: u64 = 6000;
/// Longest run of one CLI command before the test kills it and fails.
const COMMAND_DEADLINE: Duration = Duration::from_secs(20);
/// Pause between two runs of one poller.
const POLL: Duration = Duration::from_millis(100);

/// What the test knows of the processes: which run (and answer), which were told to
/// stop or died, and the leader killed with -9.
#[derive(Clone, Default)]
struct Truth {
    /// Running, not signalled: node id → client address.
    alive: BTreeMap<u64, String>,
    /// Processes that exited or were killed (a node told to stop is in neither set
    /// until it exited: it may answer meanwhile).
    dead: BTreeSet<u64>,
    /// Every node id ever started.
    known: BTreeSet<u64>,
    /// The leader killed with -9, and when.
    killed: Option<(u64, Instant)>,
}

/// One run of a view: when it began and ended, what the test knew then, its output.
struct Sample {
    what: &'static str,
    began: Instant,
    ended: Instant,
    before: Truth,
    after: Truth,
    code: Option<i32>,
    out: String,
    err: String,
}

impl Sample {
    /// Nodes that were alive from the start of the run to its end.
    fn alive_throughout(&self) -> BTreeSet<u64> {
        self.before.alive.keys().filter(|id| self.after.alive.contains_key(id)).copied().collect()
    }

    /// The node killed with -9 when the run began, if the run began and ended within
    /// the time it surely stayed a voter (the autopilot waits DEAD_MS from the new
    /// leader's election, which comes after the death).
    fn in_kill_window(&self) -> Option<u64> {
        let (id, at) = self.before.killed?;
        (self.ended < at + Duration::from_millis(DEAD_MS)).then_some(id)
    }

    fn context(&self) -> String {
        format!(
            "{} (took {:?}), exit {:?}; alive {:?} -> {:?}, killed {:?}\n{}\n{}",
            self.what,
            self.ended - self.began,
            self.code,
            self.before.alive.keys().collect::<Vec<_>>(),
            self.after.alive.keys().collect::<Vec<_>>(),
            self.before.killed.map(|(id, _)| id),
            self.out,
            self.err
        )
    }
}

/// Runs `ticketing ARGS`, killed after COMMAND_DEADLINE: (exit code, stdout, stderr).
fn run_cli(args: &[String], addrs: &str) -> (Option<i32>, String, String) {
    let mut child = Command::new(bin())
        .args(args)
        .env("TICKETING_ADDRS", addrs)
        .env("TICKETING_AUTH_TOKEN", TOKEN)
        .env("TICKETING_PEER_AUTH_TOKEN", PEER_TOKEN)
        .env_remove("TICKETING_TLS_CA")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    // Every 5 ms: the samples time the command.
    let code =
        match eventually_every(COMMAND_DEADLINE, Duration::from_millis(5), || child.try_wait().unwrap()) {
            Some(status) => status.code(),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                None
            }
        };
    (code, out.join().unwrap(), err.join().unwrap())
}

/// `GET /metrics` of a node, if it answers.
fn scrape(addr: SocketAddr) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET /metrics HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.contains(" 200 ").then(|| text.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned())
}

/// Runs `sample` every POLL until `stop`, each result recorded with the truth around it.
fn poller(
    what: &'static str,
    truth: Arc<Mutex<Truth>>,
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<Vec<Sample>>>,
    sample: impl Fn(&Truth) -> (Option<i32>, String, String),
) {
    while !stop.load(Ordering::SeqCst) {
        let before = truth.lock().unwrap().clone();
        let began = Instant::now();
        let (code, out, err) = sample(&before);
        let ended = Instant::now();
        let after = truth.lock().unwrap().clone();
        log.lock().unwrap().push(Sample { what, began, ended, before, after, code, out, err });
        // The polling interval of this view, cut short by the stop.
        eventually(POLL, || stop.load(Ordering::SeqCst));
    }
}

/// The rows of a `status` table: (node id, role, leader cell).
fn status_rows(out: &str) -> Vec<(String, String, String)> {
    out.lines()
        .skip(1)
        .filter_map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            let leader = match cells.get(5) {
                Some(&"(unreachable)") => format!("{} (unreachable)", cells[4]),
                _ => cells.get(4)?.to_string(),
            };
            Some((cells.get(1)?.to_string(), cells.get(2)?.to_string(), leader))
        })
        .collect()
}

/// The node rows of a `top` view, each split into its cells.
fn top_rows(out: &str) -> Vec<Vec<String>> {
    out.lines()
        .skip_while(|l| !l.starts_with("NODE "))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().map(str::to_owned).collect::<Vec<String>>())
        // A row's second cell is its address; the lines under the table say why.
        .filter(|cells| cells.get(1).is_some_and(|a| a.parse::<SocketAddr>().is_ok()))
        .collect()
}

/// Checks one sample; the problems found.
fn check(s: &Sample, addr_of: &BTreeMap<u64, String>) -> Vec<String> {
    let mut problems = Vec::new();
    let mut fail = |why: String| problems.push(format!("{why}\n  in {}", s.context()));
    let alive = s.alive_throughout();
    let dead: BTreeSet<u64> = s.before.dead.clone();
    match s.what {
        "status" | "top" => {
            if s.code != Some(0) {
                fail(format!("{} exited {:?}", s.what, s.code));
            }
            let rows: Vec<(String, String)> = match s.what {
                "status" => status_rows(&s.out).into_iter().map(|(id, role, _)| (id, role)).collect(),
                _ => {
                    let rows = top_rows(&s.out);
                    for row in &rows {
                        if row.len() != 7 {
                            fail(format!("a top row without its seven columns: {row:?}"));
                        }
                    }
                    rows.into_iter().filter(|r| r.len() >= 3).map(|r| (r[0].clone(), r[2].clone())).collect()
                }
            };
            for (id, role) in &rows {
                let id_n = id.parse::<u64>().ok();
                if role == "unreachable" && id_n.is_some_and(|n| alive.contains(&n)) {
                    fail(format!("node {id}, alive throughout, is called unreachable"));
                }
                if role != "unreachable" && id_n.is_some_and(|n| dead.contains(&n)) {
                    fail(format!("node {id}, gone before the run began, is called {role}"));
                }
                if role == "learner" {
                    fail(format!("node {id} is called a learner, not a standby"));
                }
            }
            for id in &alive {
                if !rows.iter().any(|(r, role)| *r == id.to_string() && role != "unreachable") {
                    fail(format!("node {id}, alive throughout, has no row"));
                }
            }
            if let Some(k) = s.in_kill_window() {
                if !rows.iter().any(|(id, role)| *id == k.to_string() && role == "unreachable") {
                    fail(format!("the killed voter {k}, a voter still, is missing or not unreachable"));
                }
                // A node that still names the dead leader says it does not answer.
                if s.what == "status" {
                    let dead_addr = &addr_of[&k];
                    for (id, _, leader) in status_rows(&s.out) {
                        if leader == *dead_addr {
                            fail(format!("node {id} names the dead leader {dead_addr} unmarked"));
                        }
                    }
                }
            }
        }
        "members" => {
            let view = s.out.lines().find(|l| l.starts_with("view ")).unwrap_or("");
            match s.code {
                Some(0) => {
                    // The leader's own view: it answered, so it ran.
                    let by = view.strip_prefix("view     as seen by node ").and_then(|r| r.split(' ').next());
                    let by = by.and_then(|id| id.parse::<u64>().ok());
                    if !view.ends_with("(the leader), now") || by.is_none_or(|id| dead.contains(&id)) {
                        fail(format!("exit 0 without a live leader's view: {view:?}"));
                    }
                    if let Some(k) = s.in_kill_window() {
                        let line = s.out.lines().find(|l| l.starts_with(&format!("voter    {k}@")));
                        match line {
                            None => fail(format!("the killed voter {k} is not listed")),
                            Some(l) if l.contains(" heard ") => {
                                fail(format!("the killed voter is heard: {l}"))
                            }
                            Some(_) => {}
                        }
                    }
                }
                Some(3) if view.contains("may be stale") && view.contains("as seen by node ") => {}
                _ => fail("members: neither the leader's view nor one labelled stale".into()),
            }
        }
        _ => {
            // /metrics of every live node: `alive ID: text` blocks.
            for block in s.out.split("\n=== ").filter(|b| !b.trim().is_empty()) {
                let (head, text) = block.split_once('\n').unwrap_or((block, ""));
                let sample = |name: &str| {
                    text.lines()
                        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse::<f64>().ok())
                };
                for line in text.lines().filter(|l| l.starts_with("ticketing_raft_leader{")) {
                    let id = line.split('"').nth(1).and_then(|id| id.parse::<u64>().ok());
                    if id.is_none_or(|id| !s.after.known.contains(&id)) {
                        fail(format!("{head}: a leader label that is no node's id: {line}"));
                    }
                }
                // 0 on a fresh node that knows no configuration yet.
                if text.contains("ticketing_raft_term ")
                    && !matches!(sample("ticketing_raft_voters"), Some(v) if v == 0.0 || v == 3.0)
                {
                    fail(format!("{head}: ticketing_raft_voters {:?}", sample("ticketing_raft_voters")));
                }
                if let (Some(h), Some(v)) =
                    (sample("ticketing_raft_healthy_voters"), sample("ticketing_raft_voters"))
                {
                    if h > v {
                        fail(format!("{head}: {h} healthy voters of {v}"));
                    }
                }
                if sample("ticketing_handshake_failures_total{reason=\"closed\"}").unwrap_or(0.0) > 0.0 {
                    fail(format!("{head}: a view's connection counted as a failed handshake"));
                }
                if text.contains("role=\"learner\"") {
                    fail(format!("{head}: the role label says learner"));
                }
            }
        }
    }
    problems
}

#[test]
fn views_tell_the_truth_through_a_rolling_restart_and_a_kill_of_the_leader() {
    let dead_ms = DEAD_MS.to_string();
    let mut nodes = Nodes::start_with_metrics(3, 1, &[("TICKETING_AUTOPILOT_DEAD_MS", &dead_ms)]);
    let metrics_port = nodes.metrics_port.unwrap();
    let addrs = nodes.addrs().join(",");
    let truth = Arc::new(Mutex::new(Truth::default()));
    let mut addr_of: BTreeMap<u64, String> = BTreeMap::new();
    {
        let mut t = truth.lock().unwrap();
        for m in &nodes.live {
            t.alive.insert(m.id, m.addr.to_string());
            t.known.insert(m.id);
            addr_of.insert(m.id, m.addr.to_string());
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let log: Arc<Mutex<Vec<Sample>>> = Arc::new(Mutex::new(Vec::new()));
    let cli = |args: &'static [&'static str]| {
        let addrs = addrs.clone();
        move |_: &Truth| run_cli(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>(), &addrs)
    };
    let metrics = move |t: &Truth| {
        let mut out = String::new();
        for (id, addr) in &t.alive {
            let host = addr.rsplit_once(':').unwrap().0;
            if let Some(text) = scrape(format!("{host}:{metrics_port}").parse().unwrap()) {
                out.push_str(&format!("\n=== node {id}\n{text}"));
            }
        }
        (Some(0), out, String::new())
    };
    let pollers: Vec<std::thread::JoinHandle<()>> = vec![
        {
            let (t, s, l, f) = (truth.clone(), stop.clone(), log.clone(), cli(&["status"]));
            std::thread::spawn(move || poller("status", t, s, l, f))
        },
        {
            let (t, s, l, f) =
                (truth.clone(), stop.clone(), log.clone(), cli(&["top", "--once", "--interval", "0.2"]));
            std::thread::spawn(move || poller("top", t, s, l, f))
        },
        {
            let (t, s, l, f) = (truth.clone(), stop.clone(), log.clone(), cli(&["admin", "members"]));
            std::thread::spawn(move || poller("members", t, s, l, f))
        },
        {
            let (t, s, l) = (truth.clone(), stop.clone(), log.clone());
            std::thread::spawn(move || poller("metrics", t, s, l, metrics))
        },
    ];
    let samples_of = |what: &str| log.lock().unwrap().iter().filter(|s| s.what == what).count();
    let some_more = |n: usize| {
        let now: Vec<usize> = ["status", "top", "members", "metrics"].iter().map(|w| samples_of(w)).collect();
        let more = || {
            ["status", "top", "members", "metrics"].iter().zip(&now).all(|(w, n0)| samples_of(w) >= n0 + n)
        };
        assert!(eventually(Duration::from_secs(60), more), "the views stopped sampling");
    };
    some_more(3);

    // (a) A rolling restart of every voter: SIGTERM, a fresh process at its address.
    let voters = nodes.voters().expect("the voters");
    for old in voters {
        let i = nodes.live.iter().position(|m| m.id == old).unwrap();
        truth.lock().unwrap().alive.remove(&old);
        let restart = nodes.restart(i, Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
        let fresh = nodes.live.last().unwrap();
        let mut t = truth.lock().unwrap();
        t.dead.insert(old);
        t.alive.insert(fresh.id, fresh.addr.to_string());
        t.known.insert(fresh.id);
        addr_of.insert(fresh.id, fresh.addr.to_string());
        drop(t);
        eprintln!("restarted {old}: {restart:?}");
        some_more(2);
    }

    // (b) kill -9 of the leader, and a fresh process at its address (as a process
    // manager starts one), until the autopilot has swapped a standby in.
    let l = nodes.wait_leader(Duration::from_secs(20)).expect("a leader");
    let (killed, addr) = (nodes.live[l].id, nodes.live[l].addr);
    truth.lock().unwrap().alive.remove(&killed);
    let mut dead = nodes.live.remove(l);
    dead.process.kill();
    nodes.gone.push(dead);
    {
        let mut t = truth.lock().unwrap();
        t.dead.insert(killed);
        t.killed = Some((killed, Instant::now()));
    }
    let fresh = nodes.fresh(&addr.to_string());
    {
        let mut t = truth.lock().unwrap();
        t.alive.insert(fresh.id, fresh.addr.to_string());
        t.known.insert(fresh.id);
        addr_of.insert(fresh.id, fresh.addr.to_string());
    }
    nodes.live.push(fresh);
    let healed = || nodes.voters().is_some_and(|v| v.len() == 3 && !v.contains(&killed));
    assert!(eventually(Duration::from_secs(60), healed), "no heal: {}", nodes.members());
    some_more(3);
    stop.store(true, Ordering::SeqCst);
    for p in pollers {
        p.join().unwrap();
    }

    let samples = std::mem::take(&mut *log.lock().unwrap());
    let problems: Vec<String> = samples.iter().flat_map(|s| check(s, &addr_of)).collect();
    // The kill was seen: views sampled while the dead voter was a voter still.
    let in_window =
        |what: &str| samples.iter().filter(|s| s.what == what && s.in_kill_window().is_some()).count();
    let leader_saw_two = samples
        .iter()
        .filter(|s| s.what == "metrics" && s.in_kill_window().is_some())
        .any(|s| s.out.split("\n=== ").any(|b| b.lines().any(|l| l == "ticketing_raft_healthy_voters 2")));
    let mut took: Vec<u128> =
        samples.iter().filter(|s| s.what == "status").map(|s| (s.ended - s.began).as_millis()).collect();
    took.sort_unstable();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    eprintln!(
        "{} samples ({} status, {} top, {} members, {} metrics); in the kill window: {} status, {} top, {} members; \
         status took ms: min {} p50 {} p90 {} max {}; load average {}",
        samples.len(),
        samples_of_in(&samples, "status"),
        samples_of_in(&samples, "top"),
        samples_of_in(&samples, "members"),
        samples_of_in(&samples, "metrics"),
        in_window("status"),
        in_window("top"),
        in_window("members"),
        took.first().unwrap_or(&0),
        took.get(took.len() / 2).unwrap_or(&0),
        took.get(took.len() * 9 / 10).unwrap_or(&0),
        took.last().unwrap_or(&0),
        load.trim()
    );
    assert!(problems.is_empty(), "{} problems:\n{}", problems.len(), problems.join("\n\n"));
    assert!(in_window("status") > 0 && in_window("top") > 0, "no view ran while the dead voter was one");
    assert!(leader_saw_two, "no scrape of the new leader counted 2 healthy voters while one was dead");
}

fn samples_of_in(samples: &[Sample], what: &str) -> usize {
    samples.iter().filter(|s| s.what == what).count()
}
