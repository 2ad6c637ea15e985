//! A ticket sale against a real PostgreSQL: buyers take 2 of 100 tickets through a stock key, and families hold 4 adjacent seats, all or nothing.
//!
//! ```sh
//! cargo run --release --example ticket_sale
//! ```
//!
//! Configuration as in `examples/fenced_postgres.rs`: none starts an in-process
//! standalone Ticketing node and a throw-away PostgreSQL; `TICKETING_ADDRS` +
//! `TICKETING_AUTH_TOKEN` and `FENCE_PG` point it at your own.
//!
//! **The stock.** 60 buyers want 2 tickets each of a sale of 100. Each takes one of
//! the 8 permits of the key `checkout:<sale>` (a key of capacity 8: at most 8 checkouts
//! run at once, the rest wait in arrival order and are told their place in line), then
//! decrements the stock in PostgreSQL with the store's own conditional write (the
//! decrement happens only while 2 are left, in the same statement) and records the
//! order with the hold's token. 50 buyers get 2 tickets, 10 are told it is sold out,
//! and nothing is oversold even if a checkout outlived its lease.
//!
//! **The seats.** Each seat is a key of capacity 1. Three families each hold the keys
//! of 4 adjacent seats in ONE hold (granted all at once or not at all, one token for
//! the 4), two of them overlapping and naming their seats in opposite orders (no
//! deadlock), while a single buyer takes one seat of the first family's block with a
//! plain acquire. Each writer fences every seat row it writes with its token, in one
//! transaction: a family buys all 4 seats or none.
//!
//! `tests/ticket_sale.rs` includes this file and runs both against a real
//! `ticketing server` process and a real PostgreSQL server. docs/fencing.md §2.1 shows
//! the SQL.

#[path = "fenced_postgres.rs"]
#[allow(dead_code)]
mod fenced_postgres;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

pub use fenced_postgres::{fence_value, postgres_bin_dir, BoxError, Postgres, Setup};
use ticketing::client::{Client, Lock};

/// The extra tables: a stock row per sale and its orders.
pub const SCHEMA: &str = include_str!("ticket_sale.sql");

/// The sale's conditional decrement: 0 rows when fewer than $2 are left.
pub const SQL_TAKE: &str =
    "UPDATE stock SET left_count = left_count - $2 WHERE sale_id = $1 AND left_count >= $2 RETURNING left_count";
/// The order, recorded in the same transaction with the hold's token.
pub const SQL_ORDER: &str = "INSERT INTO orders (sale_id, buyer, count, token) VALUES ($1, $2, $3, $4)";

/// Tickets on sale.
pub const STOCK: i32 = 100;
/// Tickets each buyer wants.
pub const EACH: i32 = 2;
/// Buyers: more than the stock serves.
pub const BUYERS: usize = 60;
/// Checkouts at once: the capacity of the sale's key.
pub const CHECKOUTS: u32 = 8;
/// A checkout's lease, and how long a buyer waits in line.
pub const LEASE: Duration = Duration::from_secs(30);
pub const WAIT: Duration = Duration::from_secs(120);

/// What the stock sale did.
#[derive(Debug)]
pub struct SaleReport {
    /// Buyers who got their tickets, and those told it was sold out.
    pub bought: usize,
    pub sold_out: usize,
    /// Tickets in the orders table, and left in the stock row.
    pub ordered: i64,
    pub left: i32,
    /// The most checkouts that were inside at once, as the buyers counted them.
    pub most_inside: u32,
    /// Buyers told their place in line at least once.
    pub told_place: u32,
    /// The tokens of the orders, in the order they were written.
    pub tokens: Vec<i64>,
}

fn client(setup: &Setup, owner: &str) -> Result<Client, BoxError> {
    Ok(Client::builder().addrs(setup.addrs.clone()).auth_token(&setup.auth_token).owner(owner).build()?)
}

