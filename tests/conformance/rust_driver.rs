//! The conformance driver of the Rust client (and so of the CLI, which is built on it):
//! the line protocol of docs/conformance.md over `ticketing::client`, each command on a
//! thread of its own so that many callers share the one client.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ticketing::client::{AcquireError, Client, ClientError, Lock, ReleaseError, ReleaseOutcome, Resolution};

/// CLOCK_MONOTONIC in nanoseconds, comparable across the processes of one machine.
fn monotonic_ns() -> u64 {
    // `Instant` reads the same clock but hides its value: ask the C library.
    #[repr(C)]
    struct Timespec {
        sec: i64,
        nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
    }
    let mut ts = Timespec { sec: 0, nsec: 0 };
    // SAFETY: a valid, writable timespec; CLOCK_MONOTONIC is 1 on Linux.
    unsafe { clock_gettime(1, &mut ts) };
    ts.sec as u64 * 1_000_000_000 + ts.nsec as u64
}

/// Writes one line to standard output (whole, flushed).
type Say = dyn Fn(String) + Send + Sync;

struct State {
    locks: HashMap<String, Lock>,
    indeterminate: HashMap<String, AcquireError>,
}

fn kind_of_acquire(e: &AcquireError) -> &'static str {
    match e {
        AcquireError::Busy => "busy",
        AcquireError::Timeout => "timeout",
        AcquireError::NotLeader { .. } => "not_leader",
        AcquireError::Invalid(_) => "invalid",
        AcquireError::Overloaded => "overloaded",
        AcquireError::Unavailable { .. } | AcquireError::Forked(_) => "unavailable",
        AcquireError::Indeterminate(_) => "indeterminate",
        AcquireError::Cancelled => "cancelled",
        _ => "internal",
    }
}

fn kind_of_release(e: &ReleaseError) -> &'static str {
    match e {
        ReleaseError::QueueFull => "queue_full",
        ReleaseError::Unavailable { .. } | ReleaseError::Forked(_) => "unavailable",
        ReleaseError::Unconfirmed => "unconfirmed",
        ReleaseError::Invalid(_) => "invalid",
        ReleaseError::Cancelled => "cancelled",
        _ => "internal",
    }
}

fn kind_of_client(e: &ClientError) -> &'static str {
    match e {
        ClientError::Unavailable { .. } | ClientError::Forked(_) => "unavailable",
        ClientError::NoAnswer => "no_answer",
        ClientError::NotLeader { .. } => "not_leader",
        ClientError::Invalid(_) => "invalid",
        ClientError::Overloaded => "overloaded",
        ClientError::Protocol(_) => "protocol",
        ClientError::Refused(_) => "refused",
        ClientError::Cancelled => "cancelled",
        _ => "internal",
    }
}

fn outcome_word(o: ReleaseOutcome) -> &'static str {
    match o {
        ReleaseOutcome::Released => "released",
        ReleaseOutcome::NotHolder => "not_holder",
        _ => "released_or_expired",
    }
}

/// Runs the driver on standard input and output until `quit` or the end of input.
pub fn run() {
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let mut builder = Client::builder()
        .addrs(var("TICKETING_ADDRS").split(',').map(str::trim).filter(|a| !a.is_empty()))
        .auth_token(var("TICKETING_AUTH_TOKEN"))
        .owner(var("TICKETING_OWNER").replace("\\0", "\0"));
    if !var("TICKETING_TLS_CA").is_empty() {
        builder = builder.tls_ca_file(var("TICKETING_TLS_CA"));
    }
    if !var("TICKETING_CLUSTER_NAME").is_empty() {
        builder = builder.cluster_name(var("TICKETING_CLUSTER_NAME"));
    }
    let out = Arc::new(Mutex::new(std::io::stdout()));
    let say: Arc<Say> = {
        let out = Arc::clone(&out);
        Arc::new(move |line: String| {
            let mut out = out.lock().unwrap();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        })
    };
    let client = match builder.build() {
        Ok(client) => client,
        Err(e) => return say(format!("config-error : {e}")),
    };
    say("ready".into());
    let state = Arc::new(Mutex::new(State { locks: HashMap::new(), indeterminate: HashMap::new() }));
    let mut threads = Vec::new();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        if words.first().map(String::as_str) == Some("quit") {
            break;
        }
        let (client, state, say) = (client.clone(), Arc::clone(&state), Arc::clone(&say));
        threads.push(std::thread::spawn(move || {
            let line = command(&client, &state, &words, &say);
            say(line)
        }));
    }
    for t in threads {
        let _ = t.join();
    }
}

fn seconds(s: &str) -> Duration {
    Duration::from_secs_f64(s.parse::<f64>().unwrap_or(-1.0).max(0.0))
}

