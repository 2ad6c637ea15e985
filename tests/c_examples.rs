//! The C examples under include/examples, built with `cc` against include/ticketing.h, this build's libticketing and libpq (with AddressSanitizer and UBSan where the toolchain has them), and run against a real server and a throw-away PostgreSQL.
//!
//! Needs a C compiler (`cc`, or `$CC`), libpq's header (`pg_config`, Debian's libpq-dev)
//! and PostgreSQL. Without them the test prints `SKIPPED` and passes, unless
//! `TICKETING_REQUIRE_CC=1` / `TICKETING_REQUIRE_POSTGRES=1` (set by `.ci/run`, which
//! installs them) makes that a failure.

mod common;

#[path = "../examples/fenced_postgres.rs"]
#[allow(dead_code)]
mod fenced_postgres;

use std::path::PathBuf;
use std::process::Command;

use common::bindings::{have_or_skip, postgres_or_skip, skip};
use common::cc::{build_against_shared, cc_or_skip, command, sanitizers};
use common::children::TOOL;
use common::{repo, run_within, start_server, TOKEN};

/// libpq's include directory (`pg_config --includedir`) when it holds libpq-fe.h, or
/// `None` after printing why the test is skipped (a failure instead under
/// `TICKETING_REQUIRE_POSTGRES=1`).
fn libpq_or_skip(test: &str) -> Option<PathBuf> {
    let require = "TICKETING_REQUIRE_POSTGRES";
    let install = "apt-get install libpq-dev";
    if !have_or_skip(test, "pg_config", &["--includedir"], require, install) {
        return None;
    }
    let output = run_within(Command::new("pg_config").arg("--includedir"), TOOL, "pg_config --includedir");
    let dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    let header = dir.join("libpq-fe.h");
    let found = header.is_file() || skip(test, require, &format!("no {} ({install})", header.display()));
    found.then_some(dir)
}

/// include/examples/ticket_sale.c (docs/c.md, "Ticket sale against PostgreSQL"): 60
/// buyers of 2 of 100 tickets through a key of 8 permits with the store's conditional
/// decrement, 50 bought, never more than 8 checkouts at once, nothing oversold; families
/// holding 4 adjacent seats in one hold buy all 4 or none. The program exits 1 on any
/// error, an oversold ticket, more than 8 checkouts inside at once, a seat sold twice,
/// or not exactly one of the two overlapping families served.
#[test]
fn the_c_ticket_sale_example_never_oversells_against_postgres() {
    let test = "the_c_ticket_sale_example_never_oversells_against_postgres";
    let Some(cc) = cc_or_skip(test) else { return };
    let Some(libpq) = libpq_or_skip(test) else { return };
    if !postgres_or_skip(test, fenced_postgres::postgres_bin_dir().is_some()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join("ticket_sale");
    let mut flags = sanitizers(&cc);
    flags.extend(["-I".into(), libpq.display().to_string(), "-lpq".into()]);
    build_against_shared(&cc, &repo().join("include/examples/ticket_sale.c"), &program, &flags);

    let server = start_server(&[]);
    let pg = fenced_postgres::Postgres::start().expect("start PostgreSQL");
    let output = run_within(
        command(&program)
            .env("TICKETING_ADDRS", server.addr.to_string())
            .env("TICKETING_AUTH_TOKEN", TOKEN)
            .env("FENCE_PG", &pg.conn)
            .env("SALE_SCHEMA_DIR", repo().join("examples")),
        TOOL,
        "include/examples/ticket_sale.c",
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the C ticket sale failed ({}):\n{stdout}\n{stderr}\nPostgreSQL:\n{}",
        output.status,
        pg.log()
    );
    for expected in [
        "60 buyers of 2: 50 bought, 10 sold out; 100 tickets ordered, 0 left",
        "family-c: seats [207, 208, 209, 210]",
        "nothing oversold, no seat sold twice",
    ] {
        assert!(stdout.contains(expected), "no {expected:?} in:\n{stdout}\n{stderr}");
    }
    assert!(stderr.is_empty(), "standard error:\n{stderr}");
    eprintln!("{stdout}");
}
