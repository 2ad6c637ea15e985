//! `ticketing bench`: a load generator on the official client.
//!
//! Workers are threads; each does acquire → (hold) → release in a loop on one of
//! `--connections` [`Client`] objects and records the time of the whole pair. The
//! official client is blocking (one outstanding request per calling thread) and
//! pipelines the requests of all threads that share it, so the pipeline depth on a
//! connection is the number of workers sharing its client: `--pipeline D` means
//! `--threads = connections × D`. Workers get small stacks, so that 10,000 of them (a
//! line of 10,000 waiters) fit in a few tens of MiB. The counted and multi-key
//! scenarios make their HOLDs in bench_holds.rs.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::bench_holds::{self, Places};
use super::bench_settings::{settings, Scenario, Settings};
use super::bench_tally::{release_kind, Live, Tally, KINDS};
use super::histogram::Histogram;
use super::zipf::Zipf;
use super::*;
use crate::client::{AcquireError, Client, ClientBuilder, ReleaseOutcome};

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
  stock        every worker takes --count (default 1) of the --permits (default
               1000) of one key and releases: a stock
  pool         stock with --permits 10 by default: a hot pool, grants/s =
               hand-offs per second
  multi        each worker holds --keys-per-hold (default 4) keys of its own at once

hot --position: every waiter asks for its place in line; the report counts the
places told (frames/s, how many repeated a place, the shortest gap between two
frames of one waiter).

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
    opts.optopt("", "permits", "stock, pool: the key's capacity (default: stock 1000, pool 10)", "N");
    opts.optopt("", "count", "stock, pool: permits each hold takes (default 1)", "K");
    opts.optopt("", "keys-per-hold", "multi: keys each hold names, 1..=16 (default 4)", "N");
    opts.optflag("", "position", "hot: each waiter asks for its place in line");
    opts.optflag("", "json", "print the result as one JSON object on stdout");
    opts.optflag("q", "quiet", "no progress lines");
    opts.optflag("h", "help", "print this help");
    let usage = "ticketing bench [uncontended|hot|mixed|hold|stock|pool|multi] [options]";
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
            .words(&crate::client::CLI_WORDS)
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
    /// hot --position: places in line told, those that repeated the waiter's previous
    /// place, and the shortest time between two of one waiter's (µs; `None`: no two).
    pub places: u64,
    /// Of those, the ones after a waiter's first, and the seconds all waiters waited.
    pub places_later: u64,
    pub waited_s: f64,
    pub places_unchanged: u64,
    pub place_gap_min_us: Option<u64>,
    /// The futex hash the bench asked for and got (buckets), with many workers.
    pub futex_hash_slots: Option<u32>,
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
    let places = Arc::new(Places::new());
    // Many blocked workers: a futex hash to match, before they start (sys.rs says why).
    let futex_hash_slots = if settings.threads > FUTEX_HASH_THREADS {
        crate::sys::futex_hash_slots((settings.threads as u32 * 2).next_power_of_two())
    } else {
        None
    };
    let workers: Vec<_> = (0..settings.threads)
        .map(|w| {
            let client = clients[w % clients.len()].clone();
            let settings = settings.clone();
            let (stop, recording, live) = (stop.clone(), recording.clone(), live.clone());
            let (prefix, zipf, places) = (prefix.clone(), zipf.clone(), places.clone());
            std::thread::Builder::new()
                .name(format!("bench-{w}"))
                .stack_size(WORKER_STACK_BYTES)
                .spawn(move || {
                    let shared = Shared { stop, recording, live, places };
                    worker(w, &client, &settings, &prefix, &zipf, &shared)
                })
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
    // Places in line told after the end are not counted (pairs begun before it are).
    recording.store(false, Ordering::SeqCst);
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
        places: places.frames.load(Ordering::Relaxed),
        places_later: places.later.load(Ordering::Relaxed),
        waited_s: places.waited_us.load(Ordering::Relaxed) as f64 / 1e6,
        places_unchanged: places.unchanged.load(Ordering::Relaxed),
        place_gap_min_us: Some(places.gap_min_us.load(Ordering::Relaxed)).filter(|&us| us != u64::MAX),
        futex_hash_slots,
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

/// Above this many workers the bench asks for a futex hash of twice as many buckets.
const FUTEX_HASH_THREADS: usize = 256;

/// A worker's stack: its loop and the client's blocking call need little, and 10,000
/// workers of the default 2 MiB would reserve 20 GiB of address space.
const WORKER_STACK_BYTES: usize = 256 * 1024;

/// What every worker shares with the run.
struct Shared {
    stop: Arc<AtomicBool>,
    recording: Arc<AtomicBool>,
    live: Arc<Live>,
    places: Arc<Places>,
}

fn worker(
    w: usize,
    client: &Client,
    settings: &Settings,
    prefix: &str,
    zipf: &Zipf,
    shared: &Shared,
) -> Tally {
    let (stop, recording, live) = (&*shared.stop, &*shared.recording, &*shared.live);
    let shape = settings.shape();
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
            Scenario::Stock | Scenario::Pool | Scenario::Multi => Ok(()),
        };
        round += 1;
        let record = recording.load(Ordering::Relaxed);
        let t0 = Instant::now();
        let acquired = match shape {
            None => client.acquire(&key, settings.lease, settings.wait),
            Some(shape) => {
                let times = (settings.lease, settings.wait);
                bench_holds::acquire(
                    client,
                    shape,
                    &mut key,
                    prefix,
                    w,
                    times,
                    &shared.places,
                    &shared.recording,
                )
            }
        };
        match acquired {
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
            if matches!(s.scenario, Scenario::Hot | Scenario::Pool) { " (hand-offs)" } else { "" },
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
            + &if s.position {
                format!(
                    "places   {:>10}  {:>10.0}/s; after a waiter's first: {} in {:.0} s waited \
                     ({:.3} per waiter per s); repeated {}; shortest gap {}\n",
                    self.places,
                    self.rate(self.places),
                    self.places_later,
                    self.waited_s,
                    self.places_later as f64 / self.waited_s.max(1e-9),
                    self.places_unchanged,
                    self.place_gap_min_us.map_or("none".into(), |us| format!("{:.3} s", us as f64 / 1e6)),
                )
            } else {
                String::new()
            }
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
             \"hold_ms\":{},\"keys\":{},\"permits\":{},\"count\":{},\"keys_per_hold\":{},\"position\":{},\
             \"pairs\":{},\"grants\":{},\"pairs_per_s\":{:.1},\"grants_per_s\":{:.1},\
             \"latency_ms\":{{\"p50\":{:.4},\"p90\":{:.4},\"p99\":{:.4},\"p999\":{:.4},\"max\":{:.4},\"mean\":{:.4}}},\
             \"errors\":{{{}}},\"errors_total\":{},\"causes\":{{{}}},\"stopped\":{},\
             \"places\":{},\"places_per_s\":{:.1},\"places_later\":{},\"waited_s\":{:.3},\"places_unchanged\":{},\"place_gap_min_ms\":{},\"futex_hash_slots\":{}}}",
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
            s.permits,
            s.count,
            s.keys_per_hold,
            s.position,
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
            self.places,
            self.rate(self.places),
            self.places_later,
            self.waited_s,
            self.places_unchanged,
            self.place_gap_min_us.map_or("null".into(), |us| format!("{:.3}", us as f64 / 1e3)),
            self.futex_hash_slots.map_or("null".into(), |n| n.to_string()),
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
