//! `ticketing bench`: a load generator on the official client.
//!
//! Workers are threads; each does acquire → (hold) → release in a loop on one of
//! `--connections` [`Client`] objects and records the time of the whole pair. The
//! official client is blocking (one outstanding request per calling thread) and
//! pipelines the requests of all threads that share it, so the pipeline depth on a
//! connection is the number of workers sharing its client: `--pipeline D` means
//! `--threads = connections × D`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::histogram::Histogram;
use super::zipf::Zipf;
use super::*;
use crate::client::{AcquireError, Client, ClientBuilder, ReleaseError, ReleaseOutcome};

/// What the workers do.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Scenario {
    /// Each worker its own keys: the pure cost of a pair.
    Uncontended,
    /// Every worker queues on one key: hand-offs per second.
    Hot,
    /// Zipf-distributed keys over `--keys`; with a short wait some time out.
    Mixed,
    /// Acquires `--keys` distinct keys and keeps them (no release): for memory figures.
    Hold,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::Uncontended => "uncontended",
            Scenario::Hot => "hot",
            Scenario::Mixed => "mixed",
            Scenario::Hold => "hold",
        }
    }
    fn parse(text: &str) -> Option<Scenario> {
        match text {
            "uncontended" => Some(Scenario::Uncontended),
            "hot" => Some(Scenario::Hot),
            "mixed" => Some(Scenario::Mixed),
            "hold" => Some(Scenario::Hold),
            _ => None,
        }
    }
}

/// Error kinds, counted separately.
const KINDS: [&str; 11] = [
    "busy",
    "timeout",
    "not_leader",
    "invalid",
    "overloaded",
    "unavailable",
    "indeterminate",
    "not_holder",
    "release_unconfirmed",
    "release_queue_full",
    "release_invalid",
];

fn acquire_kind(e: &AcquireError) -> usize {
    match e {
        AcquireError::Busy => 0,
        AcquireError::Timeout => 1,
        AcquireError::NotLeader { .. } => 2,
        AcquireError::Invalid(_) => 3,
        AcquireError::Overloaded => 4,
        AcquireError::Unavailable { .. } => 5,
        // The bench never cancels.
        AcquireError::Indeterminate(_) | AcquireError::Cancelled | AcquireError::Forked(_) => 6,
    }
}

fn release_kind(e: &ReleaseError) -> usize {
    match e {
        // The bench never cancels.
        ReleaseError::Unconfirmed
        | ReleaseError::Unavailable { .. }
        | ReleaseError::Cancelled
        | ReleaseError::Forked(_) => 8,
        ReleaseError::QueueFull => 9,
        ReleaseError::Invalid(_) => 10,
    }
}

/// Everything one run needs.
#[derive(Clone, Debug)]
pub struct Settings {
    pub scenario: Scenario,
    pub connections: usize,
    pub threads: usize,
    pub duration: Duration,
    pub warmup: Duration,
    pub lease: Duration,
    pub wait: Duration,
    pub hold: Duration,
    pub keys: usize,
    pub zipf: f64,
    pub rate: f64,
}

/// One worker's figures.
struct Tally {
    latency: Histogram,
    grants: u64,
    pairs: u64,
    errors: [u64; KINDS.len()],
}

/// Figures shared with the progress printer.
#[derive(Default)]
struct Live {
    pairs: AtomicU64,
    grants: AtomicU64,
    errors: AtomicU64,
    finished: AtomicU64,
    /// The first message of each error kind: the report names the causes.
    causes: [OnceLock<String>; KINDS.len()],
    /// A mistake that trying again cannot fix (the secret, TLS, a certificate): every
    /// worker stops, and so does the run.
    fatal: OnceLock<String>,
}

impl Live {
    /// Counts an error of `kind` (in the report's figures when `record`).
    fn error(&self, tally: &mut Tally, kind: usize, record: bool, message: impl FnOnce() -> String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        if record {
            tally.errors[kind] += 1;
        }
        if self.causes[kind].get().is_none() {
            let _ = self.causes[kind].set(message());
        }
    }

    /// An acquire's error: counted; a lasting one stops the run. True when it did.
    fn acquire_failed(&self, tally: &mut Tally, e: &AcquireError, record: bool) -> bool {
        self.error(tally, acquire_kind(e), record, || e.to_string());
        let lasting = matches!(e, AcquireError::Unavailable { lasting: true, .. });
        if lasting {
            let _ = self.fatal.set(e.to_string());
        }
        lasting
    }
}

