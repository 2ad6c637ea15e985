//! Building C and C++ test programs against include/ticketing.h and this build's
//! libticketing: the compilers, the sanitizers when the toolchain has them.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::bindings::{have_or_skip, native_lib_dir};
use super::children::{try_run_within, BUILD, TOOL};
use super::repo;

/// The C compiler (`$CC`, else `cc`), or `None` after printing why the test is skipped
/// (a failure instead under `TICKETING_REQUIRE_CC=1`).
pub fn cc_or_skip(test: &str) -> Option<String> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    have_or_skip(test, &cc, &["--version"], "TICKETING_REQUIRE_CC", "apt-get install gcc").then_some(cc)
}

/// The C++ compiler (`$CXX`, else `c++`), or `None` as [`cc_or_skip`].
pub fn cxx_or_skip(test: &str) -> Option<String> {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    have_or_skip(test, &cxx, &["--version"], "TICKETING_REQUIRE_CC", "apt-get install g++").then_some(cxx)
}

/// `-fsanitize=address,undefined` when `compiler` builds and runs a program with it
/// (the runtimes may be missing); empty otherwise.
pub fn sanitizers(compiler: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("probe.c");
    std::fs::write(&source, "int main(void) { return 0; }\n").unwrap();
    let flags = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer"];
    let program = dir.path().join("probe");
    let mut build = Command::new(compiler);
    build.args(["-x", "c"]).arg(&source).args(flags).arg("-o").arg(&program);
    let built =
        try_run_within(&mut build, BUILD, "the sanitizer probe's build").is_ok_and(|o| o.status.success());
    let ran = || {
        try_run_within(&mut Command::new(&program), TOOL, "the sanitizer probe")
            .is_ok_and(|o| o.status.success())
    };
    if built && ran() {
        flags.map(String::from).to_vec()
    } else {
        eprintln!("note: {compiler} cannot build with -fsanitize=address,undefined here; building without");
        Vec::new()
    }
}

/// Builds `source` (warnings as errors, against include/ticketing.h) into `out`,
/// linked to the shared libticketing, with `flags` added.
pub fn build_against_shared(compiler: &str, source: &Path, out: &Path, flags: &[String]) {
    let lib = native_lib_dir();
    let c_source = source.extension().is_some_and(|e| e == "c");
    let std = if c_source { "-std=c11" } else { "-std=c++17" };
    let mut cmd = Command::new(compiler);
    cmd.args([std, "-Wall", "-Wextra", "-Werror", "-pthread", "-I"])
        .arg(repo().join("include"))
        .arg(source)
        .args(flags)
        .arg("-o")
        .arg(out)
        .arg(format!("-L{}", lib.display()))
        .arg("-lticketing");
    let output = super::run_within(&mut cmd, BUILD, &format!("{compiler} {}", source.display()));
    assert!(output.status.success(), "{compiler} failed:\n{}", String::from_utf8_lossy(&output.stderr));
}

/// A command for `program` with the library on its search path.
pub fn command(program: &Path) -> Command {
    let mut command = Command::new(program);
    command.env("LD_LIBRARY_PATH", native_lib_dir());
    command.env("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1");
    command
}

/// The path of a test program's source under tests/c.
pub fn test_source(name: &str) -> PathBuf {
    repo().join("tests/c").join(name)
}
