//! Fencing against a real PostgreSQL (docs/fencing.md): a `ticketing server` process,
//! a throw-away PostgreSQL server (initdb in a temp dir, unix socket), and the very
//! functions of `examples/fenced_postgres.rs`.
//!
//! Skips with a message when PostgreSQL is not installed, unless
//! `TICKETING_REQUIRE_POSTGRES=1` (set by `.ci/run`, which installs it), where a missing
//! PostgreSQL fails.

mod common;

#[path = "../examples/fenced_postgres.rs"]
#[allow(dead_code)]
mod fenced_postgres;

use fenced_postgres::{Outcome, Postgres, Sale, Setup, Stall, Variant};

/// The running services, or `None` (skip) when PostgreSQL is not installed.
fn services() -> Option<(common::ServerProcess, Postgres, Setup)> {
    if fenced_postgres::postgres_bin_dir().is_none() {
        let required = std::env::var("TICKETING_REQUIRE_POSTGRES").is_ok_and(|v| v == "1");
        assert!(!required, "TICKETING_REQUIRE_POSTGRES=1 but PostgreSQL is not installed");
        eprintln!(
            "SKIPPED: PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb, no initdb on PATH); \
             `apt-get install postgresql` (.ci/run does) to run this test"
        );
        return None;
    }
    let server = common::start_server(&[]);
    let pg = Postgres::start().expect("start PostgreSQL");
    let setup =
        Setup { addrs: vec![server.addr.to_string()], auth_token: common::TOKEN.into(), pg: pg.conn.clone() };
    Some((server, pg, setup))
}

fn show(outcome: &Outcome) {
    for line in &outcome.timeline {
        eprintln!("{line}");
    }
}

#[test]
fn a_stale_holder_is_rejected_and_the_seat_is_sold_once_to_b() {
    let Some((_server, _pg, setup)) = services() else { return };
    let out = fenced_postgres::run_scenario(&setup, Variant::Fenced, Stall::BeforeSale, 11).unwrap();
    show(&out);
    assert!(out.b_token > out.a_token, "B's grant came after A's: larger token");
    assert_eq!(out.b, Sale::Sold);
    assert_eq!(out.a, Sale::Rejected, "A's late write with the old token must be rejected");
    assert_eq!(out.sales, vec![("B".to_string(), out.b_token as i64)], "sold exactly once, to B");
    assert_eq!(out.sold_to.as_deref(), Some("B"));
    assert_eq!(out.fence, out.b_token as i64);
}

#[test]
fn a_stall_inside_the_fenced_transaction_still_sells_once() {
    let Some((_server, _pg, setup)) = services() else { return };
    let out = fenced_postgres::run_scenario(&setup, Variant::Fenced, Stall::AfterFenceCheck, 12).unwrap();
    show(&out);
    assert!(out.b_token > out.a_token);
    // A's transaction held the row lock; B's check waited for A's commit and then saw
    // the seat sold. A's write landed after its lease, but before any newer token had
    // written: the store stays consistent.
    assert_eq!(out.a, Sale::Sold);
    assert_eq!(out.b, Sale::AlreadySold("A".into()));
    assert!(out.sold_once(), "{:?}", out.sales);
    assert_eq!(out.sold_to.as_deref(), Some("A"));
    // B's transaction rolled back on "already sold", its fence advance with it.
    assert_eq!(out.fence, out.a_token as i64);
}

#[test]
fn the_unsafe_separate_fence_step_sells_twice() {
    let Some((_server, _pg, setup)) = services() else { return };
    let out = fenced_postgres::run_scenario(&setup, Variant::UnsafeSeparateSteps, Stall::AfterFenceCheck, 13)
        .unwrap();
    show(&out);
    assert!(out.b_token > out.a_token);
    assert_eq!(out.b, Sale::Sold);
    assert_eq!(out.a, Sale::Sold, "the stale write went through");
    assert!(!out.sold_once());
    assert_eq!(
        out.sales,
        vec![("B".to_string(), out.b_token as i64), ("A".to_string(), out.a_token as i64)],
        "two customers charged for one seat"
    );
    assert_eq!(out.sold_to.as_deref(), Some("A"), "B's customer lost the seat");
}
