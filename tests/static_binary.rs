//! The static binary (scripts/build-static.sh) needs no file outside itself: it is
//! copied into an empty directory, and `ticketing --version`, a standalone server and
//! the CLI's acquire/query/release all run chrooted there. Host names resolve without
//! any NSS module (src/resolve.rs): `localhost` with no /etc/hosts at all, and an
//! /etc/hosts entry once the chroot has one.
//!
//! Needs root (chroot) and the static binary; `.ci/run` builds it before the tests and
//! sets `TICKETING_REQUIRE_STATIC=1`, which turns a skip into a failure. Elsewhere the
//! test skips with a message. `TICKETING_STATIC_BIN` overrides the binary's path.

mod common;

use common::children::{output_within, Within, CLI, TOOL};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{mpsc, RwLock};
use std::time::Duration;

const TOKEN: &str = "chroot-secret-0123456789";

fn static_binary() -> Result<PathBuf, String> {
    if std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(1) != 0 {
        return Err("not running as root, cannot chroot".into());
    }
    if chroot_command().is_none() {
        return Err("no chroot command (coreutils)".into());
    }
    let path = match std::env::var_os("TICKETING_STATIC_BIN") {
        Some(p) => PathBuf::from(p),
        None => {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("target/x86_64-unknown-linux-gnu/release/ticketing")
        }
    };
    if !path.is_file() {
        return Err(format!("{} does not exist: run scripts/build-static.sh first", path.display()));
    }
    Ok(path)
}

/// The static binary, or `None` after printing why the test is skipped.
fn binary_or_skip(test: &str) -> Option<PathBuf> {
    match static_binary() {
        Ok(path) => Some(path),
        Err(why) => {
            let required = std::env::var("TICKETING_REQUIRE_STATIC").is_ok_and(|v| v == "1");
            assert!(!required, "TICKETING_REQUIRE_STATIC=1 but: {why}");
            eprintln!("SKIPPED {test}: {why}");
            None
        }
    }
}

/// coreutils' `chroot`, by absolute path (the child's environment is empty, so no PATH).
fn chroot_command() -> Option<&'static str> {
    ["/usr/sbin/chroot", "/usr/bin/chroot", "/sbin/chroot", "/bin/chroot"]
        .into_iter()
        .find(|p| Path::new(p).exists())
}

/// Held for writing while a jail's binary is being copied, for reading while a child is
/// spawned. A child forked while the copy is open for writing inherits that descriptor
/// until it execs, and exec of the copy fails with "Text file busy" as long as any
/// process holds it: on a loaded machine the other test's fork can sit in that window
/// (seen in CI). `spawn` returns only after the child's exec, so the window is the
/// spawn call.
static SPAWNING: RwLock<()> = RwLock::new(());

/// Spawns `cmd` outside any jail's copy.
fn spawn(cmd: &mut Command) -> Child {
    let _no_copy = SPAWNING.read().unwrap_or_else(|e| e.into_inner());
    cmd.spawn().unwrap()
}

/// An empty directory holding only `/ticketing`.
fn jail(binary: &Path) -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("ticketing-chroot-").tempdir().unwrap();
    {
        let _no_spawn = SPAWNING.write().unwrap_or_else(|e| e.into_inner());
        std::fs::copy(binary, dir.path().join("ticketing")).unwrap();
    }
    let entries: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(entries, vec![std::ffi::OsString::from("ticketing")], "the jail holds the binary only");
    dir
}

