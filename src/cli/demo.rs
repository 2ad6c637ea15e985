//! `ticketing demo`: an in-process standalone server, a dozen client threads
//! contending for three keys through the client library, a live timeline and a
//! summary. Needs no configuration and ends by itself in about ten seconds.

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
/// Lease of every demo lock (far above the hold time: no lease ever runs out).
const DEMO_LEASE: Duration = Duration::from_secs(10);
/// Longest queueing of one acquire.
const DEMO_WAIT_MAX: Duration = Duration::from_secs(3);
/// A holder keeps the key between these many milliseconds.
const DEMO_HOLD_MS: (u64, u64) = (60, 250);

struct KeyLog {
    /// Tokens in grant order.
    tokens: Vec<u64>,
    /// Who released last, and when they announced it.
    last_release: Option<(usize, Instant)>,
}

#[derive(Default)]
struct Summary {
    grants: usize,
    handoffs: usize,
    busy_or_timeout: usize,
    errors: usize,
    longest_wait: (Duration, usize, String),
}

struct Demo {
    start: Instant,
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
    let about = "Starts an in-process standalone server on 127.0.0.1 (random port, random \
                 token), runs 12 client threads contending for seat:1..3 through the \
                 client library, prints a timeline of waits, grants, hand-offs and \
                 releases, then a summary. Takes about 10 s; needs no configuration.";
    let matches = match opts.parse(args) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("ticketing demo: {e}");
            return EXIT_USAGE;
        }
    };
    if matches.opt_present("help") {
        print!("{}", opts.usage(&format!("Usage: ticketing demo\n\n{about}")));
        return EXIT_OK;
    }
    if let Some(extra) = matches.free.first() {
        eprintln!("ticketing demo: unexpected argument {extra:?}");
        return EXIT_USAGE;
    }
    let token = crate::proto::handshake::fresh_nonce().to_vec();
    let listen: SocketAddr = "127.0.0.1:0".parse().expect("a literal address");
    let server = match Server::start(Config::standalone(listen, token.clone())) {
        Ok(server) => server,
        Err(e) => {
            eprintln!("ticketing demo: cannot start the in-process server: {e}");
            return EXIT_UNKNOWN;
        }
    };
    let addr = server.local_addr().to_string();
    let demo = Arc::new(Demo {
        start: Instant::now(),
        keys: Mutex::new(HashMap::new()),
        summary: Mutex::new(Summary::default()),
    });
    demo.say(format_args!(
        "standalone server on {addr}; {DEMO_WORKERS} workers contend for seat:1..{DEMO_KEYS} for {} s",
        DEMO_RUN.as_secs()
    ));
    let workers: Vec<_> = (1..=DEMO_WORKERS)
        .map(|n| {
            let client = Client::builder()
                .addrs([addr.clone()])
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
    let status =
        Client::builder().addrs([addr.clone()]).auth_token(&token).build().ok().and_then(|c| c.status().ok());
    server.shutdown();

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
    let (wait, who, key) = &summary.longest_wait;
    println!("  longest wait:               {} ms (worker-{who:02} for {key})", wait.as_millis());
    if let Some(last) = status
        .as_deref()
        .and_then(|s| super::commands::parse_status(s).into_iter().find(|(n, _)| n == "last_token"))
    {
        println!("  server's last token:        {}", last.1);
    }
    let ok = increasing && unique && summary.errors == 0 && summary.grants > 0;
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

fn worker(demo: &Demo, n: usize, client: &Client) {
    let mut rng = Rng::new();
    let end = demo.start + DEMO_RUN;
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
                    let mut summary = lock(&demo.summary);
                    summary.grants += 1;
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
                    lock(&demo.summary).errors += 1;
                }
            }
            Err(e) if e.is_contended() => {
                demo.say(format_args!("worker-{n:02} gave up on {key}: {e}"));
                lock(&demo.summary).busy_or_timeout += 1;
            }
            Err(e) => {
                demo.say(format_args!("worker-{n:02} error on {key}: {e}"));
                lock(&demo.summary).errors += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(rng.below(150)));
    }
}
