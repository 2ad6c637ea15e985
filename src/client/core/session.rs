//! One authenticated connection as the core sees it: the requests waiting for an
//! answer on it, the frames queued for writing, which of them may have reached the
//! socket, and when it last heard from the server.
//!
//! The rule this file keeps: a request whose frame had any byte handed to the socket
//! is *maybe written* and is never reported as unsent; a frame queued behind a failed
//! write, or still queued when the connection ends, is *unsent* and may go elsewhere.
//! Every queued frame has a sequence number; `maybe_written` is the highest one that
//! was ever part of a batch given to a writer, raised *before* the writer gets it.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::time::Instant;

use super::ids::{IdHasher, OpId, OrphanId, SessionId};

/// Who waits for the answer to a request id on a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Waiting {
    /// An operation of the core (a caller's request, a release, a STATUS probe...).
    Op(OpId),
    /// The idle PING of dead-session detection: only the arrival of a frame matters.
    Ping,
    /// The STATUS of discovery (the leader and the voter set).
    Status,
    /// The STATUS asked of a node whose WELCOME reported no fencing domain: only its
    /// `domain=` matters (`domains.rs`).
    Probe,
    /// An ACQUIRE whose caller stopped waiting: a `G` that still arrives is released
    /// (or handed to the `resolve` that claimed the orphan record).
    LateGrant(OrphanId),
}

/// A request waiting for its answer.
#[derive(Clone, Debug)]
pub(crate) struct Pending {
    pub(crate) waiting: Waiting,
    /// The frame's sequence number on this session.
    pub(crate) seq: u64,
    /// When the frame was queued: no byte of it can have left before.
    pub(crate) queued_at: Instant,
    /// When the write of the batch holding it completed, if it did.
    pub(crate) written_at: Option<Instant>,
}

/// How far a failed write got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteFailure {
    /// This many bytes of the batch reached the socket (plain TCP: exact).
    After(usize),
    /// Some TLS ciphertext reached the socket: which frames it carried is unknown, so
    /// every frame of the batch counts as maybe written.
    SomeTls,
}

/// One frame in the outbox or in the batch being written.
#[derive(Clone, Copy, Debug)]
struct Frame {
    seq: u64,
    /// Offset just past the frame in its buffer.
    end: usize,
    id: u32,
}

/// What the end of a session does to a request that waited on it.
#[derive(Debug)]
pub(crate) struct Ended {
    pub(crate) id: u32,
    pub(crate) pending: Pending,
    /// True when some byte of the frame may have reached the server.
    pub(crate) maybe_written: bool,
}

pub(crate) struct Session {
    pub(crate) id: SessionId,
    /// From the WELCOME: a standalone node has no membership to discover.
    pub(crate) standalone: bool,
    /// The resolved socket address (`ip:port`), for matching a leader address.
    pub(crate) peer: String,
    /// Believed to lead: WELCOME `L`/`S`, a `G` or `R` answer; cleared by `M`.
    pub(crate) leads: bool,
    /// Closed by the client (dead, failed write, retired): nothing more is written;
    /// answers still count until the reader reports the end.
    pub(crate) dying: bool,
    pending: HashMap<u32, Pending, BuildHasherDefault<IdHasher>>,
    outbox: Vec<u8>,
    queued: Vec<Frame>,
    in_flight: Vec<Frame>,
    next_seq: u64,
    maybe_written: u64,
    /// Some thread is this session's writer (see `Core::next_batch`).
    flushing: bool,
    pub(crate) last_rx: Instant,
    /// When the outstanding idle PING was queued, and its request id.
    pub(crate) ping_at: Option<Instant>,
    pub(crate) ping_id: Option<u32>,
    /// When the session was made.
    pub(crate) since: Instant,
    /// A PING skipped because a write was under way is tried again then.
    pub(crate) ping_retry: Option<Instant>,
}

impl Session {
    pub(crate) fn new(id: SessionId, standalone: bool, leads: bool, peer: String, now: Instant) -> Self {
        Session {
            id,
            standalone,
            peer,
            leads,
            dying: false,
            pending: HashMap::default(),
            outbox: Vec::with_capacity(4096),
            queued: Vec::new(),
            in_flight: Vec::new(),
            next_seq: 1,
            maybe_written: 0,
            flushing: false,
            last_rx: now,
            ping_at: None,
            ping_id: None,
            since: now,
            ping_retry: None,
        }
    }

