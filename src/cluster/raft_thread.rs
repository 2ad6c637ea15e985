//! The Raft thread: a mio event loop around the pure Raft core.
//!
//! It owns the core and every established peer connection. Each loop turn it reads
//! what arrived (peer frames, requests from the lock-table thread, new connections
//! from the dialer and acceptor threads), ticks the core, then handles one `Ready`:
//! sends messages, and passes commits, snapshots, read confirmations and role changes
//! to the lock-table thread. Everything proposed during a turn leaves in one
//! AppendEntries per follower (group commit).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use log::{debug, info, warn};
use mio::{Events, Interest, Poll, Token, Waker};

use super::net::PeerConn;
use super::peer::Established;
use super::view::ClusterView;
use crate::lock::codec::encode_command;
use crate::raft::{Entry, Raft, Role};
use crate::replica::ToLog;
use crate::server::lock_thread::{Clock, TableMsg};

/// The waker's token; connections use the tokens above it.
pub const WAKER: Token = Token(0);
/// Longest sleep of the loop: Raft's timers are checked at least this often.
const TICK: Duration = Duration::from_millis(10);

/// To the Raft thread.
pub enum ToRaft {
    /// From the lock-table thread.
    Log(ToLog),
    /// The lock-table thread's snapshot at `index`: Raft may drop the log up to it.
    Compact {
        index: u64,
        data: Vec<u8>,
    },
    /// A peer connection whose handshake is done. Outbound ones carry our messages to
    /// `peer`; inbound ones carry its messages to us.
    Conn {
        established: Established,
        outbound: bool,
    },
    Stop,
}

/// From the Raft thread to the lock-table thread.
pub enum FromLog {
    Appended {
        seq: u64,
        index: u64,
        term: u64,
    },
    Rejected {
        seq: u64,
    },
    Committed(Vec<Entry>),
    Snapshot {
        index: u64,
        data: Vec<u8>,
    },
    ReadReady {
        ctx: u64,
        index: u64,
    },
    ReadFailed {
        ctx: u64,
    },
    /// Leading (term, index of the term's no-op), or following `leader_addr`.
    Role {
        leading: Option<(u64, u64)>,
        leader_addr: String,
    },
}

/// Asks the dialer of a peer to (re)connect.
pub type Redial = Sender<()>;

pub struct RaftLoop {
    pub raft: Raft,
    pub poll: Poll,
    pub rx: Receiver<ToRaft>,
    pub to_table: Sender<TableMsg>,
    pub view: Arc<ClusterView>,
    pub redial: HashMap<u64, Redial>,
    pub clock: Arc<Clock>,
    conns: HashMap<Token, PeerConn>,
    outbound: HashMap<u64, Token>,
    next_token: usize,
    /// False until a peer accepted our own connection. Why: a process restarted under
    /// a used NodeId has lost its vote; peers refuse its connections, and until one
    /// accepts, it must not step any message (it could vote twice in a term).
    admitted: bool,
}

impl RaftLoop {
    pub fn new(
        raft: Raft,
        poll: Poll,
        rx: Receiver<ToRaft>,
        to_table: Sender<TableMsg>,
        view: Arc<ClusterView>,
        redial: HashMap<u64, Redial>,
        clock: Arc<Clock>,
    ) -> RaftLoop {
        RaftLoop {
            raft,
            poll,
            rx,
            to_table,
            view,
            redial,
            clock,
            conns: HashMap::new(),
            outbound: HashMap::new(),
            next_token: 1,
            admitted: false,
        }
    }

