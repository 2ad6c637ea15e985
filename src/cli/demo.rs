//! `ticketing demo`: an in-process standalone server (or, with `--cluster`, three
//! in-process cluster nodes whose leader is stopped mid-run), a dozen client threads
//! contending for three keys through the client library, a live timeline and a
//! summary. Needs no configuration and ends by itself: about 7 s, 13 s with `--cluster`
//! ([`seconds`]; measured figures in docs/cli.md).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::*;
use crate::server::{Config, Server};

/// Client threads contending.
const DEMO_WORKERS: usize = 12;
/// Keys they contend for: `seat:1` ..= `seat:N`.
const DEMO_KEYS: usize = 3;
/// How long new requests are made.
const DEMO_RUN: Duration = Duration::from_secs(6);
/// With `--cluster`: how long new requests are made, and when the leader is stopped.
const CLUSTER_RUN: Duration = Duration::from_secs(10);
const CLUSTER_KILL_AT: Duration = Duration::from_secs(3);
/// Lease of every demo lock (far above the hold time: no lease ever runs out).
const DEMO_LEASE: Duration = Duration::from_secs(10);
/// Longest queueing of one acquire.
const DEMO_WAIT_MAX: Duration = Duration::from_secs(3);
/// A holder keeps the key between these many milliseconds.
const DEMO_HOLD_MS: (u64, u64) = (60, 250);

/// The demo reads no configuration: it makes its own servers and secret.
const DEMO_ENV: &str = "\
Environment:
  RUST_LOG  log filter (default warn); nothing else: the demo makes its own servers and secret";

const DEMO_EXIT_CODES: &str = "\
Exit status:
  0  the checks passed: tokens strictly increasing, no errors (--cluster: a new leader served)
  2  usage error
  3  a check failed, or the in-process servers could not start";

/// How long the demo takes, in whole seconds, as its help and the top-level help say:
/// the run, plus up to a second for the last requests (a wait cut to what is left of the
/// run plus 1 s, then a hold); with `--cluster`, plus the first election (an election
/// timeout) before the run starts.
pub(super) fn seconds(cluster: bool) -> u64 {
    if cluster {
        crate::raft::ELECTION_MS_DEFAULT / 1000 + CLUSTER_RUN.as_secs() + 1
    } else {
        DEMO_RUN.as_secs() + 1
    }
}

struct KeyLog {
    /// Tokens in grant order.
    tokens: Vec<u64>,
    /// Who released last, and when they announced it.
    last_release: Option<(usize, Instant)>,
}

#[derive(Default)]
struct Summary {
    grants: usize,
    /// Requests cut off by the leader's death (indeterminate or not executed): the
    /// caller did not enter the critical section.
    interrupted: usize,
    /// (highest token granted before the leader was stopped, lowest after), cluster only.
    tokens_around_failover: (u64, u64),
    handoffs: usize,
    busy_or_timeout: usize,
    errors: usize,
    longest_wait: (Duration, usize, String),
}

struct Demo {
    start: Instant,
    run: Duration,
    /// Set when the leader was stopped (cluster mode).
    failed_over_at: Mutex<Option<Instant>>,
    keys: Mutex<HashMap<String, KeyLog>>,
    summary: Mutex<Summary>,
}

impl Demo {
    fn say(&self, line: std::fmt::Arguments<'_>) {
        let t = self.start.elapsed();
        println!("[{:>3}.{:03}s] {line}", t.as_secs(), t.subsec_millis());
    }
}

/// A tiny xorshift generator: the demo only needs varied pauses, not good randomness.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        let seed = crate::proto::handshake::fresh_nonce();
        Rng(u64::from_le_bytes(seed[..8].try_into().expect("8 bytes")) | 1)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
    fn between(&mut self, (lo, hi): (u64, u64)) -> u64 {
        lo + self.below(hi - lo + 1)
    }
}

