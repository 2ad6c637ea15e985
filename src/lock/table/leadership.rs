//! Gaining and losing leadership: the projection and the timers start from the
//! applied state, and go (waiters answered `M`) when another node leads.

use super::{LockTable, Output, Pooled, Projected, Reply};
use crate::lock::lines::{Lines, Want};
use crate::lock::state::LockState;
use crate::lock::timers::Timer;
use crate::proto::Response;

impl LockTable {
    /// This node now leads, with everything committed so far applied: the projection
    /// starts from the applied state and every held lease restarts with its full length
    /// (never shorter than a client could have assumed).
    pub fn become_leader(&mut self, now_ms: u64) {
        debug_assert!(!self.leading, "call lose_leadership before leading again");
        debug_assert!(self.overrides.is_empty() && self.lines.waiters() == 0 && self.pooled.is_empty());
        self.leading = true;
        self.leader_hint.clear();
        self.last_token_proposed = self.state.last_token();
        self.projected_held = self.state.keys_held();
        let timers = self
            .state
            .held_slots()
            .map(|(slot, token, lease_ms)| Timer {
                deadline_ms: now_ms + u64::from(lease_ms),
                order: token,
                id: slot.0,
            })
            .collect();
        self.leases.rebuild(timers);
        // Pooled holds: projected as applied, each lease restarted, their keys' lines
        // made with the permits in use.
        let mut pooled = Vec::new();
        for (token, hold) in self.state.pooled_holds() {
            let parts: Vec<Want<_>> =
                hold.parts.iter().map(|&(key, count, capacity)| Want { key, count, capacity }).collect();
            pooled.push((token, hold.owner, hold.lease_ms, parts));
        }
        let mut timers = Vec::with_capacity(pooled.len());
        for (token, owner, lease_ms, parts) in pooled {
            for part in &parts {
                self.lines.seed(part.key, part.capacity, part.count);
                self.override_mut(part.key);
            }
            self.state.owners_mut().retain(owner);
            let timer = self.pool_timer_tokens.len() as u32;
            self.pool_timer_tokens.push(token);
            self.pooled_parts += parts.len();
            timers.push(Timer { deadline_ms: now_ms + u64::from(lease_ms), order: token, id: timer });
            self.pooled.insert(token, Pooled { owner, parts, timer });
        }
        self.pool_leases.rebuild(timers);
        self.debug_check_invariants();
    }

    /// This node no longer leads: waiters that were never proposed get `M` with the new
    /// leader's address (if known); the projection and timers are dropped.
    pub fn lose_leadership(&mut self, leader_hint: &str, out: &mut Output) {
        self.leading = false;
        self.leader_hint = leader_hint.to_owned();
        for (_, w) in self.lines.drain() {
            let waiter = self.waiters[w as usize].take().expect("a queued waiter is live");
            self.state.owners_mut().release(waiter.owner);
            out.replies.push(Reply {
                conn: waiter.conn,
                id: waiter.id,
                response: Response::Moved { leader: leader_hint.to_owned() },
            });
        }
        self.lines = Lines::new(self.config.waiters_per_key_max);
        for (slot, ov) in std::mem::take(&mut self.overrides) {
            if let Projected::Held { owner, .. } = ov.holder {
                self.state.owners_mut().release(owner);
            }
            self.state.unpin(slot);
        }
        for (_, p) in std::mem::take(&mut self.pooled) {
            self.state.owners_mut().release(p.owner);
        }
        self.pooled_parts = 0;
        self.pool_leases.clear();
        self.pool_timer_tokens.clear();
        self.free_pool_timers.clear();
        self.waiters.clear();
        self.free_waiters.clear();
        self.leases.clear();
        self.waits.clear();
        self.conn_waiters.clear();
        self.projected_held = 0;
        self.debug_check_invariants();
    }

    /// Replaces the applied state (a follower installed a snapshot). Only a node that
    /// does not lead has no projection to keep consistent with it.
    pub fn restore(&mut self, state: LockState) {
        debug_assert!(!self.leading, "a leader never installs a snapshot");
        self.state = state;
        self.debug_check_invariants();
    }

    /// Records where the leader is while this node follows.
    pub fn set_leader_hint(&mut self, leader_hint: &str) {
        self.leader_hint = leader_hint.to_owned();
    }
}
