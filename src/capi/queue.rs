//! The completion queue (`ticketing_queue`): where ready futures leave a tag — and
//! waiting holds the tag of a new place in line ([`PlaceBox`]) — with a file descriptor
//! an event loop watches, so that no code of the program runs on the client's threads
//! (Python's asyncio: a callback there would wait for the GIL and hold up the
//! connection's reader).
//!
//! One pipe per queue. The rule that keeps it from ever blocking: a byte is in the pipe
//! exactly while the queue holds a tag — written when the first tag comes, read when
//! the last one is taken, both under the queue's mutex.

use std::collections::VecDeque;
use std::ffi::c_int;
use std::io::{PipeReader, PipeWriter, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, MutexGuard};

use super::abi::*;
use super::boundary::{getter, guard, put, required};
use super::error::Failure;
use super::handle::{self, Kind, Opaque, Tagged};
use crate::client::Place;

/// `ticketing_queue`.
#[doc(hidden)]
pub struct QueueHandle {
    tags: Mutex<VecDeque<u64>>,
    reader: PipeReader,
    writer: PipeWriter,
}

impl Kind for QueueHandle {
    const TAG: u64 = 0x7469_636b_2d71_7565; // "tick-que"
    const NAME: &'static str = "ticketing_queue";
}

impl Opaque for ticketing_queue {
    type Value = QueueHandle;
}

impl QueueHandle {
    fn new() -> std::io::Result<QueueHandle> {
        let (reader, writer) = std::io::pipe()?;
        Ok(QueueHandle { tags: Mutex::new(VecDeque::new()), reader, writer })
    }

    fn tags(&self) -> MutexGuard<'_, VecDeque<u64>> {
        self.tags.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A future became ready: its tag goes in, and the descriptor becomes readable.
    pub(super) fn push(&self, tag: u64) {
        let mut tags = self.tags();
        if tags.is_empty() {
            // Never blocks: the pipe holds at most this one byte.
            if let Err(e) = (&self.writer).write_all(&[1]) {
                log::error!("ticketing_queue: cannot signal its descriptor: {e}");
            }
        }
        tags.push_back(tag);
    }

    /// Takes up to `out.len()` tags, oldest first; the descriptor stops being readable
    /// once none is left.
    fn take(&self, out: &mut [u64]) -> usize {
        let mut tags = self.tags();
        let n = out.len().min(tags.len());
        for (slot, tag) in out.iter_mut().zip(tags.drain(..n)) {
            *slot = tag;
        }
        if n > 0 && tags.is_empty() {
            // Never blocks: the byte written with the first tag is there.
            let mut byte = [0u8; 1];
            if let Err(e) = (&self.reader).read_exact(&mut byte) {
                log::error!("ticketing_queue: cannot clear its descriptor: {e}");
            }
        }
        n
    }
}

/// Where a hold started by ticketing_hold_start_queued keeps its latest place in line:
/// a new place replaces the one not taken yet, and leaves the hold's place tag in the
/// queue unless one is there already — so however fast a line moves, a waiting hold has
/// at most one tag in the queue and one place to read.
#[doc(hidden)]
pub struct PlaceBox {
    queue: Arc<Tagged<QueueHandle>>,
    tag: u64,
    latest: Mutex<(Option<Place>, bool)>,
}

impl PlaceBox {
    pub(super) fn new(queue: Arc<Tagged<QueueHandle>>, tag: u64) -> PlaceBox {
        PlaceBox { queue, tag, latest: Mutex::new((None, false)) }
    }

    fn latest(&self) -> MutexGuard<'_, (Option<Place>, bool)> {
        self.latest.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new place (on a client thread): kept, and the tag left unless it waits already.
    pub(super) fn put(&self, place: Place) {
        let mut latest = self.latest();
        latest.0 = Some(place);
        if !latest.1 {
            latest.1 = true;
            self.queue.value.push(self.tag);
        }
    }

    /// The place not taken yet, if any; the next place leaves a tag again.
    pub(super) fn take(&self) -> Option<Place> {
        let mut latest = self.latest();
        latest.1 = false;
        latest.0.take()
    }
}

