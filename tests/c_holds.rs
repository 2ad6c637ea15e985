//! Counted and multi-key holds through the C ABI, from C (tests/c/holds.c), built with AddressSanitizer and UBSan where the toolchain has them, against a real server.

mod common;

use common::cc::{build_against_shared, cc_or_skip, command, sanitizers, test_source};
use common::children::TOOL;
use common::{run_within, start_server, TOKEN};

#[test]
fn holds_from_c_are_counted_whole_told_their_place_and_refused_naming_the_argument() {
    let Some(cc) = cc_or_skip("holds_from_c") else { return };
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join("holds");
    build_against_shared(&cc, &test_source("holds.c"), &program, &sanitizers(&cc));
    let server = start_server(&[]);
    let output = run_within(command(&program).arg(server.addr.to_string()).arg(TOKEN), TOOL, "holds");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the program failed ({}):\n{stdout}\n{stderr}", output.status);
    for line in [
        "counted hold: 2 of 3, its key, count and capacity; deadline within the lease",
        "pool: capacity 3, 2 in use by one hold of c-a, blocking and through a future",
        "capacity mismatch: invalid, naming 3 and 4",
        "bad arguments: refused before any I/O, each named",
        "multi-key future: told its place, granted both seats at once after the release",
        "one release ends every key; no place after the grant",
        "done",
    ] {
        assert!(stdout.contains(line), "no {line:?} in:\n{stdout}\n{stderr}");
    }
    assert!(stderr.is_empty(), "standard error:\n{stderr}");
}