pub(super) fn demo(args: &[String]) -> i32 {
    let mut opts = Options::new();
    opts.optflag("h", "help", "print this help");
    let cluster_help = format!(
        "three in-process cluster nodes on 127.0.0.1-3; the leader is stopped after {} s; takes about {} s",
        CLUSTER_KILL_AT.as_secs(),
        seconds(true)
    );
    opts.optflag("", "cluster", &cluster_help);
    let about = format!(
        "Starts an in-process standalone server on 127.0.0.1 (random port, random token), runs \
         {DEMO_WORKERS} client threads contending for seat:1..{DEMO_KEYS} through the client library for \
         {} s, prints a timeline of waits, grants, hand-offs and releases, then a summary. Takes about \
         {} s; needs no configuration.",
        DEMO_RUN.as_secs(),
        seconds(false)
    );
    let matches = match opts.parse(args) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("ticketing demo: {e}");
            return EXIT_USAGE;
        }
    };
    if matches.opt_present("help") {
        print!("{}", help_text(&opts, "ticketing demo [--cluster]", &about, DEMO_ENV, DEMO_EXIT_CODES));
        return EXIT_OK;
    }
    if let Some(extra) = matches.free.first() {
        eprintln!("ticketing demo: unexpected argument {extra:?}");
        return EXIT_USAGE;
    }
    let token = crate::proto::handshake::fresh_nonce().to_vec();
    let cluster = matches.opt_present("cluster");
    let (servers, addrs) = match if cluster { start_cluster(&token) } else { start_standalone(&token) } {
        Ok(started) => started,
        Err(e) => {
            eprintln!("ticketing demo: cannot start the in-process server: {e}");
            return EXIT_UNKNOWN;
        }
    };
    let addr = addrs[0].clone();
    if cluster {
        let since = Instant::now();
        while find_leader(&addrs, &token, None).is_none() {
            if since.elapsed() > Duration::from_secs(15) {
                eprintln!("ticketing demo: no leader was elected");
                return EXIT_UNKNOWN;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        println!(
            "[  0.000s] 3 nodes started; a leader was elected after {:.2} s",
            since.elapsed().as_secs_f64()
        );
    }
    let run = if cluster { CLUSTER_RUN } else { DEMO_RUN };
    let demo = Arc::new(Demo {
        start: Instant::now(),
        run,
        failed_over_at: Mutex::new(None),
        keys: Mutex::new(HashMap::new()),
        summary: Mutex::new(Summary::default()),
    });
    if cluster {
        demo.say(format_args!(
            "3-node cluster on {}; {DEMO_WORKERS} workers contend for seat:1..{DEMO_KEYS} for {} s; \
             the leader will be stopped after {} s",
            addrs.join(", "),
            run.as_secs(),
            CLUSTER_KILL_AT.as_secs()
        ));
    } else {
        demo.say(format_args!(
            "standalone server on {addr}; {DEMO_WORKERS} workers contend for seat:1..{DEMO_KEYS} for {} s",
            run.as_secs()
        ));
    }
    let servers = Arc::new(Mutex::new(servers));
    let failover = cluster.then(|| {
        let (demo, servers, addrs, token) = (demo.clone(), servers.clone(), addrs.clone(), token.clone());
        std::thread::spawn(move || stop_leader(&demo, &servers, &addrs, &token))
    });
    let workers: Vec<_> = (1..=DEMO_WORKERS)
        .map(|n| {
            let client = Client::builder()
                .addrs(addrs.clone())
                .auth_token(&token)
                .owner(format!("worker-{n:02}"))
                .build();
            let demo = Arc::clone(&demo);
            std::thread::spawn(move || match client {
                Ok(client) => worker(&demo, n, &client),
                Err(e) => {
                    eprintln!("ticketing demo: {e}");
                    lock(&demo.summary).errors += 1;
                }
            })
        })
        .collect();
    for worker in workers {
        let _ = worker.join();
    }
    let failover_time = failover.and_then(|t| t.join().ok()).flatten();
    let status =
        Client::builder().addrs(addrs.clone()).auth_token(&token).build().ok().and_then(|c| c.status().ok());
    for server in lock(&servers).drain(..).flatten() {
        server.shutdown();
    }

    let summary = lock(&demo.summary);
    let keys = lock(&demo.keys);
    let increasing = keys.values().all(|k| k.tokens.windows(2).all(|w| w[0] < w[1]));
    let mut all: Vec<u64> = keys.values().flat_map(|k| k.tokens.clone()).collect();
    let total = all.len();
    all.sort_unstable();
    all.dedup();
    let unique = all.len() == total;
    println!();
    println!("Summary");
    println!("  grants:                     {}", summary.grants);
    println!("  hand-offs (direct):         {}", summary.handoffs);
    println!("  busy or timed out:          {}", summary.busy_or_timeout);
    println!("  errors:                     {}", summary.errors);
    if cluster {
        println!("  cut off by the failover:    {} (indeterminate or not executed)", summary.interrupted);
        match failover_time {
            Some(t) => println!(
                "  failover:                   new leader serving {:.2} s after the stop",
                t.as_secs_f64()
            ),
            None => println!("  failover:                   no new leader seen"),
        }
        let (before, after) = summary.tokens_around_failover;
        if after != 0 {
            println!("  tokens across the failover: last before {before}, first after {after}");
        }
    }
    let (wait, who, key) = &summary.longest_wait;
    println!("  longest wait:               {} ms (worker-{who:02} for {key})", wait.as_millis());
    if let Some(last) = status
        .as_deref()
        .and_then(|s| super::commands::parse_status(s).into_iter().find(|(n, _)| n == "last_token"))
    {
        println!("  server's last token:        {}", last.1);
    }
    let across = summary.tokens_around_failover;
    let failover_ok = !cluster || (failover_time.is_some() && across.0 < across.1);
    let ok = increasing && unique && summary.errors == 0 && summary.grants > 0 && failover_ok;
    println!("  tokens strictly increasing: {}", if increasing && unique { "yes" } else { "no" });
    println!("  took:                       {:.1} s", demo.start.elapsed().as_secs_f64());
    if ok {
        EXIT_OK
    } else {
        EXIT_UNKNOWN
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A standalone node on 127.0.0.1 with a random port.
fn start_standalone(token: &[u8]) -> std::io::Result<(Vec<Option<Server>>, Vec<String>)> {
    let listen: SocketAddr = "127.0.0.1:0".parse().expect("a literal address");
    let server = Server::start(Config::standalone(listen, token.to_vec()))?;
    let addr = server.local_addr().to_string();
    Ok((vec![Some(server)], vec![addr]))
}

/// Three cluster nodes on 127.0.0.1-3 sharing one free port (peer port = port + 1000).
fn start_cluster(token: &[u8]) -> std::io::Result<(Vec<Option<Server>>, Vec<String>)> {
    use crate::config::{ClusterConfig, ClusterState, Peer};
    let port = free_port_pair()?;
    let addrs: Vec<String> = (1..=3).map(|i| format!("127.0.0.{i}:{port}")).collect();
    let peers: Vec<Peer> =
        addrs.iter().enumerate().map(|(i, a)| Peer { id: i as u64 + 1, addr: a.clone() }).collect();
    // The peer secret must differ from the client secret; the demo's nodes share one.
    let mut peer_token = token.to_vec();
    peer_token.extend_from_slice(b"-peers");
    let mut servers = Vec::new();
    for (i, addr) in addrs.iter().enumerate() {
        let mut config = Config::standalone(addr.parse().expect("a literal address"), token.to_vec());
        config.node_id = i as u64 + 1;
        config.peer_auth_token = Some(peer_token.clone());
        config.cluster = Some(ClusterConfig {
            self_addr: addr.clone(),
            peers: peers.clone(),
            state: ClusterState::New,
            seeds: Vec::new(),
            auto_join: false,
            autopilot_dead_ms: Some(crate::config::AUTOPILOT_DEAD_MS_DEFAULT),
            standbys_max: crate::config::STANDBYS_MAX_DEFAULT as usize,
            leave_on_terminate: true,
        });
        servers.push(Some(Server::start(config)?));
    }
    Ok((servers, addrs))
}

/// A port free on 127.0.0.1 together with the peer port 1000 above it.
fn free_port_pair() -> std::io::Result<u16> {
    for _ in 0..100 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        if port < 64_000 && std::net::TcpListener::bind(("127.0.0.1", port + 1000)).is_ok() {
            return Ok(port);
        }
    }
    Err(std::io::Error::other("no free port pair on 127.0.0.1"))
}

/// The index of the node that reports itself leader, if any.
fn find_leader(addrs: &[String], token: &[u8], skip: Option<usize>) -> Option<usize> {
    (0..addrs.len()).filter(|i| Some(*i) != skip).find(|&i| {
        let client = Client::builder().addrs([addrs[i].clone()]).auth_token(token).build().ok();
        client.and_then(|c| c.status_of(&addrs[i]).ok()).is_some_and(|s| s.contains("\nrole=leader\n"))
    })
}

/// Waits until the demo's kill time, stops the leader, and returns how long it took
/// until another node led and served a QUERY.
fn stop_leader(
    demo: &Demo,
    servers: &Mutex<Vec<Option<Server>>>,
    addrs: &[String],
    token: &[u8],
) -> Option<Duration> {
    std::thread::sleep(CLUSTER_KILL_AT.saturating_sub(demo.start.elapsed()));
    let leader = find_leader(addrs, token, None)?;
    let server = lock(servers)[leader].take()?;
    demo.say(format_args!("*** stopping the leader, node {} ({}) ***", leader + 1, addrs[leader]));
    let stopped = Instant::now();
    *lock(&demo.failed_over_at) = Some(stopped);
    server.shutdown();
    let others: Vec<String> =
        addrs.iter().enumerate().filter(|(i, _)| *i != leader).map(|(_, a)| a.clone()).collect();
    let client = Client::builder().addrs(others).auth_token(token).build().ok()?;
    while stopped.elapsed() < Duration::from_secs(10) {
        if let Some(next) = find_leader(addrs, token, Some(leader)) {
            if client.query("seat:1").is_ok() {
                let took = stopped.elapsed();
                demo.say(format_args!(
                    "*** node {} ({}) leads and serves, {:.2} s after the stop ***",
                    next + 1,
                    addrs[next],
                    took.as_secs_f64()
                ));
                return Some(took);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn worker(demo: &Demo, n: usize, client: &Client) {
    let mut rng = Rng::new();
    let end = demo.start + demo.run;
    // Stagger the start a little so the timeline is readable.
    std::thread::sleep(Duration::from_millis(rng.below(300)));
    while Instant::now() < end {
        let key = format!("seat:{}", 1 + rng.below(DEMO_KEYS as u64));
        let wait = DEMO_WAIT_MAX.min(end.saturating_duration_since(Instant::now()) + Duration::from_secs(1));
        demo.say(format_args!("worker-{n:02} waits for {key}"));
        let asked = Instant::now();
        match client.acquire(&key, DEMO_LEASE, wait) {
            Ok(held) => {
                let waited = asked.elapsed();
                let handoff = {
                    let mut keys = lock(&demo.keys);
                    let log =
                        keys.entry(key.clone()).or_insert(KeyLog { tokens: Vec::new(), last_release: None });
                    log.tokens.push(held.token());
                    // A hand-off: the previous holder released while we were queued.
                    match log.last_release.take() {
                        Some((from, at)) if from != n && at >= asked => Some(from),
                        _ => None,
                    }
                };
                {
                    let failed_over_at = *lock(&demo.failed_over_at);
                    let mut summary = lock(&demo.summary);
                    summary.grants += 1;
                    // Which side of the failover this grant was asked on.
                    match failed_over_at {
                        Some(at) if asked > at => {
                            let first = &mut summary.tokens_around_failover.1;
                            if *first == 0 || held.token() < *first {
                                *first = held.token();
                            }
                        }
                        Some(_) => {}
                        None => {
                            let last = &mut summary.tokens_around_failover.0;
                            *last = (*last).max(held.token());
                        }
                    }
                    if handoff.is_some() {
                        summary.handoffs += 1;
                    }
                    if waited > summary.longest_wait.0 {
                        summary.longest_wait = (waited, n, key.clone());
                    }
                }
                match handoff {
                    Some(from) => demo.say(format_args!(
                        "worker-{n:02} holds {key}  token {}  (handed off from worker-{from:02} after {} ms in the queue)",
                        held.token(),
                        waited.as_millis()
                    )),
                    None => demo.say(format_args!(
                        "worker-{n:02} holds {key}  token {}  (waited {} ms)",
                        held.token(),
                        waited.as_millis()
                    )),
                }
                std::thread::sleep(Duration::from_millis(rng.between(DEMO_HOLD_MS)));
                demo.say(format_args!("worker-{n:02} releases {key}"));
                if let Some(log) = lock(&demo.keys).get_mut(&key) {
                    log.last_release = Some((n, Instant::now()));
                }
                if let Err(e) = held.release() {
                    demo.say(format_args!("worker-{n:02} release of {key} failed: {e}"));
                    // Across a failover a release may go unconfirmed; the lease ends it.
                    if lock(&demo.failed_over_at).is_some() {
                        lock(&demo.summary).interrupted += 1;
                    } else {
                        lock(&demo.summary).errors += 1;
                    }
                }
            }
            Err(e) if e.is_contended() => {
                demo.say(format_args!("worker-{n:02} gave up on {key}: {e}"));
                lock(&demo.summary).busy_or_timeout += 1;
            }
            Err(AcquireError::NotLeader { .. }) if lock(&demo.failed_over_at).is_none() => {
                // Sent to a follower: not executed; the client now knows the leader.
                continue;
            }
            Err(e) if lock(&demo.failed_over_at).is_some() => {
                // The leader died under this request: not entered, tried again later.
                demo.say(format_args!("worker-{n:02} cut off on {key} by the failover: {e}"));
                lock(&demo.summary).interrupted += 1;
                std::thread::sleep(Duration::from_millis(250));
            }
            Err(e) => {
                demo.say(format_args!("worker-{n:02} error on {key}: {e}"));
                lock(&demo.summary).errors += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(rng.below(150)));
    }
}