const ABOUT: &str = "\
Drives a node or cluster with acquire+release pairs through the official client and
reports pairs/s, grants/s, latency percentiles per pair and errors by kind.

Scenarios (default uncontended):
  uncontended  every worker its own keys (--keys per worker, default 1)
  hot          every worker queues on one key; grants/s = hand-offs per second
  mixed        keys drawn from a Zipf distribution (--zipf, default 1.0) over --keys
               (default 1000); held --hold ms (default 1); waits of --wait ms
               (default 5), so some time out
  hold         acquires --keys distinct keys once and keeps them (lease --lease;
               no release): ends when all are held, whatever --duration says.
               For memory figures: `ticketing bench hold --keys 1000000 --lease 250`

--rate R paces the workers to R pairs per second in total (a soak at a steady rate).
The client is blocking: each worker has one request outstanding, and the workers
that share a client (connection) are pipelined on it, so the pipeline depth per
connection is threads / connections. --pipeline D sets threads = connections x D.
With a single address each client keeps two sockets to it (docs/client.md).";

/// The environment bench reads: the client's, without TICKETING_OWNER (each worker
/// is its own owner, `bench-PID-N`).
const BENCH_ENV: &str = "\
Environment:
  TICKETING_ADDRS             comma-separated server addresses (default 127.0.0.1:5225)
  TICKETING_AUTH_TOKEN        shared secret, >= 16 bytes (or TICKETING_AUTH_TOKEN_FILE)
  TICKETING_AUTH_TOKEN_FILE   file holding the secret
  TICKETING_TLS_CA            PEM CA bundle; turns TLS on
  RUST_LOG                    log filter (default warn)";

/// Errors are figures of the report here, not the command's outcome.
const BENCH_EXIT_CODES: &str = "\
Exit status:
  0  pairs or grants were made (errors are counted in the report)
  2  usage or configuration error
  3  nothing was done: no pair and no grant (a line says why); or, at once, a
     mistake retrying cannot fix: the secret, the certificate, TLS or plain";

pub(super) fn bench(args: &[String]) -> i32 {
    let mut opts = Options::new();
    opts.optmulti(
        "",
        "addr",
        "server address host:port (repeatable or comma-separated; default $TICKETING_ADDRS or 127.0.0.1:5225)",
        "ADDR",
    );
    opts.optopt("", "connections", "client objects, each with its own connection(s) (default 1)", "N");
    opts.optopt("", "threads", "worker threads over all connections (default: connections)", "N");
    opts.optopt("", "pipeline", "outstanding requests per connection; sets threads = connections x D", "D");
    opts.optopt("", "duration", "measured seconds (default 10)", "S");
    opts.optopt("", "warmup", "seconds run before measuring (default 1)", "S");
    opts.optopt("", "lease", "lease in whole seconds (default 10)", "S");
    opts.optopt("", "wait", "wait in ms (default: uncontended 1000, hot 10000, mixed 5)", "MS");
    opts.optopt("", "hold", "ms to hold each lock before releasing (default: 0, mixed 1)", "MS");
    opts.optopt("", "keys", "key space (uncontended: per worker, default 1; mixed: default 1000)", "N");
    opts.optopt("", "zipf", "Zipf exponent of the mixed scenario (default 1.0)", "S");
    opts.optopt("", "rate", "pairs per second over all workers (default 0: as fast as possible)", "R");
    opts.optflag("", "json", "print the result as one JSON object on stdout");
    opts.optflag("q", "quiet", "no progress lines");
    opts.optflag("h", "help", "print this help");
    let usage = "ticketing bench [uncontended|hot|mixed|hold] [options]";
    let matches = match parse_with_help(&opts, args, usage, ABOUT, BENCH_ENV, BENCH_EXIT_CODES) {
        Ok(m) => m,
        Err(code) => return code,
    };
    let settings = match settings(&matches) {
        Ok(s) => s,
        Err(message) => {
            eprintln!("ticketing bench: {message}");
            return EXIT_USAGE;
        }
    };
    let addrs = addrs_of(&matches);
    let mut clients = Vec::with_capacity(settings.connections);
    for c in 0..settings.connections {
        let built = ClientBuilder::from_env()
            .replace_addrs(addrs.clone())
            .owner(format!("bench-{}-{c}", std::process::id()))
            .build();
        match built {
            Ok(client) => clients.push(client),
            Err(e) => {
                eprintln!("ticketing bench: {}", build_error(&e, addrs_source(&matches)));
                return EXIT_USAGE;
            }
        }
    }
    let quiet = matches.opt_present("quiet");
    let result = run(&settings, &clients, quiet);
    if matches.opt_present("json") {
        println!("{}", result.json(&settings, &addrs));
    } else {
        print!("{}", result.text(&settings, &addrs));
    }
    if let Some(why) = &result.stopped {
        eprintln!("ticketing bench: stopped at once: {why}");
        return EXIT_UNKNOWN;
    }
    if result.pairs == 0 && result.grants == 0 {
        // Say why nothing was done: each address the clients could not use, and why.
        eprintln!("ticketing bench: nothing was done");
        let mut lines: Vec<String> =
            clients.iter().flat_map(|c| c.connection_errors()).map(|(_, why)| why).collect();
        if lines.is_empty() {
            lines.extend(result.causes.iter().map(|(kind, why)| format!("{kind}: {why}")));
        }
        lines.dedup();
        for line in lines {
            eprintln!("  {line}");
        }
        return EXIT_UNKNOWN;
    }
    EXIT_OK
}

