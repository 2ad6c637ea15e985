//! Unit tests of the views' rules (`views.rs`): how long silent nodes are waited for,
//! and which row each member gets, on hand-made answers.

use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const BUDGET: Duration = Duration::from_secs(5);

#[test]
fn silent_nodes_get_the_budget_until_a_majority_answers_then_a_short_wait() {
    let t0 = Instant::now();
    // Nobody answered: the whole budget.
    assert_eq!(give_up_at(t0, BUDGET, 4, 0, &[]), t0 + BUDGET);
    // Two of four is no majority.
    assert_eq!(give_up_at(t0, BUDGET, 4, 0, &[t0 + ms(10), t0 + ms(20)]), t0 + BUDGET);
    // The third of four at 30 ms: the others get STRAGGLER_WAIT more, so the view is
    // done in well under a second.
    let third = [t0 + ms(10), t0 + ms(20), t0 + ms(30)];
    assert_eq!(give_up_at(t0, BUDGET, 4, 0, &third), t0 + ms(30) + STRAGGLER_WAIT);
    assert!(give_up_at(t0, BUDGET, 4, 0, &third) < t0 + ms(1000));
    // A majority that took 800 ms (a loaded machine): as long again, not less.
    let slow = [t0 + ms(700), t0 + ms(750), t0 + ms(800)];
    assert_eq!(give_up_at(t0, BUDGET, 4, 0, &slow), t0 + ms(1600));
    // Never past the budget.
    let late = [t0 + ms(3000), t0 + ms(3000), t0 + ms(4000)];
    assert_eq!(give_up_at(t0, BUDGET, 4, 0, &late), t0 + BUDGET);
    // A second round, after the first brought a majority: only the short wait.
    assert_eq!(give_up_at(t0, BUDGET, 4, 3, &[]), t0 + STRAGGLER_WAIT);
    // ... and one answer short of it: the first answer of this round makes it.
    assert_eq!(give_up_at(t0, BUDGET, 4, 2, &[t0 + ms(5)]), t0 + ms(5) + STRAGGLER_WAIT);
    // One node asked: it is the majority.
    assert_eq!(give_up_at(t0, BUDGET, 1, 0, &[]), t0 + BUDGET);
    assert_eq!(give_up_at(t0, BUDGET, 1, 0, &[t0 + ms(2)]), t0 + ms(2) + STRAGGLER_WAIT);
}

/// Three of five answer, one refuses, one stays silent: the silent one is named once
/// the majority answered and the short wait passed — not after the budget.
#[test]
fn a_silent_node_is_named_once_a_majority_answered_and_the_short_wait_passed() {
    let addrs: Vec<String> = ["a:1", "b:1", "c:1", "d:1", "e:1"].iter().map(|s| s.to_string()).collect();
    let ask: Ask<u32> = Arc::new(|addr: &str, budget: Duration| match addr {
        "c:1" => {
            // sleep: a node that never answers within the budget (the thread is left).
            std::thread::sleep(budget);
            Err(ClientError::NoAnswer)
        }
        "b:1" => Err(ClientError::Unavailable {
            last_error: Some("b:1: connection refused: no server listens there".into()),
            lasting: false,
        }),
        _ => Ok(7),
    });
    // A budget far longer than any test: the view must not spend it (the test would
    // hang, not pass).
    let answers = ask_each(&addrs, Duration::from_secs(3600), 5, 0, ask);
    assert_eq!(answers.len(), 5);
    for i in [0, 3, 4] {
        assert!(matches!(answers[i].reply, Ok(7)), "{}", answers[i].addr);
    }
    let refused = answers[1].reply.as_ref().err().unwrap();
    assert_eq!(refused.why, "b:1: connection refused: no server listens there");
    let silent = answers[2].reply.as_ref().err().unwrap();
    assert!(matches!(silent.error, ClientError::NoAnswer));
    assert!(silent.why.starts_with("c:1: no answer within "), "{}", silent.why);
    assert!(silent.why.ends_with("(3 of the 5 nodes answered sooner)"), "{}", silent.why);
    // It was given up on at the rule's moment: the short wait after the third answer.
    let third = answers.iter().filter(|a| a.reply.is_ok()).map(|a| a.at).max().unwrap();
    assert!(answers[2].at >= third + STRAGGLER_WAIT, "gave up before the short wait");
}

