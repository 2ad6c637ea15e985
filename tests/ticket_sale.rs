//! The ticket sale of `examples/ticket_sale.rs` against a `ticketing server` process and a throw-away PostgreSQL: the stock is never oversold and a family's seats are bought all together or not at all.
//!
//! Skips with a message when PostgreSQL is not installed, unless
//! `TICKETING_REQUIRE_POSTGRES=1` (set by `.ci/run`, which installs it).

mod common;

#[path = "../examples/ticket_sale.rs"]
#[allow(dead_code)]
mod ticket_sale;

use std::collections::BTreeSet;

use ticket_sale::{Postgres, Setup};

fn services() -> Option<(common::ServerProcess, Postgres, Setup)> {
    if ticket_sale::postgres_bin_dir().is_none() {
        let required = std::env::var("TICKETING_REQUIRE_POSTGRES").is_ok_and(|v| v == "1");
        assert!(!required, "TICKETING_REQUIRE_POSTGRES=1 but PostgreSQL is not installed");
        eprintln!("SKIPPED: PostgreSQL is not installed; `apt-get install postgresql` (.ci/run does) to run this test");
        return None;
    }
    let server = common::start_server(&[]);
    let pg = Postgres::start().expect("start PostgreSQL");
    let setup =
        Setup { addrs: vec![server.addr.to_string()], auth_token: common::TOKEN.into(), pg: pg.conn.clone() };
    Some((server, pg, setup))
}

#[test]
fn sixty_buyers_of_two_sell_exactly_the_hundred_and_never_more_than_eight_check_out_at_once() {
    let Some((_server, _pg, setup)) = services() else { return };
    let r = ticket_sale::run_sale(&setup, 7).unwrap();
    eprintln!("{r:?}");
    let each = ticket_sale::EACH as usize;
    let stock = ticket_sale::STOCK as usize;
    assert_eq!(r.bought, stock / each, "every pair of the stock was sold");
    assert_eq!(r.sold_out, ticket_sale::BUYERS - stock / each, "the rest were told it is sold out");
    assert_eq!(r.ordered, i64::from(ticket_sale::STOCK), "orders add up to the stock, never more");
    assert_eq!(r.left, 0);
    assert!(
        r.most_inside >= 1 && r.most_inside <= ticket_sale::CHECKOUTS,
        "at most the key's capacity inside: {r:?}"
    );
    let distinct: BTreeSet<_> = r.tokens.iter().collect();
    assert_eq!(distinct.len(), r.tokens.len(), "every hold has its own token");
}

#[test]
fn families_buy_four_adjacent_seats_all_or_nothing_and_no_seat_twice() {
    let Some((_server, _pg, setup)) = services() else { return };
    let first = 301;
    let r = ticket_sale::run_seats(&setup, first).unwrap();
    eprintln!("{r:?}");
    for (seat, sales) in &r.ledger {
        assert_eq!(sales.len(), 1, "seat {seat} sold once: {sales:?}");
    }
    for (who, wanted) in ticket_sale::seat_buyers(first) {
        let (got, token) = &r.bought[&who];
        assert!(got.is_empty() || *got == wanted, "{who} bought all of {wanted:?} or none, got {got:?}");
        for seat in got {
            assert_eq!(
                r.ledger[seat],
                vec![(who.clone(), *token as i64)],
                "one token for all of {who}'s seats"
            );
        }
    }
    let has = |who: &str| !r.bought[who].0.is_empty();
    // B's block overlaps only A's, the single seat is in A's block only: whichever
    // came first, exactly one of each pair bought.
    assert!(has("family-a") != has("family-b"), "exactly one of the overlapping blocks is sold: {r:?}");
    assert!(has("family-a") != has("single"), "the single seat went to A's block or to its buyer: {r:?}");
    assert!(has("family-c"), "the block nobody else wanted is bought");
    let sold: usize = r.ledger.len();
    let bought: usize = r.bought.values().map(|(got, _)| got.len()).sum();
    assert_eq!(sold, bought, "the ledger is what the buyers were told");
}