    /// True while a request may be written here.
    pub(crate) fn usable(&self) -> bool {
        !self.dying
    }

    pub(crate) fn is_pending(&self, id: u32) -> bool {
        self.pending.contains_key(&id)
    }

    pub(crate) fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// True while some thread is writing (or about to write) this session.
    pub(crate) fn is_flushing(&self) -> bool {
        self.flushing
    }

    /// Queues one frame under request `id`; `encode` appends it (with that id) to the
    /// outbox. True when no thread is writing yet: the caller becomes the writer.
    pub(crate) fn queue(
        &mut self,
        id: u32,
        waiting: Waiting,
        now: Instant,
        encode: impl FnOnce(&mut Vec<u8>),
    ) -> bool {
        debug_assert!(!self.dying, "queued on a dying session");
        debug_assert!(!self.pending.contains_key(&id), "request id {id} is pending twice");
        let seq = self.next_seq;
        self.next_seq += 1;
        encode(&mut self.outbox);
        self.queued.push(Frame { seq, end: self.outbox.len(), id });
        self.pending.insert(id, Pending { waiting, seq, queued_at: now, written_at: None });
        !std::mem::replace(&mut self.flushing, true)
    }

    /// Makes the caller the writer if nobody is (the reader's "pen": callers it wakes
    /// then queue, and it writes their frames together). False when a writer exists or
    /// the session is dying.
    pub(crate) fn take_pen(&mut self) -> bool {
        if self.flushing || self.dying {
            return false;
        }
        self.flushing = true;
        true
    }

    /// Moves every queued frame into `buf` (which must be empty) for the writer and
    /// counts them as maybe written. False — and the writer's role given up — when
    /// nothing is queued or the session is dying.
    pub(crate) fn take_batch(&mut self, buf: &mut Vec<u8>) -> bool {
        debug_assert!(self.flushing, "a batch taken by a thread that is not the writer");
        debug_assert!(self.in_flight.is_empty(), "a batch taken while one is in flight");
        if self.outbox.is_empty() || self.dying {
            self.flushing = false;
            return false;
        }
        buf.clear();
        std::mem::swap(&mut self.outbox, buf);
        std::mem::swap(&mut self.queued, &mut self.in_flight);
        self.maybe_written = self.in_flight.last().map_or(self.maybe_written, |f| f.seq);
        true
    }

    /// The batch in flight was written whole at `now`. Returns the orphan records whose
    /// ACQUIRE was in it (their caller gave up while the frame waited to be written).
    pub(crate) fn batch_written(&mut self, now: Instant) -> Vec<OrphanId> {
        let mut late = Vec::new();
        for frame in self.in_flight.drain(..) {
            if let Some(p) = self.pending.get_mut(&frame.id).filter(|p| p.seq == frame.seq) {
                p.written_at = Some(now);
                if let Waiting::LateGrant(orphan) = p.waiting {
                    late.push(orphan);
                }
            }
        }
        late
    }

    /// The batch in flight failed after `failure`: the session must die now (nothing
    /// may be appended to a byte stream that may end inside a frame; the caller kills
    /// it). Returns the requests
    /// not a byte of which went out — the rest of the batch and everything queued
    /// behind it —, removed from the session; the others stay pending until the
    /// reader reports the end (an answer may still come).
    pub(crate) fn write_failed(&mut self, failure: WriteFailure) -> Vec<(u32, Pending)> {
        let mut start = 0;
        let mut last_out = self.in_flight.first().map_or(self.maybe_written, |f| f.seq.saturating_sub(1));
        let mut unsent: Vec<u64> = Vec::new();
        for frame in &self.in_flight {
            let any_byte = match failure {
                WriteFailure::SomeTls => true,
                WriteFailure::After(n) => start < n,
            };
            if any_byte {
                last_out = frame.seq;
            } else {
                unsent.push(frame.seq);
            }
            start = frame.end;
        }
        unsent.extend(self.queued.iter().map(|f| f.seq));
        self.maybe_written = last_out;
        self.in_flight.clear();
        self.queued.clear();
        self.outbox.clear();
        self.flushing = false;
        let ids: Vec<u32> =
            self.pending.iter().filter(|(_, p)| unsent.contains(&p.seq)).map(|(id, _)| *id).collect();
        ids.into_iter().filter_map(|id| self.pending.remove(&id).map(|p| (id, p))).collect()
    }