/// `chroot DIR /ticketing ARGS` with exactly `env` as its environment.
fn in_jail(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(chroot_command().expect("chroot"));
    cmd.arg(dir).arg("/ticketing").args(args).env_clear().stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

fn run(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let child = spawn(in_jail(dir, args, env).stdout(Stdio::piped()).stderr(Stdio::piped()));
    let out =
        output_within(child, CLI, &format!("chroot {} /ticketing {}", dir.display(), args.join(" ")), false);
    eprintln!(
        "chroot {} /ticketing {}: {}\n  stdout: {}  stderr: {}",
        dir.display(),
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A standalone server inside the jail; returns it and its listen address.
fn start_server(dir: &Path, listen: &str) -> (Server, SocketAddr) {
    let env = [("TICKETING_AUTH_TOKEN", TOKEN), ("TICKETING_LISTEN", listen), ("RUST_LOG", "info")];
    let mut child = spawn(in_jail(dir, &["server"], &env).stdout(Stdio::null()).stderr(Stdio::piped()));
    let stderr = child.stderr.take().unwrap();
    let server = Server(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("[chrooted server] {line}");
            let _ = tx.send(line);
        }
    });
    loop {
        let line = rx.recv_timeout(Duration::from_secs(10)).expect("the chrooted server printed its address");
        if let Some(rest) = line.split(" listening on ").nth(1) {
            let addr = rest.split_whitespace().next().unwrap().parse().unwrap();
            return (server, addr);
        }
    }
}

fn client_env(addr: &str) -> Vec<(&'static str, String)> {
    vec![
        ("TICKETING_AUTH_TOKEN", TOKEN.to_string()),
        ("TICKETING_ADDRS", addr.to_string()),
        ("TICKETING_OWNER", "chroot-test".to_string()),
    ]
}

/// acquire → query → release through the chrooted CLI against `addr` (as written).
fn acquire_query_release(dir: &Path, addr: &str, key: &str) {
    let env = client_env(addr);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let out = run(dir, &["acquire", key, "--lease", "30", "--wait", "2000"], &env);
    assert!(out.status.success(), "acquire via {addr}");
    let token = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(token.parse::<u64>().is_ok_and(|t| t > 0), "a fencing token: {token:?}");
    let out = run(dir, &["query", key], &env);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains(&token), "query shows the holder's token");
    let out = run(dir, &["release", key, &token], &env);
    assert!(out.status.success(), "release via {addr}");
    let out = run(dir, &["release", key, &token], &env);
    assert_eq!(out.status.code(), Some(1), "a second release is not holder");
}

#[test]
fn the_static_binary_runs_alone_in_an_empty_chroot() {
    let Some(binary) = binary_or_skip("the_static_binary_runs_alone_in_an_empty_chroot") else { return };
    let readelf = {
        let _no_copy = SPAWNING.read().unwrap_or_else(|e| e.into_inner());
        Command::new("readelf").arg("-d").arg(&binary).try_output_within(TOOL)
    };
    if let Ok(out) = readelf {
        assert!(!String::from_utf8_lossy(&out.stdout).contains("NEEDED"), "no shared library needed");
    }
    let dir = jail(&binary);

    let out = run(dir.path(), &["--version"], &[]);
    assert!(out.status.success());
    let version = String::from_utf8(out.stdout).unwrap();
    assert!(version.starts_with(&format!("ticketing {} (commit ", env!("CARGO_PKG_VERSION"))), "{version}");
    assert!(version.contains("release build, static)"), "{version}");
    let here = option_env!("TICKETING_GIT_COMMIT").unwrap_or("unknown");
    if !version.contains(&format!("commit {here},")) {
        eprintln!("WARNING: the static binary is from another commit than this test ({here}): {version}");
    }

    let (_server, addr) = start_server(dir.path(), "127.0.0.1:0");
    acquire_query_release(dir.path(), &addr.to_string(), "seat:chroot");
    let out = run(
        dir.path(),
        &["status"],
        &client_env(&addr.to_string()).iter().map(|(k, v)| (*k, v.as_str())).collect::<Vec<_>>(),
    );
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("standalone"));
}

#[test]
fn host_names_resolve_in_the_chroot_without_nss() {
    let Some(binary) = binary_or_skip("host_names_resolve_in_the_chroot_without_nss") else { return };
    let dir = jail(&binary);
    assert!(!dir.path().join("etc").exists());

    // No /etc/hosts, no nsswitch.conf, no resolv.conf: `localhost` still works, for the
    // server's listen address and for the client.
    let (_server, addr) = start_server(dir.path(), "localhost:0");
    assert!(addr.ip().is_loopback(), "{addr}");
    acquire_query_release(dir.path(), &format!("localhost:{}", addr.port()), "seat:localhost");

    // An unknown name fails cleanly (exit 3: no server reachable), it does not hang.
    let env = client_env(&format!("no-such-host.invalid:{}", addr.port()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let out = run(dir.path(), &["acquire", "seat:x", "--wait", "0"], &env);
    assert!(!out.status.success());

    // An /etc/hosts entry.
    std::fs::create_dir(dir.path().join("etc")).unwrap();
    std::fs::write(dir.path().join("etc/hosts"), "127.0.0.1 localhost\n127.0.0.1 ticketing-node-1 # test\n")
        .unwrap();
    acquire_query_release(dir.path(), &format!("ticketing-node-1:{}", addr.port()), "seat:hosts");
    let (_server2, addr2) = start_server(dir.path(), "ticketing-node-1:0");
    assert!(addr2.ip().is_loopback(), "{addr2}");
    acquire_query_release(dir.path(), &format!("TICKETING-NODE-1:{}", addr2.port()), "seat:hosts2");
}