/// Runs the stock sale `sale` (the stock row is reset to [`STOCK`]): [`BUYERS`]
/// threads, one client each, every buyer asking for its place in line.
pub fn run_sale(setup: &Setup, sale: i32) -> Result<SaleReport, BoxError> {
    let mut db = postgres::Client::connect(&setup.pg, postgres::NoTls)?;
    db.batch_execute(SCHEMA)?;
    db.execute(
        "INSERT INTO stock (sale_id, left_count) VALUES ($1, $2) ON CONFLICT (sale_id) DO UPDATE SET left_count = $2",
        &[&sale, &STOCK],
    )?;
    db.execute("DELETE FROM orders WHERE sale_id = $1", &[&sale])?;
    let key = format!("checkout:{sale}");
    let inside = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let told = Arc::new(AtomicU32::new(0));
    let start = Arc::new(Barrier::new(BUYERS));
    let buyers: Vec<_> = (0..BUYERS)
        .map(|i| {
            let (setup, key, inside, most, told, start) =
                (setup.clone(), key.clone(), inside.clone(), most.clone(), told.clone(), start.clone());
            std::thread::spawn(move || -> Result<bool, BoxError> {
                let who = format!("buyer-{i}");
                let tickets = client(&setup, &who)?;
                let mut db = postgres::Client::connect(&setup.pg, postgres::NoTls)?;
                let first = AtomicU32::new(0);
                let counted = told.clone();
                start.wait();
                let hold = tickets
                    .hold(LEASE, WAIT)
                    .permits(&key, 1, CHECKOUTS)
                    .on_place(move |_place| {
                        if first.swap(1, Ordering::Relaxed) == 0 {
                            counted.fetch_add(1, Ordering::Relaxed);
                        }
                    })
                    .acquire()?;
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                // The checkout: the payment provider takes a moment.
                std::thread::sleep(Duration::from_millis(5));
                let bought = checkout(&mut db, sale, &who, &hold);
                inside.fetch_sub(1, Ordering::SeqCst);
                hold.release()?;
                bought
            })
        })
        .collect();
    let mut report = SaleReport {
        bought: 0,
        sold_out: 0,
        ordered: 0,
        left: 0,
        most_inside: 0,
        told_place: 0,
        tokens: Vec::new(),
    };
    for buyer in buyers {
        match buyer.join().map_err(|_| "a buyer thread panicked")?? {
            true => report.bought += 1,
            false => report.sold_out += 1,
        }
    }
    report.most_inside = most.load(Ordering::SeqCst);
    report.told_place = told.load(Ordering::SeqCst);
    report.left = db.query_one("SELECT left_count FROM stock WHERE sale_id = $1", &[&sale])?.get(0);
    for row in db.query("SELECT count, token FROM orders WHERE sale_id = $1 ORDER BY id", &[&sale])? {
        report.ordered += i64::from(row.get::<_, i32>(0));
        report.tokens.push(row.get(1));
    }
    Ok(report)
}

/// One checkout under a permit: the conditional decrement and the order, one
/// transaction. `false`: sold out, nothing written.
fn checkout(db: &mut postgres::Client, sale: i32, who: &str, hold: &Lock) -> Result<bool, BoxError> {
    let mut tx = db.transaction()?;
    if tx.query_opt(SQL_TAKE, &[&sale, &EACH])?.is_none() {
        return Ok(false); // dropping tx rolls back
    }
    tx.execute(SQL_ORDER, &[&sale, &who, &EACH, &fence_value(hold.token())])?;
    tx.commit()?;
    Ok(true)
}

/// Who wants which seats: three families of 4 adjacent seats (the first two
/// overlapping, named in opposite orders) and one buyer of a single seat.
pub fn seat_buyers(first: i32) -> Vec<(String, Vec<i32>)> {
    vec![
        ("family-a".into(), (first..first + 4).collect()),
        ("family-b".into(), (first + 2..first + 6).rev().collect()),
        ("family-c".into(), (first + 6..first + 10).collect()),
        ("single".into(), vec![first + 1]),
    ]
}

/// What the seat sale did: per buyer, the seats bought (all it asked for, or none) and
/// the token it wrote them with; the ledger per seat.
#[derive(Debug)]
pub struct SeatReport {
    pub bought: BTreeMap<String, (Vec<i32>, u64)>,
    pub ledger: BTreeMap<i32, Vec<(String, i64)>>,
}

