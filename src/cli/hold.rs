//! `ticketing run KEY -- CMD ARGS…`: holds KEY while CMD runs.
//!
//! CMD gets the fencing token in `TICKETING_FENCE` and the key in `TICKETING_KEY`.
//! If CMD is still running [`RUN_STOP_MARGIN`] before the lock's local deadline, it
//! gets SIGTERM, then SIGKILL after [`RUN_KILL_GRACE`]: v1 has no lease renewal, and
//! work past the deadline would run without the lock. Then `run` exits 3.

use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::time::{Duration, Instant};

use super::*;
use crate::sys;

/// CMD is asked to stop this long before the lock's local deadline.
pub const RUN_STOP_MARGIN: Duration = Duration::from_secs(1);
/// Time between SIGTERM and SIGKILL.
pub const RUN_KILL_GRACE: Duration = Duration::from_secs(1);
/// How often the child is checked.
const RUN_POLL: Duration = Duration::from_millis(20);

pub(super) fn run(args: &[String]) -> i32 {
    let split = args.iter().position(|a| a == "--");
    let (ours, command) = match split {
        Some(at) => (&args[..at], &args[at + 1..]),
        None => (args, &[][..]),
    };
    let mut opts = lock_options();
    lease_wait_options(&mut opts);
    commands::hold_options(&mut opts);
    let about = "Acquires KEY (or every KEY at once, with --permits/--count as for \
                 acquire), runs CMD with TICKETING_FENCE (the fencing token) and \
                 TICKETING_KEY (the keys, comma-separated) in its environment, releases \
                 when CMD ends and exits with CMD's status (128+N if killed by signal N). \
                 If CMD still runs 1 s before the lease ends, it gets SIGTERM, then \
                 SIGKILL 1 s later, and run exits 3.";
    let matches = match parse(&opts, ours, "ticketing run KEY [KEY...] [options] -- CMD [ARGS...]", about) {
        Ok(m) => m,
        Err(code) => return code,
    };
    let keys = matches.free.clone();
    let shape = match commands::hold_shape(&matches, &keys, "run") {
        Ok(shape) => shape,
        Err(code) => return code,
    };
    let key = &keys.join(",");
    let Some((program, program_args)) = command.split_first() else {
        eprintln!("ticketing run: expected `-- CMD [ARGS...]`; see --help");
        return EXIT_USAGE;
    };
    let (lease, wait) = match lease_wait(&matches) {
        Ok(lw) => lw,
        Err(code) => return code,
    };
    let client = match build_client(&matches) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let budget = Budget::acquire(wait);
    let taken = match shape {
        None => acquire_following(&client, key, lease, wait, budget),
        Some(shape) => commands::hold_following(&client, &keys, shape, lease, wait, budget),
    };
    let lock = match taken {
        Ok(lock) => lock,
        Err(e) => {
            let no_leader =
                matches!(e, AcquireError::NotLeader { leader: None } | AcquireError::Unavailable { .. });
            report_failure(&client, "run", &Failed::Acquire(&e), no_leader, budget);
            return acquire_exit(&e);
        }
    };
    let mut child = match Command::new(program)
        .args(program_args)
        .env("TICKETING_FENCE", lock.token().to_string())
        .env("TICKETING_KEY", key)
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            eprintln!("ticketing run: cannot start {program:?}: {e}");
            report_release(key, lock.release());
            return EXIT_USAGE;
        }
    };
    let stop_at = lock.deadline().checked_sub(RUN_STOP_MARGIN).unwrap_or_else(Instant::now);
    let mut terminated_at: Option<Instant> = None;
    let mut killed = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) => {}
            Err(e) => {
                eprintln!("ticketing run: cannot watch {program:?}: {e}");
                break None;
            }
        }
        let now = Instant::now();
        match terminated_at {
            None if now >= stop_at => {
                eprintln!(
                    "ticketing run: the lease on {key} ends in {} ms; stopping {program:?} (SIGTERM)",
                    lock.remaining().as_millis()
                );
                if let Err(e) = sys::send_signal(child.id(), sys::SIGTERM) {
                    eprintln!("ticketing run: SIGTERM failed: {e}");
                }
                terminated_at = Some(now);
            }
            Some(at) if !killed && now >= at + RUN_KILL_GRACE => {
                eprintln!("ticketing run: {program:?} did not stop; sending SIGKILL");
                let _ = child.kill();
                killed = true;
            }
            _ => {}
        }
        std::thread::sleep(RUN_POLL);
    };
    report_release(key, lock.release());
    if terminated_at.is_some() {
        eprintln!("ticketing run: the lease on {key} ran out before {program:?} finished");
        return EXIT_UNKNOWN;
    }
    match status {
        Some(status) => match (status.code(), status.signal()) {
            (Some(code), _) => code,
            (None, Some(signal)) => 128 + signal,
            (None, None) => EXIT_UNKNOWN,
        },
        None => EXIT_UNKNOWN,
    }
}

fn report_release(key: &str, outcome: Result<crate::client::ReleaseOutcome, ReleaseError>) {
    match outcome {
        Ok(crate::client::ReleaseOutcome::Released) => {}
        Ok(crate::client::ReleaseOutcome::NotHolder) => {
            eprintln!("ticketing run: {key} was no longer held at release (lease ended)")
        }
        Ok(other) => eprintln!("ticketing run: {key}: {other}"),
        Err(e) => eprintln!("ticketing run: releasing {key}: {e}"),
    }
}