    /// The connection ended: every request still pending, each marked lost (maybe
    /// written) or unsent.
    pub(crate) fn end(&mut self) -> Vec<Ended> {
        self.dying = true;
        self.flushing = false;
        self.outbox.clear();
        self.queued.clear();
        let written = self.maybe_written;
        let mut ended: Vec<Ended> = self
            .pending
            .drain()
            .map(|(id, pending)| Ended { id, maybe_written: pending.seq <= written, pending })
            .collect();
        // Deterministic order (the map's is not): the simulator replays exactly.
        ended.sort_by_key(|e| e.pending.seq);
        ended
    }

    /// Takes the request an answer with `id` belongs to.
    pub(crate) fn answered(&mut self, id: u32) -> Option<Pending> {
        self.pending.remove(&id)
    }

    /// Takes the request `id` back if its frame is still queued — no writer has it, so
    /// not a byte of it left — and returns true; false when it is in flight, written,
    /// or unknown.
    pub(crate) fn unqueue(&mut self, id: u32) -> bool {
        let Some(at) = self.queued.iter().position(|f| f.id == id) else { return false };
        let start = if at == 0 { 0 } else { self.queued[at - 1].end };
        let len = self.queued[at].end - start;
        self.outbox.drain(start..start + len);
        self.queued.remove(at);
        for frame in &mut self.queued[at..] {
            frame.end -= len;
        }
        self.pending.remove(&id);
        true
    }

    /// Stops listening for `id` (a late answer is dropped).
    pub(crate) fn forget(&mut self, id: u32) {
        self.pending.remove(&id);
    }

    /// Points the pending request `id` at someone else (an acquire whose caller gave
    /// up becomes a late-grant watch).
    pub(crate) fn redirect(&mut self, id: u32, waiting: Waiting) -> bool {
        match self.pending.get_mut(&id) {
            Some(p) => {
                p.waiting = waiting;
                true
            }
            None => false,
        }
    }

    pub(crate) fn pending_entry(&self, id: u32) -> Option<&Pending> {
        self.pending.get(&id)
    }

    /// True when nothing arrived since `since`.
    pub(crate) fn silent_since(&self, since: Instant) -> bool {
        self.last_rx < since
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn frame(out: &mut Vec<u8>, len: usize, fill: u8) {
        out.extend(std::iter::repeat_n(fill, len));
    }

    fn op(n: u64) -> Waiting {
        Waiting::Op(OpId(n))
    }

    /// A session with `n` requests of 10 bytes queued, ids 1 to `n`.
    fn with_frames(n: u32) -> Session {
        let now = Instant::now();
        let mut s = Session::new(SessionId(1), true, true, "p".into(), now);
        for id in 1..=n {
            s.queue(id, op(u64::from(id)), now, |o| frame(o, 10, id as u8));
        }
        s
    }

    #[test]
    fn the_first_sender_writes_and_the_others_only_queue() {
        let now = Instant::now();
        let mut s = Session::new(SessionId(1), true, true, "p".into(), now);
        assert!(s.queue(1, op(1), now, |o| frame(o, 10, 1)));
        assert!(!s.queue(2, op(2), now, |o| frame(o, 10, 2)));
        let mut buf = Vec::new();
        assert!(s.take_batch(&mut buf));
        assert_eq!(buf.len(), 20);
        s.batch_written(now + Duration::from_millis(1));
        assert_eq!(s.pending_entry(1).unwrap().written_at, Some(now + Duration::from_millis(1)));
        let mut buf = Vec::new();
        assert!(!s.take_batch(&mut buf), "nothing more queued: the writer's role ends");
        assert!(s.queue(3, op(3), now, |o| frame(o, 10, 3)), "the next sender writes again");
    }

    #[test]
    fn a_failed_write_keeps_the_frames_it_reached_and_frees_the_rest() {
        let now = Instant::now();
        let mut s = with_frames(3);
        let mut buf = Vec::new();
        assert!(s.take_batch(&mut buf));
        s.queue(4, op(4), now, |o| frame(o, 10, 4));
        assert_eq!(s.pending_len(), 4);
        // 11 bytes out: frame 1 whole, one byte of frame 2.
        let unsent = s.write_failed(WriteFailure::After(11));
        assert_eq!(s.pending_len(), 2, "the unsent ones leave the session");
        let ids: Vec<u32> = unsent.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids.len(), 2);
        assert!(ids.contains(&3) && ids.contains(&4));
        let ended = s.end();
        assert_eq!(
            ended.iter().map(|e| (e.id, e.maybe_written)).collect::<Vec<_>>(),
            vec![(1, true), (2, true)]
        );
    }

