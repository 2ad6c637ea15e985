//! The running cluster side as the server holds it: its channels and threads, what a
//! stop does first (tell the others, hand leadership over, leave), and the stop.

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::Sender;
use log::info;

use super::view::{self, ClusterView};
use crate::messages::{StopHandover, ToRaft};
use crate::raft_waker::RaftWaker;

/// What the rest of the server needs from a running cluster side.
pub struct ClusterHandles {
    pub view: Arc<ClusterView>,
    pub raft_tx: Sender<ToRaft>,
    pub waker: Arc<RaftWaker>,
    pub peer_addr: SocketAddr,
    pub threads: Vec<JoinHandle<()>>,
    /// Set when this node must not run (e.g. its NodeId was already used).
    pub fatal: Arc<Mutex<Option<String>>>,
    pub(super) stopping: Arc<AtomicBool>,
    /// Raft timing in force (ms): bounds the hand-over and the leave before a stop.
    pub(super) election_ms: u64,
    pub(super) heartbeat_ms: u64,
    /// `TICKETING_LEAVE_ON_TERMINATE`: on a stop, ask the leader to swap a standby in
    /// for this voter and wait for it (at most an election timeout).
    pub(super) leave_on_terminate: bool,
}

/// After leadership moved on a stop, the node lingers this long as a follower so that
/// the answers of what it committed leave and its clients are redirected (`M`) rather
/// than cut off.
const STOP_LINGER: Duration = Duration::from_millis(200);

impl ClusterHandles {
    /// On a stop (SIGTERM), before the threads stop: tells the other members this node
    /// stops (they never hand it leadership from then on), hands leadership over if it
    /// leads ([`ClusterHandles::hand_over_before_stop`]), then, with
    /// `TICKETING_LEAVE_ON_TERMINATE=on`, waits until a standby took its place as a
    /// voter ([`ClusterHandles::leave_before_stop`]). Each wait is bounded.
    pub fn before_stop(&self) {
        let within = Duration::from_millis(self.election_ms);
        let (tx, rx) = crossbeam_channel::bounded(1);
        let leave = self.leave_on_terminate;
        if self.raft_tx.send(ToRaft::Stopping { leave, reply: tx }).is_err() {
            return;
        }
        let _ = self.waker.wake();
        if rx.recv_timeout(within).is_err() {
            info!("the Raft thread did not answer within {} ms; stopping at once", within.as_millis());
            return;
        }
        self.hand_over_before_stop();
        if leave {
            self.leave_before_stop();
        }
    }

    /// This voter asked the leader to swap a standby in for it (`Raft::stop`): waits
    /// until it learns it was removed — a standby took its place, which the Raft thread
    /// logs with the standby's id — or until no standby may come (none, or none that
    /// is not stopping too: it stops at once, as without the setting), or at most an
    /// election timeout (2 s by default): then it stops anyway and the autopilot
    /// replaces it later, as for a crash. A leader does this after its hand-over (the
    /// new leader makes the swap); one that still leads stops without leaving.
    pub fn leave_before_stop(&self) {
        let started = std::time::Instant::now();
        let within = Duration::from_millis(self.election_ms);
        let mut waited = false;
        loop {
            if self.view.removed.load(Ordering::SeqCst) {
                return;
            }
            let facts = self.view.facts();
            // Nothing to wait for (no standby; a standby itself): as without the setting.
            if facts.role == Some(crate::raft::Role::Leader) || !facts.awaiting_replacement {
                if waited {
                    info!(
                        "no standby took this node's place in {} ms; stopping (the autopilot replaces it \
                         later)",
                        started.elapsed().as_millis()
                    );
                }
                return;
            }
            if started.elapsed() >= within {
                info!(
                    "no standby took this node's place within {} ms; stopping anyway (the autopilot \
                     replaces it later)",
                    within.as_millis()
                );
                return;
            }
            waited = true;
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// On a stop (SIGTERM): if this node leads, hands leadership to a voter that can
    /// take over and waits until another node leads, at most an election timeout and
    /// two heartbeats from the signal (the core abandons a hand-over after an election
    /// timeout); then lingers [`STOP_LINGER`]. Requests arriving meanwhile wait on the
    /// lock side and are then redirected; none is failed for the stop's sake. When no
    /// voter was heard within an election timeout over a live link, or every other
    /// voter stops too, it does not wait for a hand-over that cannot happen or would
    /// only move leadership to a node that stops. Logs what happened; true if
    /// leadership moved.
    pub fn hand_over_before_stop(&self) -> bool {
        let me_leads = |facts: &view::RaftFacts| facts.role == Some(crate::raft::Role::Leader);
        let facts = self.view.facts();
        if !me_leads(&facts) {
            return false;
        }
        // While this node leads, the leader named is itself.
        let me = facts.leader_id;
        let started = std::time::Instant::now();
        let within = Duration::from_millis(self.election_ms + 2 * self.heartbeat_ms);
        let (tx, rx) = crossbeam_channel::bounded(1);
        if self.raft_tx.send(ToRaft::StopHandover { reply: tx }).is_err() {
            return false;
        }
        let _ = self.waker.wake();
        let to = match rx.recv_timeout(within) {
            Ok(StopHandover::Started(to)) => Some(to),
            // Its own removal's hand-over is under way: wait for it the same way.
            Ok(StopHandover::Leaving) => None,
            Ok(StopHandover::NotLeader) => return false,
            Ok(StopHandover::NoneReachable) => {
                info!("no follower reachable to hand leadership to; stopping without a hand-over");
                return false;
            }
            Ok(StopHandover::OthersStopping) => {
                info!("every other voter is stopping too; stopping without a hand-over");
                return false;
            }
            Ok(StopHandover::Refused(why)) => {
                info!("leadership not passed on before stopping: {why}");
                return false;
            }
            Err(_) => {
                info!(
                    "the Raft thread did not answer within {} ms; stopping without a hand-over",
                    within.as_millis()
                );
                return false;
            }
        };
        // Moved when another node leads. Why not as soon as this node stops leading: it
        // also steps down when it loses its quorum (the target may have died since),
        // and that hands nothing over.
        let moved = loop {
            let facts = self.view.facts();
            if !me_leads(&facts) && facts.leader_id.is_some() && facts.leader_id != me {
                break true;
            }
            // Still leading and no longer handing over: the core abandoned the hand-over
            // (its target said it stops too, and no other voter could take over).
            if started.elapsed() >= within || (me_leads(&facts) && !facts.handing_over) {
                break false;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        if moved {
            std::thread::sleep(STOP_LINGER);
            info!("leadership handed over in {} ms before stopping", started.elapsed().as_millis());
            return true;
        }
        let took = started.elapsed().as_millis();
        if me_leads(&self.view.facts()) {
            let what =
                to.map_or("no other node took over".to_string(), |to| format!("node {to} did not take over"));
            info!("{what} within {took} ms; stopping without a hand-over");
        } else {
            info!("this node stopped leading but no other leader was known within {took} ms; stopping without a hand-over");
        }
        false
    }

    /// Stops the Raft thread, the peer listener and the dialers, and waits for them.
    pub fn stop(self) {
        self.stopping.store(true, Ordering::SeqCst);
        let _ = self.raft_tx.send(ToRaft::Stop);
        let _ = self.waker.wake();
        let _ = TcpStream::connect_timeout(&loopback(self.peer_addr), Duration::from_secs(1));
        for t in self.threads {
            let _ = t.join();
        }
    }
}

fn loopback(addr: SocketAddr) -> SocketAddr {
    let mut a = addr;
    if a.ip().is_unspecified() {
        a.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    a
}