    /// Runs until `Stop` arrives or the lock-table side is gone.
    pub fn run(mut self) {
        let mut events = Events::with_capacity(256);
        for tx in self.redial.values() {
            let _ = tx.send(());
        }
        self.publish();
        loop {
            if let Err(e) = self.poll.poll(&mut events, Some(TICK)) {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    warn!("peer event loop: {e}");
                }
            }
            let now = self.clock.now_ms();
            for event in events.iter() {
                let token = event.token();
                if token == WAKER {
                    continue;
                }
                if event.is_readable() || event.is_read_closed() || event.is_error() {
                    self.on_readable(token, now);
                }
                if event.is_writable() {
                    self.flush(token);
                }
            }
            if !self.drain_requests(now) {
                return;
            }
            self.raft.tick(self.clock.now_ms());
            self.handle_ready();
        }
    }

    fn on_readable(&mut self, token: Token, now: u64) {
        let Some(conn) = self.conns.get_mut(&token) else {
            return;
        };
        let open = match conn.read_available() {
            Ok(open) => open,
            Err(e) => {
                debug!("peer {}: read: {e}", conn.peer);
                false
            }
        };
        let peer = conn.peer;
        loop {
            match conn.next_message() {
                Ok(Some(msg)) if self.admitted => self.raft.step(peer, msg, now),
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => {
                    warn!("peer {peer}: bad frame ({e}); closing the connection");
                    self.close(token);
                    return;
                }
            }
        }
        if !open {
            self.close(token);
        }
    }

    fn close(&mut self, token: Token) {
        let Some(mut conn) = self.conns.remove(&token) else {
            return;
        };
        let _ = self.poll.registry().deregister(conn.stream_mut());
        if self.outbound.get(&conn.peer) == Some(&token) {
            self.outbound.remove(&conn.peer);
            debug!("peer {}: outbound connection closed", conn.peer);
            if let Some(tx) = self.redial.get(&conn.peer) {
                let _ = tx.send(());
            }
        }
    }

    fn flush(&mut self, token: Token) {
        let Some(conn) = self.conns.get_mut(&token) else {
            return;
        };
        if let Err(e) = conn.flush() {
            debug!("peer {}: write: {e}", conn.peer);
            self.close(token);
        }
    }

    /// Handles everything queued for this thread; false means stop.
    fn drain_requests(&mut self, now: u64) -> bool {
        loop {
            match self.rx.try_recv() {
                Ok(ToRaft::Log(ToLog::Append { seq, term, command })) => {
                    let msg = if self.raft.is_leader() && self.raft.term() == term {
                        let mut data = Vec::with_capacity(64);
                        encode_command(&mut data, &command);
                        match self.raft.propose(data) {
                            Ok(index) => FromLog::Appended { seq, index, term },
                            Err(_) => FromLog::Rejected { seq },
                        }
                    } else {
                        FromLog::Rejected { seq }
                    };
                    let _ = self.to_table.send(TableMsg::Log(msg));
                }
                Ok(ToRaft::Log(ToLog::ReadIndex { ctx })) => {
                    if self.raft.read_index(ctx).is_err() {
                        let _ = self
                            .to_table
                            .send(TableMsg::Log(FromLog::ReadFailed { ctx }));
                    }
                }
                Ok(ToRaft::Compact { index, data }) => {
                    self.raft.compact(index, data);
                }
                Ok(ToRaft::Conn {
                    established,
                    outbound,
                }) => self.register(established, outbound, now),
                Ok(ToRaft::Stop) | Err(TryRecvError::Disconnected) => return false,
                Err(TryRecvError::Empty) => return true,
            }
        }
    }

    fn register(&mut self, established: Established, outbound: bool, _now: u64) {
        let Established {
            tcp,
            tls,
            leftover,
            peer,
        } = established;
        if tcp.set_nonblocking(true).is_err() {
            return;
        }
        let token = Token(self.next_token);
        self.next_token += 1;
        let mut conn = PeerConn::new(
            peer.node_id,
            mio::net::TcpStream::from_std(tcp),
            tls,
            leftover,
        );
        let interest = Interest::READABLE | Interest::WRITABLE;
        if let Err(e) = self
            .poll
            .registry()
            .register(conn.stream_mut(), token, interest)
        {
            warn!("peer {}: cannot watch the connection: {e}", peer.node_id);
            return;
        }
        self.view.learn_addr(peer.node_id, &peer.addr);
        if outbound {
            self.admitted = true;
            if let Some(old) = self.outbound.insert(peer.node_id, token) {
                self.close_quietly(old);
            }
            info!("peer {}: connected to {}", peer.node_id, peer.addr);
        }
        self.conns.insert(token, conn);
        // Data may have arrived with the handshake already.
        self.on_readable(token, self.clock.now_ms());
    }

    fn close_quietly(&mut self, token: Token) {
        if let Some(mut conn) = self.conns.remove(&token) {
            let _ = self.poll.registry().deregister(conn.stream_mut());
        }
    }

    fn handle_ready(&mut self) {
        let ready = self.raft.ready();
        let mut touched = Vec::new();
        for (to, msg) in &ready.messages {
            if let Some(&token) = self.outbound.get(to) {
                if let Some(conn) = self.conns.get_mut(&token) {
                    if conn.queue(msg) {
                        touched.push(token);
                    }
                }
            }
        }
        touched.sort_unstable();
        touched.dedup();
        for token in touched {
            self.flush(token);
        }
        if let Some(snapshot) = ready.snapshot {
            let msg = FromLog::Snapshot {
                index: snapshot.meta.index,
                data: snapshot.data,
            };
            let _ = self.to_table.send(TableMsg::Log(msg));
        }
        if !ready.committed.is_empty() {
            let _ = self
                .to_table
                .send(TableMsg::Log(FromLog::Committed(ready.committed)));
        }
        for (ctx, index) in ready.read_states {
            let _ = self
                .to_table
                .send(TableMsg::Log(FromLog::ReadReady { ctx, index }));
        }
        if let Some(change) = ready.role_changed {
            let leading =
                (change.role == Role::Leader).then(|| (change.term, self.noop_index(change.term)));
            let leader_addr = change
                .leader
                .map(|id| self.view.addr_of(id))
                .unwrap_or_default();
            info!(
                "role {:?} in term {} (leader {})",
                change.role,
                change.term,
                change
                    .leader
                    .map_or("unknown".to_string(), |l| l.to_string())
            );
            let _ = self.to_table.send(TableMsg::Log(FromLog::Role {
                leading,
                leader_addr,
            }));
        }
        if ready.removed && !self.view.removed.swap(true, Ordering::SeqCst) {
            warn!("this node is no longer a member of the cluster");
        }
        self.publish();
    }

    /// The index of the first entry of `term` in the leader's log: its no-op.
    fn noop_index(&self, term: u64) -> u64 {
        let mut index = self.raft.last_index();
        while index > self.raft.first_index() && self.raft.term_at(index - 1) == Some(term) {
            index -= 1;
        }
        index
    }

    fn publish(&self) {
        self.view.publish(&self.raft);
    }
}

/// Makes the waker for a loop's `Poll`.
pub fn waker(poll: &Poll) -> std::io::Result<Arc<Waker>> {
    Ok(Arc::new(Waker::new(poll.registry(), WAKER)?))
}
