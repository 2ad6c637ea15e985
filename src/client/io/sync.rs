//! The one way the client's I/O takes a mutex.

use std::sync::{Mutex, MutexGuard};

/// Locks a mutex, ignoring poisoning: every critical section here leaves its data
/// consistent at each step, so a panic elsewhere is no reason to stop the client.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
