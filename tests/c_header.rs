//! include/ticketing.h is what cbindgen makes of src/capi's declarations
//! (scripts/c-header.sh --check): the header is never edited by hand, so a kind, a
//! cause, a limit or a function added in Rust is in it, and nothing in it is stale.
//!
//! Needs cbindgen at the version scripts/c-header.sh names. Without it the test prints
//! `SKIPPED` and passes, unless `TICKETING_REQUIRE_CBINDGEN=1` (set by `.ci/run`) makes
//! that a failure.

mod common;

use std::process::Command;
use std::time::Duration;

use common::bindings::{have_or_skip, run_in_group};
use common::repo;

#[test]
fn the_committed_header_is_the_generators_output() {
    let test = "the_committed_header_is_the_generators_output";
    let install = "cargo install cbindgen --locked --version 0.29.4";
    if !have_or_skip(test, "cbindgen", &["--version"], "TICKETING_REQUIRE_CBINDGEN", install) {
        return;
    }
    // A deadline far past the second the generator takes.
    let (ok, output) = run_in_group(
        Command::new(repo().join("scripts/c-header.sh")).arg("--check"),
        Duration::from_secs(120),
    );
    assert!(ok, "scripts/c-header.sh --check:\n{output}");
}