fn number<T: std::str::FromStr>(matches: &Matches, name: &str) -> Result<Option<T>, String> {
    match matches.opt_str(name) {
        None => Ok(None),
        Some(text) => {
            text.parse::<T>().map(Some).map_err(|_| format!("--{name} {text:?} is not a valid number"))
        }
    }
}

fn settings(matches: &Matches) -> Result<Settings, String> {
    let scenario = match matches.free.as_slice() {
        [] => Scenario::Uncontended,
        [one] => Scenario::parse(one).ok_or_else(|| format!("unknown scenario {one:?}"))?,
        _ => return Err("at most one scenario".into()),
    };
    let connections: usize = number(matches, "connections")?.unwrap_or(1);
    if connections == 0 || connections > 10_000 {
        return Err("--connections must be 1..=10000".into());
    }
    let threads: usize = match (number::<usize>(matches, "threads")?, number::<usize>(matches, "pipeline")?) {
        (Some(_), Some(_)) => return Err("give --threads or --pipeline, not both".into()),
        (Some(t), None) => t,
        (None, Some(d)) => connections * d,
        (None, None) => connections,
    };
    if threads == 0 || threads > 10_000 {
        return Err("--threads must be 1..=10000".into());
    }
    let seconds = |name: &str, default: f64| -> Result<Duration, String> {
        let s: f64 = number(matches, name)?.unwrap_or(default);
        if !(0.0..=86_400.0).contains(&s) {
            return Err(format!("--{name} must be 0..=86400 seconds"));
        }
        Ok(Duration::from_secs_f64(s))
    };
    let duration = seconds("duration", 10.0)?;
    if duration.is_zero() {
        return Err("--duration must be > 0".into());
    }
    let warmup = seconds("warmup", 1.0)?;
    let lease_s: u64 = number(matches, "lease")?.unwrap_or(10);
    if !(1..=250).contains(&lease_s) {
        return Err("--lease must be 1..=250 seconds".into());
    }
    let default_wait = match scenario {
        Scenario::Uncontended | Scenario::Hold => 1000,
        Scenario::Hot => 10_000,
        Scenario::Mixed => 5,
    };
    let wait_ms: u64 = number(matches, "wait")?.unwrap_or(default_wait);
    if wait_ms > 300_000 {
        return Err("--wait must be 0..=300000 ms".into());
    }
    let hold_ms: u64 = number(matches, "hold")?.unwrap_or(if scenario == Scenario::Mixed { 1 } else { 0 });
    let keys: usize = number(matches, "keys")?.unwrap_or(if scenario == Scenario::Mixed { 1000 } else { 1 });
    if keys == 0 || keys > 10_000_000 {
        return Err("--keys must be 1..=10000000".into());
    }
    let zipf: f64 = number(matches, "zipf")?.unwrap_or(1.0);
    if !(0.0..=10.0).contains(&zipf) {
        return Err("--zipf must be 0..=10".into());
    }
    let rate: f64 = number(matches, "rate")?.unwrap_or(0.0);
    if !(0.0..=10_000_000.0).contains(&rate) {
        return Err("--rate must be 0..=10000000".into());
    }
    Ok(Settings {
        rate,
        scenario,
        connections,
        threads,
        duration,
        warmup,
        lease: Duration::from_secs(lease_s),
        wait: Duration::from_millis(wait_ms),
        hold: Duration::from_millis(hold_ms),
        keys,
        zipf,
    })
}

