//! What the tests of the C ABI and the language packages share: this build's native
//! library, tools that may be missing on a developer's machine, and running a
//! package's suite in a process group that goes when the run ends.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The directory holding this build's libticketing.so and libticketing.a (the crate's
/// cdylib and staticlib): `<target>/<profile>/deps`, where the test binary runs from and
/// cargo puts them whenever it builds the library (`cargo build` also copies them one
/// level up; `cargo test` does not).
pub fn native_lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().to_path_buf();
    for lib in ["libticketing.so", "libticketing.a"] {
        assert!(
            dir.join(lib).is_file(),
            "{} is missing (crate-type cdylib/staticlib)",
            dir.join(lib).display()
        );
    }
    dir
}

/// True when `program probe…` runs and succeeds. Otherwise prints `SKIPPED test: why`
/// and returns false, unless the environment variable `require` is `1` (`.ci/run`
/// sets it after installing the tool): then it panics.
pub fn have_or_skip(test: &str, program: &str, probe: &[&str], require: &str, install: &str) -> bool {
    let mut cmd = Command::new(program);
    cmd.args(probe);
    let ok = super::children::try_run_within(
        &mut cmd,
        super::children::TOOL,
        &format!("{program} {}", probe.join(" ")),
    )
    .is_ok_and(|o| o.status.success());
    ok || skip(test, require, &format!("`{program} {}` failed ({install})", probe.join(" ")))
}

/// Prints `SKIPPED test: why` and returns false, unless the environment variable
/// `require` is `1` (`.ci/run` sets it after installing what is missing): then it
/// panics.
pub fn skip(test: &str, require: &str, why: &str) -> bool {
    assert!(!std::env::var(require).is_ok_and(|v| v == "1"), "{require}=1 but {why}");
    eprintln!("SKIPPED {test}: {why}");
    false
}

/// True when PostgreSQL's server programs were found (`installed`: the examples'
/// `postgres_bin_dir().is_some()`); else [`skip`] under TICKETING_REQUIRE_POSTGRES.
pub fn postgres_or_skip(test: &str, installed: bool) -> bool {
    installed
        || skip(
            test,
            "TICKETING_REQUIRE_POSTGRES",
            "PostgreSQL is not installed (apt-get install postgresql)",
        )
}

/// Runs `cmd` (its program, arguments, directory and environment already set) in a
/// process group of its own, with its output in one log, until it ends or `limit` has
/// passed; then the whole group is killed, so the servers a suite starts go with it
/// whatever happens. Returns (success, output); a run that outlived `limit` fails and
/// says so.
pub fn run_in_group(cmd: &mut Command, limit: Duration) -> (bool, String) {
    let log = tempfile::NamedTempFile::new().unwrap();
    cmd.stdin(Stdio::null())
        .stdout(Stdio::from(File::create(log.path()).unwrap()))
        .stderr(Stdio::from(log.reopen().unwrap()))
        .process_group(0);
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {:?}: {e}", cmd.get_program()));
    let group = child.id();
    let (ended, status) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let _ = ended.send(child.wait());
    });
    let status = status.recv_timeout(limit).ok().and_then(Result::ok);
    super::children::kill_group(group);
    waiter.join().unwrap();
    let output = std::fs::read_to_string(log.path()).unwrap_or_default();
    match status {
        Some(status) => (status.success(), output),
        None => (false, format!("{output}\n(killed after {limit:?})")),
    }
}
