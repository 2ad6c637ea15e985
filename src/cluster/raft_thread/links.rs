//! The Raft thread's peer links: connections registered, read, flushed and closed;
//! messages routed to a link, or queued for one being dialed, or dropped (and said
//! so); dialers started for the members.

use log::{debug, info, warn};
use mio::{Interest, Token};

use super::dial_queue::DialQueue;
use super::limits::{DIAL_QUEUE_BYTES_MAX, DIAL_QUEUE_MESSAGES_MAX, DROP_LOG_MS};
use super::RaftLoop;
use crate::cluster::net::PeerConn;
use crate::cluster::peer::Established;

/// Messages dropped for want of a link (no link, no dial under way, or the dial
/// failed), and for a full send queue.
static DROPPED_LOG: crate::lograte::RateLimit = crate::lograte::RateLimit::every(DROP_LOG_MS);
/// Why messages to a linked peer were dropped: its send queue is full.
pub(super) const SEND_QUEUE_FULL: &str = "its send queue is full";

impl RaftLoop {
    pub(super) fn register(&mut self, established: Established, outbound: bool, _now: u64) {
        let Established { tcp, tls, leftover, peer, .. } = established;
        if tcp.set_nonblocking(true).is_err() {
            return;
        }
        let token = Token(self.next_token);
        self.next_token += 1;
        let mut conn = PeerConn::new(peer.node_id, mio::net::TcpStream::from_std(tcp), tls, leftover);
        let interest = Interest::READABLE | Interest::WRITABLE;
        if let Err(e) = self.poll.registry().register(conn.stream_mut(), token, interest) {
            warn!("peer {}: cannot watch the connection: {e}", peer.node_id);
            return;
        }
        // Addresses are never learned from a PEER HELLO, except the one a configured
        // peer named as the leader: that binds the vouched address to its node id, so a
        // joining node can answer the leader that adds it.
        let config_known = !self.raft.membership().all_nodes().is_empty();
        if !outbound && !config_known && self.view.is_vouched(peer.node_id, &peer.addr) {
            self.vouched_ids.insert(peer.node_id);
            self.view.learn_addr(peer.node_id, &peer.addr);
        }
        if outbound {
            self.admitted = true;
            if let Some(old) = self.outbound.insert(peer.node_id, token) {
                self.close_quietly(old);
            }
            self.dialing.remove(&peer.node_id);
            if let Some(queue) = self.waiting.remove(&peer.node_id) {
                if !conn.queue_encoded(&queue.frames) {
                    self.dropped(peer.node_id, queue.count, SEND_QUEUE_FULL);
                }
            }
            self.view.set_link_up(peer.node_id, true);
            info!("peer {}: connected to {}", peer.node_id, peer.addr);
        }
        self.conns.insert(token, conn);
        // Data may have arrived with the handshake already.
        self.on_readable(token, self.clock.now_ms(), true);
    }

    /// Reads and steps what `token`'s connection has brought; `drain`: read until the
    /// socket has nothing (see `PeerConn::read_available`).
    pub(super) fn on_readable(&mut self, token: Token, now: u64, drain: bool) {
        let Some(peer) = self.conns.get(&token).map(|c| c.peer) else {
            return;
        };
        let Some(conn) = self.conns.get_mut(&token) else {
            return;
        };
        let mut open = match conn.read_available(drain) {
            Ok(open) => open,
            Err(e) => {
                debug!("peer {peer}: read: {e}");
                false
            }
        };
        let mut msgs = Vec::new();
        loop {
            match conn.next_message() {
                Ok(Some(msg)) => msgs.push(msg),
                Ok(None) => break,
                Err(e) => {
                    warn!("peer {peer}: bad frame ({e}); closing the connection");
                    open = false;
                    break;
                }
            }
        }
        // Judged message by message: a vote may make the next message of a stranger
        // acceptable, a leader heard may make it not.
        for msg in msgs {
            if self.may_step(peer, token, &msg) {
                self.raft.step(peer, msg, now);
            }
        }
        if !open {
            self.close(token);
        }
    }

    /// The newest connection `peer` opened to us, if any: answers to a stranger go
    /// back on it.
    fn inbound_of(&self, peer: u64) -> Option<Token> {
        self.conns
            .iter()
            .filter(|(t, c)| c.peer == peer && self.outbound.get(&peer) != Some(*t))
            .map(|(t, _)| *t)
            .max()
    }

    fn close(&mut self, token: Token) {
        let Some(mut conn) = self.conns.remove(&token) else {
            return;
        };
        let _ = self.poll.registry().deregister(conn.stream_mut());
        if self.outbound.get(&conn.peer) == Some(&token) {
            self.outbound.remove(&conn.peer);
            self.view.set_link_up(conn.peer, false);
            debug!("peer {}: outbound connection closed", conn.peer);
            if let Some(tx) = self.redial.get(&conn.peer) {
                if tx.send(()).is_ok() {
                    self.dialing.insert(conn.peer);
                }
            }
        }
    }

    pub(super) fn close_quietly(&mut self, token: Token) {
        if let Some(mut conn) = self.conns.remove(&token) {
            let _ = self.poll.registry().deregister(conn.stream_mut());
        }
    }