fn status(pairs: &[(&str, &str)]) -> Fields {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn answered(addr: &str, at: Instant, pairs: &[(&str, &str)]) -> Answer<Fields> {
    Answer { addr: addr.into(), reply: Ok(status(pairs)), at }
}

fn refused(addr: &str, at: Instant) -> Answer<Fields> {
    let why = format!("{addr}: connection refused: no server listens there");
    let error = ClientError::Unavailable { last_error: Some(why.clone()), lasting: false };
    Answer { addr: addr.into(), reply: Err(Unanswered { error, why }), at }
}

const CONFIG: [(&str, &str); 2] = [("voters", "1@a:1,2@b:1,3@c:1"), ("learners", "4@d:1")];

fn node(id: &str, role: &str, term: &str, leader_id: &str, leader: &str) -> Vec<(&'static str, String)> {
    vec![
        ("node_id", id.into()),
        ("role", role.into()),
        ("term", term.into()),
        ("leader_id", leader_id.into()),
        ("leader", leader.into()),
    ]
}

fn with_config(fields: Vec<(&'static str, String)>) -> Vec<(&'static str, String)> {
    let mut fields = fields;
    fields.extend(CONFIG.iter().map(|(k, v)| (*k, v.to_string())));
    fields
}

fn answer(addr: &str, at: Instant, fields: &[(&'static str, String)]) -> Answer<Fields> {
    let pairs: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    answered(addr, at, &pairs)
}

/// A running standby is a row of its own, called a standby; every member by node id.
#[test]
fn every_member_is_a_row_and_a_learner_is_a_standby() {
    let t = Instant::now();
    let answers = vec![
        answer("a:1", t, &with_config(node("1", "follower", "3", "2", "b:1"))),
        answer("b:1", t, &with_config(node("2", "leader", "3", "2", "b:1"))),
        answer("c:1", t, &with_config(node("3", "follower", "3", "2", "b:1"))),
        answer("d:1", t, &with_config(node("4", "learner", "3", "2", "b:1"))),
    ];
    let view = view_of(&answers, t);
    let rows: Vec<(&str, &str, &str)> =
        view.rows.iter().map(|r| (r.id.as_str(), r.addr.as_str(), r.role())).collect();
    assert_eq!(
        rows,
        vec![
            ("1", "a:1", "follower"),
            ("2", "b:1", "leader"),
            ("3", "c:1", "follower"),
            ("4", "d:1", "standby")
        ]
    );
    assert_eq!(view.leader, Some(1));
    assert_eq!(view.answering(), 4);
    assert_eq!(view.whose(), None);
    assert_eq!(view.source.as_ref().map(|s| s.id.as_str()), Some("2"));
}

/// After a kill -9 of node 1 and a fresh process (node 9) at its address: node 1 is
/// still a voter, so it is a row, unreachable, and node 9 is a row of its own — not
/// node 1's row filled by another process. A follower that still names node 1 its
/// leader says that leader is unreachable.
#[test]
fn a_dead_voter_whose_address_answers_as_another_process_is_unreachable() {
    let t = Instant::now();
    let answers = vec![
        answer("a:1", t, &node("9", "joining", "0", "2", "b:1")),
        answer("b:1", t, &with_config(node("2", "leader", "4", "2", "b:1"))),
        answer("c:1", t, &with_config(node("3", "follower", "3", "1", "a:1"))),
        answer("d:1", t, &with_config(node("4", "learner", "4", "2", "b:1"))),
    ];
    let view = view_of(&answers, t);
    let rows: Vec<(&str, &str)> = view.rows.iter().map(|r| (r.id.as_str(), r.role())).collect();
    assert_eq!(
        rows,
        vec![("1", "unreachable"), ("2", "leader"), ("3", "follower"), ("4", "standby"), ("9", "joining")]
    );
    let dead = view.rows[0].status.as_ref().unwrap_err();
    assert!(dead.contains("answers as node 9"), "{dead}");
    assert_eq!(view.answering(), 4);
    assert_eq!(view.leader_of(&view.rows[2]).as_deref(), Some("a:1 (unreachable)"));
    assert_eq!(view.leader_of(&view.rows[3]).as_deref(), Some("b:1"));
}

/// With the leader dead and no new one yet, the members are the most advanced node's,
/// and the view says whose; the dead leader is a row.
#[test]
fn without_a_leader_the_view_says_whose_members_it_lists() {
    let t = Instant::now();
    let answers = vec![
        refused("a:1", t),
        answer("b:1", t, &with_config(node("2", "candidate", "5", "", ""))),
        answer("c:1", t, &with_config(node("3", "follower", "4", "1", "a:1"))),
    ];
    let view = view_of(&answers, t);
    assert_eq!(view.leader, None);
    assert_eq!(view.rows.len(), 4, "d:1 is listed, and was not asked: {view:?}");
    assert_eq!(view.rows[0].role(), "unreachable");
    assert_eq!(view.rows[3].status.as_ref().unwrap_err(), "d:1: not asked");
    assert_eq!(
        view.whose().as_deref(),
        Some("no node answering leads: the members are those node 2 (candidate, term 5) lists")
    );
}

/// Addresses that are no member's: a standalone node is its own row; an address that
/// answered nothing is a row with no node id.
#[test]
fn addresses_that_are_no_members_are_rows_of_their_own() {
    let t = Instant::now();
    let standalone = vec![
        ("node_id", "1".to_string()),
        ("role", "standalone".into()),
        ("term", "0".into()),
        ("leader_id", "1".into()),
        ("leader", "s:1".into()),
        ("voters", "1@s:1".into()),
    ];
    let answers = vec![answer("s:1", t, &standalone), refused("x:1", t)];
    let view = view_of(&answers, t);
    let rows: Vec<(&str, &str, &str)> =
        view.rows.iter().map(|r| (r.id.as_str(), r.addr.as_str(), r.role())).collect();
    assert_eq!(rows, vec![("1", "s:1", "standalone"), ("-", "x:1", "unreachable")]);
    assert_eq!(view.leader, Some(0));
    assert!(view.source.is_none());
    assert_eq!(members(&status(&[("voters", "1@a:1,2@b:1"), ("learners", "7@d:1")])).len(), 3);
}
