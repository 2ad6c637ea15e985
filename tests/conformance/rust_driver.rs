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
    let say = {
        let out = Arc::clone(&out);
        move |line: String| {
            let mut out = out.lock().unwrap();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
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
        let (client, state, say) = (client.clone(), Arc::clone(&state), say.clone());
        threads.push(std::thread::spawn(move || say(command(&client, &state, &words))));
    }
    for t in threads {
        let _ = t.join();
    }
}

fn seconds(s: &str) -> Duration {
    Duration::from_secs_f64(s.parse::<f64>().unwrap_or(-1.0).max(0.0))
}

/// One command's result line.
fn command(client: &Client, state: &Mutex<State>, words: &[String]) -> String {
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
                Err(e) => {
                    let mut line = format!(
                        "{name} {} retryable={} ms={}",
                        kind_of_acquire(&e),
                        u8::from(e.is_retryable()),
                        ms(started)
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
            }
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
                    let line = format!(
                        "{name} resolved held {} at={} ms={}",
                        lock.token(),
                        monotonic_ns(),
                        ms(started)
                    );
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