    pub(super) fn flush(&mut self, token: Token) {
        let Some(conn) = self.conns.get_mut(&token) else {
            return;
        };
        if let Err(e) = conn.flush() {
            debug!("peer {}: write: {e}", conn.peer);
            self.close(token);
        }
    }

    /// Sends `msg` to `to`: on our link to it, or into the queue of the dial under way
    /// (starting one if we know its address and no dialer runs), or drops it and says
    /// so (rate-limited). Returns the link's token when something was queued on it.
    pub(super) fn route(&mut self, to: u64, msg: &crate::raft::Message, now: u64) -> Option<Token> {
        self.last_used.insert(to, now);
        if let Some(&token) = self.outbound.get(&to) {
            let conn = self.conns.get_mut(&token)?;
            if conn.queue(msg) {
                return Some(token);
            }
            self.dropped(to, 1, SEND_QUEUE_FULL);
            return None;
        }
        if !self.redial.contains_key(&to) && !self.dial(to) {
            // A stranger asking for our vote: answer on the connection it opened
            // (never dial an address it claims).
            if let Some(token) = self.inbound_of(to) {
                let conn = self.conns.get_mut(&token)?;
                if conn.queue(msg) {
                    return Some(token);
                }
            }
            self.dropped(to, 1, "no link and no known address");
            return None;
        }
        if !self.dialing.contains(&to) {
            self.dropped(to, 1, "no link (the dialer is backing off)");
            return None;
        }
        let queue =
            self.waiting.entry(to).or_insert_with(|| DialQueue { since_ms: now, ..Default::default() });
        let before = queue.frames.len();
        let fits = queue.count < DIAL_QUEUE_MESSAGES_MAX
            && crate::raft::wire::encode(msg, &mut queue.frames).is_ok()
            && queue.frames.len() <= DIAL_QUEUE_BYTES_MAX;
        if fits {
            queue.count += 1;
        } else {
            queue.frames.truncate(before);
            self.dropped(to, 1, "the queue for its link being dialed is full");
        }
        None
    }

    /// Starts a dialer for `id` if its address is known (configuration, member
    /// records, `admin replace`; never a PEER HELLO). True if one runs now.
    pub(super) fn dial(&mut self, id: u64) -> bool {
        if id == self.raft.id() {
            return false;
        }
        if self.redial.contains_key(&id) {
            return true;
        }
        let addr = self.view.addr_of(id);
        if addr.is_empty() {
            return false;
        }
        match self.kit.spawn(id, &addr) {
            Ok(tx) => {
                self.redial.insert(id, tx);
                self.dialing.insert(id);
                true
            }
            Err(e) => {
                warn!("cannot start a dialer for node {id}: {e}");
                false
            }
        }
    }

    /// A new leader must reach every member at once: a dialer backing off (a member
    /// that refused an early attempt, such as a standby that did not know the
    /// configuration naming this node yet) tries again now instead of after its backoff.
    pub(super) fn dial_now_unlinked(&mut self) {
        for id in self.members() {
            if self.outbound.contains_key(&id) {
                continue;
            }
            if let Some(tx) = self.redial.get(&id) {
                if tx.send(()).is_ok() {
                    self.dialing.insert(id);
                }
            }
        }
    }

    /// A dialer's attempt started or failed. A failed attempt drops what waited for it.
    pub(super) fn on_dial(&mut self, peer: u64, started: bool) {
        if started {
            if !self.outbound.contains_key(&peer) && self.redial.contains_key(&peer) {
                self.dialing.insert(peer);
            }
            return;
        }
        self.dialing.remove(&peer);
        if let Some(queue) = self.waiting.remove(&peer) {
            self.dropped(peer, queue.count, "the dial failed");
        }
    }

    /// Drops queues whose oldest message waited half an election timeout.
    pub(super) fn expire_waiting(&mut self, now: u64) {
        if self.waiting.is_empty() {
            return;
        }
        let age_max = self.raft.config().election_ms / 2;
        let expired: Vec<u64> =
            self.waiting.iter().filter(|(_, q)| now >= q.since_ms + age_max).map(|(id, _)| *id).collect();
        for id in expired {
            if let Some(queue) = self.waiting.remove(&id) {
                self.dropped(id, queue.count, "its link took too long to dial");
            }
        }
    }

    /// Messages dropped: Raft takes it as network loss and sends again. For want of a
    /// link it is routine (a peer stopping, restarting, or not yet knowing this node:
    /// the dialer says why when that lasts), logged at debug; a full send queue is a
    /// peer too slow to keep up, a warning.
    pub(super) fn dropped(&self, to: u64, count: usize, why: &str) {
        if count == 0 {
            return;
        }
        if why == SEND_QUEUE_FULL {
            crate::warn_limited!(DROPPED_LOG, "{count} message(s) to node {to} dropped: {why}");
        } else {
            debug!("{count} message(s) to node {to} dropped: {why}");
        }
    }

    /// Dials the members of the active and committed configurations that have no
    /// dialer yet, if those changed since the last call.
    pub(super) fn dial_members_if_changed(&mut self) {
        if !self.dial_watch.changed(&self.raft) {
            return;
        }
        let mut members = self.members();
        members.extend(self.raft.committed_membership().1.all_nodes());
        if members == self.dialed_for {
            return;
        }
        for &id in &members {
            self.dial(id);
        }
        self.dialed_for = members;
    }
}