/// One command's result line.
fn command(client: &Client, state: &Mutex<State>, words: &[String], say: &Arc<Say>) -> String {
    let started = Instant::now();
    let ms = |t: Instant| t.elapsed().as_millis();
    let w = |i: usize| words.get(i).map(String::as_str).unwrap_or("");
    let name = w(1);
    match w(0) {
        "acquire" => {
            // A negative or fractional lease is the library's to refuse.
            let lease = Duration::from_secs_f64(w(3).parse::<f64>().unwrap_or(0.0).max(0.0));
            match client.acquire(w(2), lease, seconds(w(4))) {
                Ok(lock) => {
                    let line =
                        format!("{name} granted {} at={} ms={}", lock.token(), monotonic_ns(), ms(started));
                    state.lock().unwrap().locks.insert(name.to_owned(), lock);
                    line
                }
                Err(e) => acquire_failed(state, name, e, started),
            }
        }
        "hold" => {
            let lease = Duration::from_secs_f64(w(2).parse::<f64>().unwrap_or(0.0).max(0.0));
            let mut hold = client.hold(lease, seconds(w(3)));
            for part in &words[5.min(words.len())..] {
                let mut fields = part.split(':');
                let key = fields.next().unwrap_or("");
                let mut number = || fields.next().and_then(|n| n.parse::<u32>().ok()).unwrap_or(0);
                let (count, capacity) = (number(), number());
                hold = hold.permits(key, count, capacity);
            }
            if w(4) == "1" {
                let (name, say) = (name.to_owned(), Arc::clone(say));
                hold = hold.on_place(move |p| {
                    let eta = match p.grants_per_ks {
                        0 => -1,
                        rate => (u64::from(p.ahead) * 1_000_000 / u64::from(rate)) as i64,
                    };
                    say(format!("{name} place {} eta_ms={eta}", p.ahead));
                });
            }
            match hold.acquire() {
                Ok(lock) => {
                    let line = format!(
                        "{name} granted {} at={} ms={} keys={}",
                        lock.token(),
                        monotonic_ns(),
                        ms(started),
                        keys_word(&lock)
                    );
                    state.lock().unwrap().locks.insert(name.to_owned(), lock);
                    line
                }
                Err(e) => acquire_failed(state, name, e, started),
            }
        }
        "pool" => match client.pool(w(2)) {
            Ok(p) => format!(
                "{name} pool {} {} {} {} ms={}",
                p.capacity,
                p.in_use,
                p.holds,
                p.waiters,
                ms(started)
            ),
            Err(e) => format!(
                "{name} {} retryable={} ms={} : {e}",
                kind_of_client(&e),
                u8::from(e.is_retryable()),
                ms(started)
            ),
        },
        "watch" => {
            let Some(deadline) = state.lock().unwrap().locks.get(name).map(Lock::deadline) else {
                return format!("{name} invalid retryable=0 ms=0 : no lock named {name}");
            };
            // The Rust idiom: the lock's deadline is an Instant to stop by.
            let stated = monotonic_ns() as i128
                + (deadline.saturating_duration_since(Instant::now()).as_nanos() as i128);
            std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
            format!("{name} deadline at={} deadline={stated}", monotonic_ns())
        }
        "release" => {
            let Some(lock) = state.lock().unwrap().locks.remove(name) else {
                return format!("{name} invalid retryable=0 ms=0 : no lock named {name}");
            };
            let at = monotonic_ns();
            match lock.release() {
                Ok(o) => format!("{name} {} at={at} ms={}", outcome_word(o), ms(started)),
                Err(e) => format!("{name} {} retryable=0 ms={} : {e}", kind_of_release(&e), ms(started)),
            }
        }
        "query" => match client.query(w(2)) {
            Ok(None) => format!("{name} free ms={}", ms(started)),
            Ok(Some(h)) => format!("{name} held {} {} {} ms={}", h.owner, h.token, h.waiters, ms(started)),
            Err(e) => format!(
                "{name} {} retryable={} ms={} : {e}",
                kind_of_client(&e),
                u8::from(e.is_retryable()),
                ms(started)
            ),
        },
        "resolve" => {
            let Some(err) = state.lock().unwrap().indeterminate.remove(name) else {
                return format!("{name} invalid retryable=0 ms=0 : no indeterminate acquire named {name}");
            };
            match client.resolve(&err, seconds(w(2))) {
                Resolution::Held(lock) => {
                    let mut line = format!(
                        "{name} resolved held {} at={} ms={}",
                        lock.token(),
                        monotonic_ns(),
                        ms(started)
                    );
                    if lock.keys() != [(lock.key(), 1, 1)] {
                        line.push_str(&format!(" keys={}", keys_word(&lock)));
                    }
                    state.lock().unwrap().locks.insert(name.to_owned(), lock);
                    line
                }
                Resolution::NotHeld => format!("{name} resolved not_held ms={}", ms(started)),
                _ => format!("{name} resolved unknown ms={}", ms(started)),
            }
        }
        other => format!("{name} invalid retryable=0 ms=0 : unknown command {other:?}"),
    }
}

/// An acquire's or a hold's error line; an indeterminate one is kept for `resolve`.
fn acquire_failed(state: &Mutex<State>, name: &str, e: AcquireError, started: Instant) -> String {
    let mut line = format!(
        "{name} {} retryable={} ms={}",
        kind_of_acquire(&e),
        u8::from(e.is_retryable()),
        started.elapsed().as_millis()
    );
    if let Some(cause) = e.indeterminate_cause() {
        line.push_str(&format!(" cause={}", cause_word(cause)));
    }
    line.push_str(&format!(" : {e}"));
    if let AcquireError::Indeterminate(_) = e {
        state.lock().unwrap().indeterminate.insert(name.to_owned(), e);
    }
    line
}

/// A lock's keys as `KEY:COUNT:CAPACITY,…`.
fn keys_word(lock: &Lock) -> String {
    let keys: Vec<String> = lock.keys().iter().map(|(k, n, c)| format!("{k}:{n}:{c}")).collect();
    keys.join(",")
}

fn cause_word(cause: ticketing::client::IndeterminateCause) -> &'static str {
    use ticketing::client::IndeterminateCause as C;
    match cause {
        C::ConnectionLost => "connection_lost",
        C::ServerUnknown => "server_unknown",
        C::NoAnswer => "no_answer",
        C::ProtocolViolation => "protocol_violation",
        C::ExpiredOnArrival => "expired_on_arrival",
        C::Cancelled => "cancelled",
        _ => "other",
    }
}
