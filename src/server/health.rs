//! What `/healthz` and `/readyz` answer: the lock-table thread runs and the Raft thread
//! turns; the node can serve or redirect.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::cluster::view::{ClusterView, Standing};

/// Clears its flag when dropped: when the thread that holds it ends, a panic included.
pub struct AliveFlag(pub Arc<AtomicBool>);

impl Drop for AliveFlag {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// A Raft thread that has not published for this long is stuck (it publishes every
/// loop turn, at least every housekeeping interval: 200 ms).
const RAFT_STUCK_MS: u64 = 2_000;

/// `/healthz`: the lock-table thread runs and, in a cluster, the Raft thread turns.
pub fn health_check(
    table_alive: Arc<AtomicBool>,
    view: Option<Arc<ClusterView>>,
) -> crate::metrics::http::Check {
    Arc::new(move || {
        if !table_alive.load(Ordering::SeqCst) {
            return Err("the lock-table thread has stopped".into());
        }
        if let Some(view) = &view {
            if let Some(why) = view.broken() {
                return Err(why);
            }
            match view.since_published_ms() {
                Some(ms) if ms <= RAFT_STUCK_MS => {}
                Some(ms) => return Err(format!("the Raft thread has not turned for {ms} ms")),
                None => return Err("the Raft thread has not started".into()),
            }
        }
        Ok(())
    })
}

/// `/readyz`: the node can serve or redirect: standalone always; in a cluster, the
/// leader, or a node that knows a leader.
pub fn ready_check(view: Option<Arc<ClusterView>>) -> crate::metrics::http::Check {
    Arc::new(move || {
        let Some(view) = &view else { return Ok(()) };
        if view.removed.load(Ordering::SeqCst) {
            return Err("this node was removed from the cluster".into());
        }
        match view.standing() {
            Standing::Member => {}
            Standing::Waiting => return Err(view.waiting_words()),
            Standing::Joining(id, addr) => {
                return Err(format!("joining the cluster led by node {id} at {addr}: not a member yet"))
            }
        }
        let facts = view.facts();
        // A live leader: this node leads, or heard from its leader within an election
        // timeout. A node that cannot campaign (a learner) keeps its last leader's id
        // when cut off; that alone would redirect clients to a leader that may be gone.
        match facts.leader_id {
            Some(_) if facts.live_leader => Ok(()),
            _ => Err(format!(
                "no leader known (role {}, term {}): this node can neither serve nor redirect",
                crate::cluster::view::role_name(facts.role),
                facts.term
            )),
        }
    })
}
