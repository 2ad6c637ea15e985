//! The supervisor thread (`ticketing-watch`): finds sessions that stopped answering
//! and keeps the slots in line with the cluster's membership (docs/client.md).
//!
//! Every [`SUPERVISE_TICK`]:
//! - a session that received nothing for the idle-PING interval (default
//!   [`IDLE_PING_DEFAULT`]) is sent a PING; if no frame at all arrives within
//!   [`PING_ANSWER_TIMEOUT`] of that PING, the session is closed (its slot redials).
//!   Why: a frozen or partitioned node never closes its sockets, so without this a
//!   client would keep sending to it;
//! - after a leader change (and every [`MEMBERSHIP_REFRESH`] at least) it asks STATUS
//!   of the leader (or any node), points routing at the leader it names and reconciles
//!   the slots with its voter set; while no leader is known it asks again every
//!   [`LEADER_UNKNOWN_RETRY`];
//! - retired slots' sessions are closed once nothing is pending on them;
//! - with nothing reachable for a while, the seeds are dialed again.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, RecvTimeoutError};

use super::conn::{us_since, Reply, Session, Waiter};
use super::pool::{Pool, RETIRE_GRACE};
use crate::proto::frame::{encode_request, Request, Response};

/// How often the supervisor looks at the sessions.
pub const SUPERVISE_TICK: Duration = Duration::from_millis(100);
/// Default time a session may receive nothing before it is PINGed.
pub const IDLE_PING_DEFAULT: Duration = Duration::from_secs(1);
/// A PING's answer (or any frame) must arrive within this, or the session is closed.
pub const PING_ANSWER_TIMEOUT: Duration = Duration::from_millis(1500);
/// The membership is read from STATUS at least this often.
pub const MEMBERSHIP_REFRESH: Duration = Duration::from_secs(30);
/// While no leader is known, STATUS is asked this often.
pub const LEADER_UNKNOWN_RETRY: Duration = Duration::from_millis(500);
/// A STATUS of the supervisor unanswered this long is given up.
const STATUS_TIMEOUT: Duration = Duration::from_secs(2);
/// Two STATUS requests of the supervisor are at least this far apart.
const STATUS_SPACING: Duration = Duration::from_millis(200);