/// Runs the seat sale over the seats `first..first + 10` (reset to unsold): every
/// buyer at once, each with its own client, holding all its seats' keys in one hold.
pub fn run_seats(setup: &Setup, first: i32) -> Result<SeatReport, BoxError> {
    let mut db = postgres::Client::connect(&setup.pg, postgres::NoTls)?;
    for seat in first..first + 10 {
        fenced_postgres::reset_seat(&mut db, seat)?;
    }
    let buyers = seat_buyers(first);
    let start = Arc::new(Barrier::new(buyers.len()));
    let bought = Arc::new(Mutex::new(BTreeMap::new()));
    let threads: Vec<_> = buyers
        .into_iter()
        .map(|(who, seats)| {
            let (setup, start, bought) = (setup.clone(), start.clone(), bought.clone());
            std::thread::spawn(move || -> Result<(), BoxError> {
                let tickets = client(&setup, &who)?;
                let mut db = postgres::Client::connect(&setup.pg, postgres::NoTls)?;
                start.wait();
                let lock = if let [seat] = seats[..] {
                    tickets.acquire(&format!("seat:{seat}"), LEASE, WAIT)?
                } else {
                    let mut hold = tickets.hold(LEASE, WAIT);
                    for seat in &seats {
                        hold = hold.key(&format!("seat:{seat}"));
                    }
                    hold.acquire()?
                };
                let got = if buy_seats(&mut db, &seats, &who, lock.token())? { seats } else { Vec::new() };
                bought.lock().unwrap().insert(who, (got, lock.token()));
                lock.release()?;
                Ok(())
            })
        })
        .collect();
    for t in threads {
        t.join().map_err(|_| "a seat buyer panicked")??;
    }
    let mut ledger = BTreeMap::new();
    for row in db.query(
        "SELECT seat_id, buyer, token FROM sales WHERE seat_id >= $1 AND seat_id < $1 + 10 ORDER BY id",
        &[&first],
    )? {
        ledger.entry(row.get::<_, i32>(0)).or_insert_with(Vec::new).push((row.get(1), row.get(2)));
    }
    let bought = std::mem::take(&mut *bought.lock().unwrap());
    Ok(SeatReport { bought, ledger })
}

/// Buys every seat of `seats` under `token` in one transaction, fencing each row
/// (compare-and-advance of its high-water token) before reading it: all or none.
fn buy_seats(db: &mut postgres::Client, seats: &[i32], who: &str, token: u64) -> Result<bool, BoxError> {
    let fence = fence_value(token);
    let mut tx = db.transaction()?;
    for seat in seats {
        match tx.query_opt(fenced_postgres::SQL_FENCE_CHECK, &[seat, &fence])? {
            // A newer token has written the row, or the seat is sold: roll back.
            None => return Ok(false),
            Some(row) if row.get::<_, Option<String>>(0).is_some() => return Ok(false),
            Some(_) => {}
        }
    }
    for seat in seats {
        tx.execute(fenced_postgres::SQL_SELL, &[seat, &who])?;
        tx.execute(fenced_postgres::SQL_LEDGER, &[seat, &who, &fence])?;
    }
    tx.commit()?;
    Ok(true)
}

// ---------------------------------------------------------------------------------

fn main() -> Result<(), BoxError> {
    let (setup, server, postgres) = fenced_postgres::services()?;

    let sale = run_sale(&setup, 1)?;
    println!(
        "stock of {STOCK}, {BUYERS} buyers of {EACH}: {} bought, {} sold out; {} tickets ordered, {} left; \
         at most {} checkouts at once (capacity {CHECKOUTS}); {} buyers told their place in line",
        sale.bought, sale.sold_out, sale.ordered, sale.left, sale.most_inside, sale.told_place
    );
    let seats = run_seats(&setup, 201)?;
    for (who, (got, token)) in &seats.bought {
        let what =
            if got.is_empty() { "nothing (a seat was taken)".to_string() } else { format!("seats {got:?}") };
        println!("{who}: {what}, token {token}");
    }
    let twice: Vec<_> = seats.ledger.iter().filter(|(_, sales)| sales.len() > 1).collect();
    drop(postgres);
    if let Some(node) = server {
        node.shutdown();
    }
    if sale.ordered > i64::from(STOCK) || sale.most_inside > CHECKOUTS || !twice.is_empty() {
        return Err(format!("oversold: {sale:?}, seats sold twice: {twice:?}").into());
    }
    Ok(())
}