/// The merged figures of a run.
pub struct BenchResult {
    pub elapsed: Duration,
    pub pairs: u64,
    pub grants: u64,
    pub latency: Histogram,
    pub errors: [u64; KINDS.len()],
    /// The first message of each error kind seen (its name, the message).
    pub causes: Vec<(&'static str, String)>,
    /// Why the run stopped before its end: a mistake retrying cannot fix.
    pub stopped: Option<String>,
    /// Errors outside the measured time (the warm-up, or an attempt begun in it).
    pub unmeasured: u64,
}

/// A small fast generator (xorshift64*), one per worker.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Runs the workers for warm-up + duration and merges their figures.
pub fn run(settings: &Settings, clients: &[Client], quiet: bool) -> BenchResult {
    let stop = Arc::new(AtomicBool::new(false));
    let recording = Arc::new(AtomicBool::new(settings.warmup.is_zero()));
    let live = Arc::new(Live::default());
    let prefix = format!(
        "bench-{:x}",
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64) & 0xff_ffff_ffff
    );
    let zipf = Zipf::new(settings.keys, settings.zipf);
    let workers: Vec<_> = (0..settings.threads)
        .map(|w| {
            let client = clients[w % clients.len()].clone();
            let settings = settings.clone();
            let (stop, recording, live) = (stop.clone(), recording.clone(), live.clone());
            let (prefix, zipf) = (prefix.clone(), zipf.clone());
            std::thread::Builder::new()
                .name(format!("bench-{w}"))
                .spawn(move || worker(w, &client, &settings, &prefix, &zipf, &stop, &recording, &live))
                .expect("spawn a bench worker")
        })
        .collect();

    let start = Instant::now();
    let measure_start = start + settings.warmup;
    // hold ends when every key is held, not after --duration.
    let end = if settings.scenario == Scenario::Hold {
        measure_start + Duration::from_secs(86_400 * 365)
    } else {
        measure_start + settings.duration
    };
    let mut measured_from = if settings.warmup.is_zero() { Some(start) } else { None };
    let mut last = (Instant::now(), 0u64, 0u64);
    let mut tick = start;
    loop {
        let now = Instant::now();
        if measured_from.is_none() && now >= measure_start {
            recording.store(true, Ordering::SeqCst);
            measured_from = Some(now);
        }
        if now >= end {
            break;
        }
        if live.finished.load(Ordering::SeqCst) == settings.threads as u64 || live.fatal.get().is_some() {
            break;
        }
        tick += Duration::from_secs(1);
        let next = tick.min(end).min(if measured_from.is_none() { measure_start } else { end });
        // In short steps: a mistake that stops the workers ends the run at once.
        while Instant::now() < next && live.fatal.get().is_none() {
            std::thread::sleep(next.saturating_duration_since(Instant::now()).min(Duration::from_millis(50)));
        }
        let now = Instant::now();
        if !quiet && now >= tick {
            let pairs = live.pairs.load(Ordering::Relaxed);
            let grants = live.grants.load(Ordering::Relaxed);
            let secs = now.duration_since(last.0).as_secs_f64().max(1e-9);
            let phase = if measured_from.is_some() { "" } else { " (warm-up)" };
            eprintln!(
                "[{:>4.0}s] {:>9.0} pairs/s {:>9.0} grants/s  errors {}{phase}",
                now.duration_since(start).as_secs_f64(),
                (pairs - last.1) as f64 / secs,
                (grants - last.2) as f64 / secs,
                live.errors.load(Ordering::Relaxed),
            );
            last = (now, pairs, grants);
        }
    }
    stop.store(true, Ordering::SeqCst);
    let elapsed = measured_from.map_or(Duration::ZERO, |from| Instant::now().duration_since(from));
    let mut result = BenchResult {
        elapsed,
        pairs: 0,
        grants: 0,
        latency: Histogram::new(),
        errors: [0; KINDS.len()],
        causes: Vec::new(),
        stopped: None,
        unmeasured: 0,
    };
    for w in workers {
        if let Ok(tally) = w.join() {
            result.pairs += tally.pairs;
            result.grants += tally.grants;
            result.latency.merge(&tally.latency);
            for (a, b) in result.errors.iter_mut().zip(tally.errors) {
                *a += b;
            }
        }
    }
    result.causes =
        KINDS.iter().zip(&live.causes).filter_map(|(k, c)| Some((*k, c.get()?.clone()))).collect();
    result.stopped = live.fatal.get().cloned();
    result.unmeasured = live.errors.load(Ordering::Relaxed).saturating_sub(result.errors.iter().sum());
    result
}