pub(crate) fn run_supervisor(pool: Arc<Pool>) {
    let (answers_tx, answers) = unbounded::<(u32, Reply)>();
    let mut in_flight: Option<(Arc<Session>, u32, Instant)> = None;
    let mut last_sent: Option<Instant> = None;
    let mut last_refresh: Option<Instant> = None;
    let mut turn = 0usize;
    let mut frame = Vec::with_capacity(16);
    while !pool.is_shut_down() {
        match answers.recv_timeout(SUPERVISE_TICK) {
            Ok((id, reply)) => {
                if let Some((session, _, _)) = in_flight.as_ref().filter(|(_, current, _)| *current == id) {
                    let session = Arc::clone(session);
                    in_flight = None;
                    if let Reply::Answer(Response::Status { text }) = reply {
                        apply_status(&pool, &session, &text);
                        last_refresh = Some(Instant::now());
                    }
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        let now = Instant::now();
        let sessions = pool.sessions();
        if !sessions.is_empty() {
            pool.note_live();
        }
        watch_sessions(&pool, &sessions, now);
        for slot in pool.retired_slots() {
            if let Some(session) = slot.live() {
                if session.pending_len() == 0 || slot.retired_for().is_some_and(|t| t >= RETIRE_GRACE) {
                    session.kill();
                }
            }
        }
        if let Some((session, id, sent)) = &in_flight {
            if now.duration_since(*sent) >= STATUS_TIMEOUT || session.is_dead() {
                session.forget(*id);
                in_flight = None;
            }
        }
        if in_flight.is_none() && last_sent.is_none_or(|t| now.duration_since(t) >= STATUS_SPACING) {
            let route = pool.route();
            let leader_live = sessions.iter().any(|(slot, s)| {
                s.leads() || route.hint.as_ref().is_some_and(|h| *h == slot.addr || *h == s.peer.to_string())
            });
            let cluster = sessions.iter().any(|(_, s)| !s.is_standalone());
            let due = pool.refresh_due.load(Ordering::Acquire)
                || last_refresh.is_none_or(|t| now.duration_since(t) >= MEMBERSHIP_REFRESH)
                || (!leader_live && last_sent.is_none_or(|t| now.duration_since(t) >= LEADER_UNKNOWN_RETRY));
            if cluster && due {
                if let Some(session) = status_target(&pool, &sessions, &mut turn) {
                    frame.clear();
                    encode_request(&mut frame, 1, &Request::Status);
                    pool.refresh_due.store(false, Ordering::Release);
                    last_sent = Some(now);
                    if let Ok((id, _)) =
                        session.try_send(&pool.ids, Waiter::Worker(answers_tx.clone()), &mut frame)
                    {
                        in_flight = Some((session, id, now));
                    }
                }
            }
        }
        if sessions.is_empty() {
            pool.fall_back_to_seeds();
        }
    }
}

/// PINGs idle sessions and closes those whose PING went unanswered.
fn watch_sessions(pool: &Pool, sessions: &[(Arc<super::pool::Slot>, Arc<Session>)], now: Instant) {
    let now_us = us_since(pool.epoch, now);
    let idle_us = pool.idle_ping.as_micros() as u64;
    for (slot, session) in sessions {
        let rx = session.last_rx_us();
        let ping = session.ping_at_us();
        if ping != 0 {
            if rx >= ping {
                session.clear_ping();
            } else if now_us.saturating_sub(ping) >= PING_ANSWER_TIMEOUT.as_micros() as u64 {
                log::warn!(
                    "{} ({}) answered nothing for {PING_ANSWER_TIMEOUT:?} after a PING; reconnecting",
                    slot.addr,
                    session.peer
                );
                session.kill();
                if session.leads() || pool.hint().is_some_and(|h| h == slot.addr) {
                    pool.refresh_due.store(true, Ordering::Release);
                }
                continue;
            }
        }
        if session.ping_at_us() == 0 && now_us.saturating_sub(rx) >= idle_us {
            session.ping(&pool.ids);
        }
    }
}

/// Where to ask STATUS: the leader's session if it is up, else the others in turn.
fn status_target(
    pool: &Pool,
    sessions: &[(Arc<super::pool::Slot>, Arc<Session>)],
    turn: &mut usize,
) -> Option<Arc<Session>> {
    let hint = pool.hint();
    let leader = sessions.iter().find(|(slot, s)| {
        hint.as_ref().is_some_and(|h| *h == slot.addr || *h == s.peer.to_string()) && s.leads()
    });
    if let Some((_, s)) = leader {
        return Some(Arc::clone(s));
    }
    let others: Vec<&Arc<Session>> = sessions.iter().map(|(_, s)| s).filter(|s| !s.is_standalone()).collect();
    if others.is_empty() {
        return None;
    }
    *turn += 1;
    Some(Arc::clone(others[*turn % others.len()]))
}

/// Acts on a STATUS text: the leader it names, and its voter set.
fn apply_status(pool: &Arc<Pool>, session: &Session, text: &str) {
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name).and_then(|v| v.strip_prefix('=')))
            .unwrap_or("")
            .trim()
    };
    match field("role") {
        "standalone" | "" => {}
        "leader" => {
            session.set_leads(true);
            pool.set_hint(Some(&session.addr));
            // Only the leader's voter set is taken: a follower's or a new learner's may
            // lag behind a change, and acting on it would drop a live member.
            pool.reconcile(&parse_members(field("voters")));
        }
        _ => {
            session.set_leads(false);
            let leader = field("leader");
            if !leader.is_empty() {
                // Ask the leader itself next (its STATUS carries the membership).
                pool.set_hint(Some(leader));
            }
        }
    }
}

/// `id@addr,id@addr` into pairs; malformed entries are skipped.
pub(crate) fn parse_members(list: &str) -> Vec<(u64, String)> {
    list.split(',')
        .filter_map(|member| {
            let (id, addr) = member.trim().split_once('@')?;
            let id = id.parse::<u64>().ok().filter(|id| *id != 0)?;
            super::builder::host_of(addr)?;
            Some((id, addr.to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_lists_parse_and_skip_garbage() {
        assert_eq!(
            parse_members("1@127.0.0.1:5225,2@h:1"),
            vec![(1, "127.0.0.1:5225".to_owned()), (2, "h:1".to_owned())]
        );
        assert_eq!(parse_members(""), vec![]);
        assert_eq!(parse_members("x@h:1,0@h:2,3@nohost,4@h:5"), vec![(4, "h:5".to_owned())]);
    }
}