    #[test]
    fn a_failed_write_that_ended_on_a_frame_boundary_did_not_start_the_next() {
        let mut s = with_frames(2);
        let mut buf = Vec::new();
        assert!(s.take_batch(&mut buf));
        let unsent = s.write_failed(WriteFailure::After(10));
        assert_eq!(unsent.iter().map(|(id, _)| *id).collect::<Vec<_>>(), vec![2]);
        assert_eq!(s.end().iter().map(|e| (e.id, e.maybe_written)).collect::<Vec<_>>(), vec![(1, true)]);
    }

    #[test]
    fn a_forgotten_request_is_no_longer_pending() {
        let mut s = with_frames(2);
        s.forget(1);
        assert!(!s.is_pending(1) && s.is_pending(2));
        assert_eq!(s.pending_len(), 1);
    }

    #[test]
    fn silent_since_means_nothing_arrived_after_that_instant() {
        let now = Instant::now();
        let s = Session::new(SessionId(1), true, true, "p".into(), now);
        assert!(!s.silent_since(now), "the welcome arrived at that instant");
        assert!(!s.silent_since(now - Duration::from_millis(1)));
        assert!(s.silent_since(now + Duration::from_millis(1)));
    }

    #[test]
    fn tls_failures_count_every_frame_of_the_batch_as_maybe_written() {
        let mut s = with_frames(2);
        let mut buf = Vec::new();
        assert!(s.take_batch(&mut buf));
        assert!(s.write_failed(WriteFailure::SomeTls).is_empty());
        assert!(s.end().iter().all(|e| e.maybe_written));
    }

    #[test]
    fn frames_still_queued_when_the_connection_ends_are_unsent() {
        let now = Instant::now();
        let mut s = Session::new(SessionId(1), true, true, "p".into(), now);
        s.queue(1, op(1), now, |o| frame(o, 10, 1));
        let mut buf = Vec::new();
        assert!(s.take_batch(&mut buf));
        s.queue(2, op(2), now, |o| frame(o, 10, 2));
        let ended = s.end();
        assert_eq!(
            ended.iter().map(|e| (e.id, e.maybe_written)).collect::<Vec<_>>(),
            vec![(1, true), (2, false)]
        );
    }

    #[test]
    fn a_queued_frame_is_taken_back_whole_and_one_in_flight_is_not() {
        let now = Instant::now();
        let mut s = Session::new(SessionId(1), true, true, "p".into(), now);
        s.queue(1, op(1), now, |o| frame(o, 10, 1));
        let mut buf = Vec::new();
        assert!(s.take_batch(&mut buf));
        s.queue(2, op(2), now, |o| frame(o, 5, 2));
        s.queue(3, op(3), now, |o| frame(o, 7, 3));
        s.queue(4, op(4), now, |o| frame(o, 3, 4));
        assert!(!s.unqueue(1), "in flight: some byte may be out");
        assert!(s.unqueue(3));
        assert!(!s.unqueue(3), "taken back once");
        assert!(!s.is_pending(3) && s.is_pending(2) && s.is_pending(4));
        s.batch_written(now);
        let mut next = Vec::new();
        assert!(s.take_batch(&mut next));
        assert_eq!(next, [vec![2u8; 5], vec![4u8; 3]].concat(), "the other frames stay whole, in order");
        assert!(!s.unqueue(4), "in flight now");
        s.queue(5, op(5), now, |o| frame(o, 4, 5));
        assert!(s.unqueue(5));
        s.batch_written(now);
        assert!(!s.take_batch(&mut next), "nothing left to write");
    }

    #[test]
    fn the_pen_is_refused_while_a_writer_exists() {
        let now = Instant::now();
        let mut s = Session::new(SessionId(1), true, true, "p".into(), now);
        assert!(s.take_pen());
        assert!(!s.queue(1, op(1), now, |o| frame(o, 10, 1)), "the pen holder writes it");
        assert!(!s.take_pen());
        let mut buf = Vec::new();
        assert!(s.take_batch(&mut buf));
        s.batch_written(now);
        assert!(!s.take_batch(&mut buf));
        assert!(s.take_pen());
    }
}