/// A new completion queue. Errors: TICKETING_INTERNAL (no pipe could be made).
///
/// # Safety
/// Out-pointers NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ticketing_queue_new(
    queue_out: *mut *mut ticketing_queue,
    error_out: *mut *mut ticketing_error,
) -> c_int {
    guard(error_out, || {
        let queue_out = required(queue_out, "queue_out")?;
        let queue = QueueHandle::new().map_err(|e| Failure::internal(format!("cannot make a pipe: {e}")))?;
        unsafe { put(queue_out, handle::into_raw(queue)) };
        Ok(())
    })
}

/// The queue's file descriptor: readable exactly while tags wait (for poll, epoll, an
/// event loop's add_reader). Owned by the queue; -1 if queue is not a live queue.
///
/// # Safety
/// `queue` is NULL or a queue handle.
#[no_mangle]
pub unsafe extern "C" fn ticketing_queue_fd(queue: *const ticketing_queue) -> c_int {
    getter(-1, || unsafe { handle::peek(queue) }.map_or(-1, |q| q.reader.as_raw_fd()))
}

/// Takes up to `max` waiting tags into `tags`, oldest first, and returns how many. Never
/// blocks: 0 when none waits.
///
/// # Safety
/// `queue` is NULL or a queue handle; `tags` holds `max` writable slots (or is NULL
/// with `max` 0).
#[no_mangle]
pub unsafe extern "C" fn ticketing_queue_take(
    queue: *mut ticketing_queue,
    tags: *mut u64,
    max: usize,
) -> usize {
    getter(0, || {
        let Some(queue) = (unsafe { handle::peek(queue.cast_const()) }) else { return 0 };
        if tags.is_null() || max == 0 {
            return 0;
        }
        // SAFETY: `tags` holds `max` slots (header contract).
        queue.take(unsafe { std::slice::from_raw_parts_mut(tags, max) })
    })
}

/// Frees the queue (futures still naming it keep it until they are ready).
///
/// # Safety
/// `queue` is NULL or a queue handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ticketing_queue_free(queue: *mut ticketing_queue) {
    getter((), || unsafe { handle::free(queue, "ticketing_queue_free") })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(queue: &QueueHandle) -> bool {
        // The byte is there exactly while tags wait: a second pipe-size check is not
        // portable, so look with a zero-timeout poll of the descriptor.
        #[repr(C)]
        struct PollFd {
            fd: c_int,
            events: i16,
            revents: i16,
        }
        extern "C" {
            fn poll(fds: *mut PollFd, n: u64, timeout: c_int) -> c_int;
        }
        let mut fd = PollFd { fd: queue.reader.as_raw_fd(), events: 1, revents: 0 };
        unsafe { poll(&mut fd, 1, 0) == 1 }
    }

    #[test]
    fn the_descriptor_is_readable_exactly_while_tags_wait() {
        let queue = QueueHandle::new().unwrap();
        assert!(!readable(&queue));
        queue.push(7);
        queue.push(8);
        queue.push(9);
        assert!(readable(&queue));
        let mut out = [0u64; 2];
        assert_eq!(queue.take(&mut out), 2);
        assert_eq!(out, [7, 8]);
        assert!(readable(&queue), "one tag is left");
        assert_eq!(queue.take(&mut out), 1);
        assert_eq!(out[0], 9);
        assert!(!readable(&queue));
        assert_eq!(queue.take(&mut out), 0, "an empty queue never blocks");
        queue.push(1);
        assert!(readable(&queue));
    }

    #[test]
    fn a_place_box_keeps_the_latest_place_and_one_tag() {
        let queue = handle::new_arc(QueueHandle::new().unwrap());
        let places = PlaceBox::new(Arc::clone(&queue), 42);
        assert!(places.take().is_none());
        places.put(Place::new(9, 0));
        places.put(Place::new(8, 1500));
        places.put(Place::new(7, 1500));
        let mut out = [0u64; 4];
        assert_eq!(queue.value.take(&mut out), 1, "one tag however many places came");
        assert_eq!(out[0], 42);
        assert_eq!(places.take(), Some(Place::new(7, 1500)), "the latest place");
        assert!(places.take().is_none(), "taken once");
        places.put(Place::new(6, 1500));
        assert_eq!(queue.value.take(&mut out), 1, "a place after a take leaves its tag again");
        assert_eq!(places.take(), Some(Place::new(6, 1500)));
    }
}
