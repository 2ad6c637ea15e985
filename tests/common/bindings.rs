//! What the tests of the C ABI and the Python package share: this build's native
//! library, and tools that may be missing on a developer's machine.

use std::path::PathBuf;
use std::process::Command;

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
    let ok = Command::new(program).args(probe).output().is_ok_and(|o| o.status.success());
    if !ok {
        let why = format!("`{program} {}` failed ({install})", probe.join(" "));
        assert!(!std::env::var(require).is_ok_and(|v| v == "1"), "{require}=1 but {why}");
        eprintln!("SKIPPED {test}: {why}");
    }
    ok
}
