//! Build script: records the git commit and the cargo profile for `ticketing --version`.
//!
//! `TICKETING_GIT_COMMIT` = `git rev-parse --short HEAD` (or what the builder set in
//! the environment, or `unknown` when there is no git or no repository, e.g. a build
//! from a source tarball). `TICKETING_BUILD_PROFILE` = cargo's profile (`release`,
//! `debug`). Both are read with `option_env!` in `src/cli/mod.rs`.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-env-changed=TICKETING_GIT_COMMIT");
    println!("cargo:rerun-if-changed=build.rs");
    // A builder without .git (a tarball, a docker context) may pass the commit in.
    let commit = std::env::var("TICKETING_GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=TICKETING_GIT_COMMIT={commit}");

    // Rebuild when HEAD moves: HEAD itself (a checkout), the branch it points to (a
    // commit) and packed-refs (a gc). Paths come from git, so worktrees work too.
    // Only files that exist: cargo reruns the script on every build for a missing one.
    let mut watch: Vec<String> =
        ["HEAD", "packed-refs"].iter().filter_map(|n| git(&["rev-parse", "--git-path", n])).collect();
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch.extend(git(&["rev-parse", "--git-path", &branch]));
    }
    for path in watch.iter().filter(|p| std::path::Path::new(p).exists()) {
        println!("cargo:rerun-if-changed={path}");
    }

    // cargo's PROFILE is "release" for --release (and profiles inheriting from it),
    // "debug" otherwise.
    let profile = std::env::var("PROFILE").unwrap_or_else(|_| "unknown".to_string());
    println!("cargo:rustc-env=TICKETING_BUILD_PROFILE={profile}");
}
