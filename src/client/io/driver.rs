//! The timer thread (`ticketing-timer`): gives the core the time whenever it asked
//! for it ([`Core::poll_timeout`](crate::client::core::Core::poll_timeout)), and
//! sleeps otherwise. Anyone whose input makes the core's next deadline earlier than the
//! thread's planned wake-up wakes it (`State::drain`). It never waits for a socket.

use std::sync::Arc;
use std::time::Instant;

use super::shared::{Mode, Shared};

pub(super) fn run(shared: Arc<Shared>) {
    loop {
        let next = {
            let mut state = shared.state();
            if state.core.is_shut_down() && shared.is_stopped() {
                return;
            }
            state.core.handle_timeout(Instant::now());
            let next = state.core.poll_timeout();
            state.driver_until = next;
            let work = state.drain(&shared);
            drop(state);
            shared.perform(work, Mode::NonBlocking);
            next
        };
        if shared.is_stopped() {
            return;
        }
        park_until(next);
    }
}

/// Parks the timer thread until woken or `until` passes.
fn park_until(until: Option<Instant>) {
    match until {
        None => std::thread::park(),
        Some(until) => {
            let now = Instant::now();
            if until > now {
                std::thread::park_timeout(until - now);
            }
        }
    }
}
