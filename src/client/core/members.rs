//! Which addresses the client dials (docs/client.md, "Seeds and discovery"): the slots
//! follow the voter set a leader's STATUS reports ([`Net::reconcile`]) — one per voter
//! (two when there is one), keyed by the node id of its last WELCOME, so a seed that
//! reaches a voter under another name keeps serving it. Slots of nodes that left are
//! retired: no new requests, their session closed once nothing is pending on it (or
//! after [`RETIRE_GRACE`]). With nothing reachable for [`SEED_FALLBACK_AFTER`], the
//! seeds are dialed again.

use std::time::{Duration, Instant};

use super::ids::SessionId;
use super::net::{Net, Slot};
use super::routing::LEARNED_ADDRS_MAX;
use crate::proto::addr::host_of;

/// With no connection up for this long, the seeds are dialed again (the membership the
/// client learned may be gone as a whole).
pub const SEED_FALLBACK_AFTER: Duration = Duration::from_secs(5);
/// A retired slot's session is closed once nothing is pending on it, or — when its node
/// left the voter set — after this.
pub const RETIRE_GRACE: Duration = Duration::from_secs(5);

impl Net {
    /// Makes the slots follow the voter set `voters` (node id, client address) that a
    /// leader's STATUS reported: one slot per voter (two when there is one), a slot kept
    /// when its address is the voter's or its last WELCOME came from that voter; every
    /// other slot retired; missing voters dialed.
    pub(crate) fn reconcile(&mut self, voters: &[(u64, String)], now: Instant) {
        if voters.is_empty() || self.stopped {
            return;
        }
        // Nodes of two clusters: one leader's voter set must not retire the other
        // cluster's connections, or the disagreement would drop out of sight
        // (`domains.rs`).
        if self.domain_conflict().is_some_and(|c| c.lasting) {
            return;
        }
        let per_voter = if voters.len() == 1 { 2 } else { 1 };
        let mut count = vec![0usize; voters.len()];
        let by_addr = |slot: &Slot| voters.iter().position(|(_, a)| *a == slot.addr);
        let by_node = |slot: &Slot| voters.iter().position(|(id, _)| slot.node != 0 && *id == slot.node);
        // Slots on a voter's own address first, so they win over aliases.
        let mut order: Vec<usize> = (0..self.slots.len()).filter(|&i| !self.slots[i].retired()).collect();
        order.sort_by_key(|&i| by_addr(&self.slots[i]).is_none());
        let mut retire = Vec::new();
        for i in order {
            match by_addr(&self.slots[i]).or_else(|| by_node(&self.slots[i])) {
                Some(v) if count[v] < per_voter => count[v] += 1,
                // A second slot to a node that is still a voter: what it carries is
                // answered in time, so its session closes once nothing is pending.
                Some(_) => retire.push((i, false)),
                // A seed that has not reported its domain stays: it must be compared
                // before it can be dropped (`domains.rs`).
                None if self.slots[i].seed && self.slots[i].domain == 0 => {}
                None => retire.push((i, true)),
            }
        }
        for (i, left) in retire {
            let slot = &mut self.slots[i];
            log::debug!(
                "{}: {}",
                if left { "no longer a member" } else { "a second slot to a voter" },
                slot.addr
            );
            slot.retired_at = Some(now);
            slot.left = left;
            slot.next_dial = None;
            if let Some(s) = slot.session.as_ref().filter(|s| s.pending_len() == 0).map(|s| s.id) {
                self.kill(s);
            }
        }
        self.forget_ended_slots();
        for (v, (_, addr)) in voters.iter().enumerate() {
            for _ in count[v]..per_voter {
                if self.learned() >= LEARNED_ADDRS_MAX {
                    return;
                }
                if host_of(addr).is_none() {
                    break;
                }
                self.add_slot(addr.clone(), false, now);
            }
        }
        self.dial_due(now);
    }

    /// Closes the sessions of retired slots once nothing is pending on them or their
    /// grace ran out; dials the seeds again when nothing has been reachable for
    /// [`SEED_FALLBACK_AFTER`].
    pub(crate) fn housekeeping(&mut self, now: Instant) {
        self.domains_housekeeping(now);
        self.reprobe_due(now);
        let mut kill = Vec::new();
        for slot in &self.slots {
            if let (Some(at), Some(s)) = (slot.retired_at, slot.live()) {
                if s.pending_len() == 0 || (slot.left && now.saturating_duration_since(at) >= RETIRE_GRACE) {
                    kill.push(s.id);
                }
            }
        }
        for id in kill {
            self.kill(id);
        }
        if self.any_live() {
            self.last_live = now;
        } else if !self.stopped && now.saturating_duration_since(self.last_live) >= SEED_FALLBACK_AFTER {
            for addr in self.seeds.clone() {
                if !self.slots.iter().any(|s| !s.retired() && s.addr == addr) {
                    log::info!("no connection for {SEED_FALLBACK_AFTER:?}: dialing the seed {addr} again");
                    self.add_slot(addr, true, now);
                }
            }
            self.last_live = now;
        }
        self.dial_due(now);
    }

    /// When [`Net::housekeeping`] next has something to do.
    pub(crate) fn next_housekeeping(&self) -> Option<Instant> {
        let retire = self
            .slots
            .iter()
            .filter(|s| s.left && s.live().is_some())
            .filter_map(|s| s.retired_at.map(|at| at + RETIRE_GRACE))
            .min();
        let fallback = (!self.stopped && !self.any_live()).then_some(self.last_live + SEED_FALLBACK_AFTER);
        [retire, fallback, self.next_dial(), self.next_domains_change(), self.next_reprobe()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Stops dialing and closes every session (the client shut down).
    pub(crate) fn stop(&mut self, now: Instant) {
        self.stopped = true;
        let ids: Vec<SessionId> =
            self.slots.iter().filter_map(|s| s.session.as_ref()).map(|s| s.id).collect();
        for id in ids {
            self.kill(id);
        }
        for slot in &mut self.slots {
            slot.next_dial = None;
            slot.retired_at.get_or_insert(now);
        }
        self.forget_ended_slots();
    }

    /// Each address tried and not connected now, with why its last attempt failed (an
    /// address with a connection up is connected, whatever its second slot's dial).
    pub(crate) fn connection_errors(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        let up: Vec<&str> =
            self.slots.iter().filter(|s| s.live().is_some()).map(|s| s.addr.as_str()).collect();
        for slot in &self.slots {
            if out.iter().any(|(a, _)| *a == slot.addr) || up.contains(&slot.addr.as_str()) {
                continue;
            }
            if let Some(e) = slot.last_error.as_ref().or(slot.note.as_ref().filter(|_| slot.dialing)) {
                out.push((slot.addr.clone(), e.clone()));
            }
        }
        out
    }

    /// The addresses dialed now.
    pub(crate) fn dialed(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for slot in self.slots.iter().filter(|s| !s.retired()) {
            if !out.contains(&slot.addr) {
                out.push(slot.addr.clone());
            }
        }
        out
    }
}

#[cfg(test)]
#[path = "members_tests.rs"]
mod tests;
