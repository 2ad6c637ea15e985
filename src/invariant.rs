//! Invariants asserted where state changes, and what a violated one does to the node.
//!
//! A broken invariant says the code is wrong, not the input (input from the network is
//! refused with an error long before it could break one). A node that found one must not
//! serve another answer from state it no longer trusts: [`invariant!`](crate::invariant!) panics with a
//! message that starts with [`VIOLATED`] and names the invariant, and the server's panic
//! hook ([`stop_on_violation`]) ends the process with [`EXIT_VIOLATION`]. In a cluster
//! that is a minority failure the others survive; the operator replaces the node
//! (docs/operations.md). Under a test or a simulator the panic fails the run instead.
//!
//! Cheap checks (a comparison of two fields) are always on. Checks that walk a whole
//! structure run under `debug_assertions` through each core's `check_invariants`, which
//! the simulators call after every step in both profiles.

use std::sync::Once;

/// How the message of a violated invariant starts.
pub const VIOLATED: &str = "invariant violated: ";

/// Exit status of a server that stopped on a violated invariant, or whose lock-table or
/// Raft thread panicked (EX_SOFTWARE: an internal error).
pub const EXIT_VIOLATION: i32 = 70;

thread_local! {
    /// True on a thread started by [`spawn_vital`].
    static VITAL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Starts a thread whose panic leaves the node unable to answer truthfully (the
/// lock-table and Raft threads: their state is the node's state, and nothing restarts
/// them): under the server's panic hook ([`stop_on_violation`]) its panic stops the
/// process. A thread is vital because it was started here, whatever its name.
pub fn spawn_vital<F, T>(name: &str, f: F) -> std::io::Result<std::thread::JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    std::thread::Builder::new().name(name.to_string()).spawn(move || {
        VITAL.with(|v| v.set(true));
        f()
    })
}

/// True on a thread started by [`spawn_vital`] (false where thread-local storage is gone).
fn on_vital_thread() -> bool {
    VITAL.try_with(|v| v.get()).unwrap_or(false)
}

/// `invariant!(cond, "name", "detail {}", x)`: if `cond` is false, the invariant called
/// `name` is violated; the panic message is `invariant violated: name: detail`.
#[macro_export]
macro_rules! invariant {
    ($cond:expr, $name:expr $(,)?) => {
        if !$cond {
            $crate::invariant::violated($name, format_args!("{}", stringify!($cond)))
        }
    };
    ($cond:expr, $name:expr, $($detail:tt)+) => {
        if !$cond {
            $crate::invariant::violated($name, format_args!($($detail)+))
        }
    };
}

/// Panics with the message every violation carries (see the module comment).
#[cold]
#[inline(never)]
#[track_caller]
pub fn violated(name: &str, detail: std::fmt::Arguments<'_>) -> ! {
    panic!("{VIOLATED}{name}: {detail}")
}

/// True if a panic's payload is a violated invariant's message.
pub fn is_violation(payload: &(dyn std::any::Any + Send)) -> bool {
    panic_message(payload).is_some_and(|m| m.starts_with(VIOLATED))
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> Option<&str> {
    payload.downcast_ref::<String>().map(String::as_str).or_else(|| payload.downcast_ref::<&str>().copied())
}

/// Installs (once) the server's panic hook: after the usual report, a violated invariant
/// anywhere, or a panic on a vital thread, stops the process with [`EXIT_VIOLATION`]
/// and one line that says why. Other panics (a connection thread's) end only their
/// thread, as before.
pub fn stop_on_violation() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            previous(info);
            let thread = std::thread::current();
            let name = thread.name().unwrap_or("");
            let message = panic_message(info.payload()).unwrap_or("(no message)");
            if let Some(why) = stop_reason(message, name, on_vital_thread()) {
                eprintln!(
                    "ticketing: stopping: {why}; this is a bug: replace this node (docs/operations.md)"
                );
                std::process::exit(EXIT_VIOLATION);
            }
        }));
    });
}

/// Why a panic with `message` on the thread called `thread` (started by [`spawn_vital`]
/// if `vital`) stops the node, if it does.
fn stop_reason(message: &str, thread: &str, vital: bool) -> Option<String> {
    if message.starts_with(VIOLATED) {
        Some(message.to_string())
    } else if vital {
        Some(format!("the {thread} thread panicked: {message}"))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_false_condition_panics_naming_the_invariant_and_a_true_one_does_not() {
        let x = 3;
        invariant!(x == 3, "three");
        let payload = std::panic::catch_unwind(|| invariant!(x < 2, "small", "x is {x}")).unwrap_err();
        assert!(is_violation(&*payload));
        assert_eq!(panic_message(&*payload), Some("invariant violated: small: x is 3"));
        let plain = std::panic::catch_unwind(|| invariant!(x > 5, "big")).unwrap_err();
        assert_eq!(panic_message(&*plain), Some("invariant violated: big: x > 5"));
        let other = std::panic::catch_unwind(|| panic!("something else")).unwrap_err();
        assert!(!is_violation(&*other));
    }

    #[test]
    fn violations_anywhere_and_panics_of_vital_threads_stop_the_node_others_do_not() {
        let v = stop_reason("invariant violated: one holder per key: key \"a\"", "conn-7", false);
        assert_eq!(v.as_deref(), Some("invariant violated: one holder per key: key \"a\""));
        let lock = stop_reason("index out of bounds", "lock-table", true).unwrap();
        assert_eq!(lock, "the lock-table thread panicked: index out of bounds");
        // The name does not make a thread vital; how it was started does.
        assert_eq!(stop_reason("index out of bounds", "raft", false), None);
        assert!(stop_reason("index out of bounds", "renamed", true).is_some());
        assert_eq!(stop_reason("index out of bounds", "conn-7", false), None);
    }

    #[test]
    fn a_thread_is_vital_because_spawn_vital_started_it() {
        assert!(!on_vital_thread());
        let vital = spawn_vital("any-name", on_vital_thread).unwrap().join().unwrap();
        assert!(vital);
        let named = std::thread::Builder::new().name("lock-table".into()).spawn(on_vital_thread).unwrap();
        assert!(!named.join().unwrap());
    }
}