#[allow(clippy::too_many_arguments)]
fn worker(
    w: usize,
    client: &Client,
    settings: &Settings,
    prefix: &str,
    zipf: &Zipf,
    stop: &AtomicBool,
    recording: &AtomicBool,
    live: &Live,
) -> Tally {
    let mut tally = Tally { latency: Histogram::new(), grants: 0, pairs: 0, errors: [0; KINDS.len()] };
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ ((w as u64 + 1) * 0x1000_0000_01B3));
    // Each key is written from its number into this one buffer when it is used. Why:
    // a copy of the key space per worker made the bench's memory --keys x --threads
    // strings (gigabytes for a million keys over 32 threads).
    let mut key = String::new();
    let mut round = 0usize;
    let interval = if settings.rate > 0.0 {
        Some(Duration::from_secs_f64(settings.threads as f64 / settings.rate))
    } else {
        None
    };
    let mut next_at = Instant::now();
    if settings.scenario == Scenario::Hold {
        hold(w, client, settings, prefix, stop, live, &mut tally);
        live.finished.fetch_add(1, Ordering::SeqCst);
        return tally;
    }
    while !stop.load(Ordering::Relaxed) {
        if let Some(interval) = interval {
            next_at += interval;
            let now = Instant::now();
            if next_at > now {
                std::thread::sleep(next_at - now);
            } else if now - next_at > Duration::from_secs(1) {
                next_at = now; // fell behind: do not burst to catch up
            }
        }
        key.clear();
        // Writing to a String cannot fail.
        let _ = match settings.scenario {
            Scenario::Uncontended => write!(key, "{prefix}-w{w}-{}", round % settings.keys),
            Scenario::Hot => write!(key, "{prefix}-hot"),
            Scenario::Hold => unreachable!("hold has its own loop"),
            Scenario::Mixed => write!(key, "{prefix}-z{}", zipf.sample(|| rng.unit())),
        };
        round += 1;
        let record = recording.load(Ordering::Relaxed);
        let t0 = Instant::now();
        match client.acquire(&key, settings.lease, settings.wait) {
            Ok(lock) => {
                live.grants.fetch_add(1, Ordering::Relaxed);
                if record {
                    tally.grants += 1;
                }
                if !settings.hold.is_zero() {
                    std::thread::sleep(settings.hold);
                }
                match lock.release() {
                    Ok(ReleaseOutcome::Released) => {
                        live.pairs.fetch_add(1, Ordering::Relaxed);
                        if record {
                            tally.pairs += 1;
                            tally.latency.record(t0.elapsed().as_nanos() as u64);
                        }
                    }
                    Ok(other) => live.error(&mut tally, 7, record, || other.to_string()),
                    Err(e) => live.error(&mut tally, release_kind(&e), record, || e.to_string()),
                }
            }
            Err(e) => {
                if live.acquire_failed(&mut tally, &e, record) {
                    break;
                }
                // Not a lock answer: do not spin while the service is unreachable.
                if !matches!(e, AcquireError::Busy | AcquireError::Timeout) {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
    }
    tally
}

/// The hold scenario: worker `w` takes keys w, w + threads, … below `--keys` and
/// keeps them; the latency recorded is the acquire's.
fn hold(
    w: usize,
    client: &Client,
    settings: &Settings,
    prefix: &str,
    stop: &AtomicBool,
    live: &Live,
    tally: &mut Tally,
) {
    let mut k = w;
    let mut key = String::new();
    while k < settings.keys && !stop.load(Ordering::Relaxed) {
        key.clear();
        let _ = write!(key, "{prefix}-h{k}");
        let t0 = Instant::now();
        match client.acquire(&key, settings.lease, settings.wait) {
            Ok(lock) => {
                let _ = lock.into_token();
                tally.latency.record(t0.elapsed().as_nanos() as u64);
                tally.grants += 1;
                live.grants.fetch_add(1, Ordering::Relaxed);
                k += settings.threads;
            }
            Err(e) => {
                if live.acquire_failed(tally, &e, true) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

impl BenchResult {
    fn rate(&self, n: u64) -> f64 {
        n as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    fn text(&self, s: &Settings, addrs: &[String]) -> String {
        let h = &self.latency;
        let errors: Vec<String> =
            KINDS.iter().zip(self.errors).filter(|(_, n)| *n > 0).map(|(k, n)| format!("{k}={n}")).collect();
        format!(
            "scenario {} on {} · {} connections · {} threads · {:.1} s measured (+{:.1} s warm-up)\n\
             pairs    {:>10}  {:>10.0}/s\n\
             grants   {:>10}  {:>10.0}/s{}\n\
             latency per pair (ms): p50 {:.3}  p90 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}  mean {:.3}\n\
             errors: {}\n",
            s.scenario.name(),
            addrs.join(","),
            s.connections,
            s.threads,
            self.elapsed.as_secs_f64(),
            s.warmup.as_secs_f64(),
            self.pairs,
            self.rate(self.pairs),
            self.grants,
            self.rate(self.grants),
            if s.scenario == Scenario::Hot { " (hand-offs)" } else { "" },
            ms(h.quantile(0.5)),
            ms(h.quantile(0.9)),
            ms(h.quantile(0.99)),
            ms(h.quantile(0.999)),
            ms(h.max()),
            h.mean() / 1e6,
            match (errors.is_empty(), self.unmeasured) {
                (true, 0) => "none".into(),
                (true, n) => format!("none measured ({n} in the warm-up)"),
                (false, _) => errors.join(" "),
            },
        ) + &self.causes.iter().map(|(kind, why)| format!("  {kind}: {why}\n")).collect::<String>()
    }

    /// One JSON object; latencies in milliseconds.
    pub fn json(&self, s: &Settings, addrs: &[String]) -> String {
        let h = &self.latency;
        let addrs: Vec<String> = addrs.iter().map(|a| json_string(a)).collect();
        let errors: Vec<String> =
            KINDS.iter().zip(self.errors).map(|(k, n)| format!("\"{k}\":{n}")).collect();
        let causes: Vec<String> =
            self.causes.iter().map(|(k, why)| format!("\"{k}\":{}", json_string(why))).collect();
        let stopped = self.stopped.as_deref().map_or("null".into(), json_string);
        format!(
            "{{\"scenario\":\"{}\",\"addrs\":[{}],\"connections\":{},\"threads\":{},\
             \"duration_s\":{:.3},\"warmup_s\":{:.3},\"elapsed_s\":{:.3},\"lease_s\":{},\"wait_ms\":{},\
             \"hold_ms\":{},\"keys\":{},\
             \"pairs\":{},\"grants\":{},\"pairs_per_s\":{:.1},\"grants_per_s\":{:.1},\
             \"latency_ms\":{{\"p50\":{:.4},\"p90\":{:.4},\"p99\":{:.4},\"p999\":{:.4},\"max\":{:.4},\"mean\":{:.4}}},\
             \"errors\":{{{}}},\"errors_total\":{},\"causes\":{{{}}},\"stopped\":{}}}",
            s.scenario.name(),
            addrs.join(","),
            s.connections,
            s.threads,
            s.duration.as_secs_f64(),
            s.warmup.as_secs_f64(),
            self.elapsed.as_secs_f64(),
            s.lease.as_secs(),
            s.wait.as_millis(),
            s.hold.as_millis(),
            s.keys,
            self.pairs,
            self.grants,
            self.rate(self.pairs),
            self.rate(self.grants),
            ms(h.quantile(0.5)),
            ms(h.quantile(0.9)),
            ms(h.quantile(0.99)),
            ms(h.quantile(0.999)),
            ms(h.max()),
            h.mean() / 1e6,
            errors.join(","),
            self.errors.iter().sum::<u64>(),
            causes.join(","),
            stopped,
        )
    }
}

fn json_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
