//! Every shell block of README.md and docs/*.md either runs here, as written up to the
//! substitutions each runner names (a free port for 5225 — and `TICKETING_ADDRS` set to
//! it, for commands that use the default address —, 127.0.0.N for the example hosts
//! 10.0.0.N, a temporary directory for /etc/ticketing; for the one-host quick start,
//! free ports for its client and metrics ports), or names the test that runs it or why
//! it cannot run on one machine. A new block fails this test until it is one or the
//! other.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::children::TOOL;
use common::children::{Within, BUILD};
use common::ports::addr_in_use;
use common::{bin, free_port, free_port_pair, repo, with_fresh_ports, PEER_TOKEN, TOKEN};

/// A ```sh block: the file it is in, its first line, its text.
struct Block {
    file: String,
    first: String,
    text: String,
}

fn blocks() -> Vec<Block> {
    let mut files = vec![repo().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    let mut out = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let mut rest = text.as_str();
        while let Some(open) = rest.find("```sh\n") {
            let body = &rest[open + 6..];
            let close = body.find("```").expect("a closed block");
            let block = body[..close].to_string();
            out.push(Block {
                file: path.strip_prefix(repo()).unwrap().display().to_string(),
                first: block.lines().next().unwrap_or("").trim().to_string(),
                text: block,
            });
            rest = &body[close + 3..];
        }
    }
    out
}

/// What this test does with a block.
enum How {
    /// Runs here (the runner's name, for the report).
    Run(&'static str),
    /// Run by another test, or not runnable on one machine: why.
    Elsewhere(&'static str),
}

fn how(block: &Block) -> How {
    let f = block.file.as_str();
    let first = block.first.as_str();
    match (f, first) {
        ("README.md", l) if l.starts_with("cargo run --release -- demo") => How::Elsewhere(
            "`ticketing demo` is run by tests/cli_commands.rs (demo_shows_a_timeline_and_checks_tokens); \
             `cargo test --release` is the test run itself",
        ),
        ("README.md", l) if l.starts_with("export TICKETING_AUTH_TOKEN=") => How::Run("readme_cli"),
        ("docs/cli.md", l) if l.starts_with("ticketing bench") => How::Run("operations_cluster"),
        ("docs/operations.md", l) if l.starts_with("export TICKETING_AUTH_TOKEN_FILE=") => {
            How::Run("operations_cluster")
        }
        ("docs/operations.md", l) if l.starts_with("TICKETING_NODE_ID=4") => How::Run("operations_cluster"),
        ("docs/operations.md", l) if l.starts_with("# Three nodes on this host") => How::Run("quick_start"),
        ("docs/operations.md", l) if l.starts_with("TICKETING_PEER_AUTH_TOKEN_FILE=") => How::Elsewhere(
            "tests/cluster_autopilot.rs runs `ticketing admin found` against three waiting join nodes",
        ),
        ("docs/configuration.md", "ticketing server") => {
            How::Elsewhere("every real-process test starts `ticketing server` this way (tests/common/process.rs)")
        }
        ("docs/deploy.md", "scripts/build-static.sh") => {
            How::Elsewhere("tests/static_binary.rs runs the static binary that .ci/run builds with it; docker needs an engine")
        }
        ("docs/deploy.md", l) if l.starts_with("install -m 0755") => {
            How::Elsewhere("installs into /usr/local and /etc and starts systemd units; the units pass systemd-analyze verify (tests/deploy_files.rs)")
        }
        ("docs/deploy.md", l) if l.starts_with("# /etc/ticketing/cluster.env") => {
            How::Elsewhere("file contents, not commands; the same files are written by tests/deploy_files.rs")
        }
        ("docs/deploy.md", l) if l.starts_with("head -c 32 /dev/urandom") => {
            How::Elsewhere("writes /etc/ticketing; the secrets' rules are tested in src/config/mod.rs")
        }
        ("docs/deploy.md", l) if l.starts_with("# node 2 died") => How::Elsewhere(
            "scripts/replace-node.sh is run by replace_node_script_does_a_rolling_restart_and_refuses_mistakes_quickly",
        ),
        ("docs/fencing.md", l) if l.starts_with("cargo run --release --example ticket_sale") => {
            How::Elsewhere("tests/ticket_sale.rs runs the example's sale and seats against a real PostgreSQL")
        }
        ("docs/fencing.md", l) if l.starts_with("stock of 100, ") || l.starts_with("family-") || l.starts_with("single: ") => {
            How::Elsewhere("the example's output, not commands")
        }
        ("docs/fencing.md", l) if l.starts_with("cargo run --release --example fenced_postgres") => {
            How::Elsewhere("tests/fencing_postgres.rs runs the example's scenarios against a real PostgreSQL")
        }
        ("docs/tls.md", _) => How::Elsewhere("tests/tls_recipe.rs runs the recipe, its checks and the CLI line"),
        ("README.md" | "docs/python.md", "pip install ./python") => {
            How::Elsewhere(".ci/run installs the package with this command before the tests")
        }
        ("docs/python.md", "cargo build --release") => How::Elsewhere(
            "tests/python_package.rs runs the suite this way, with the library and server of its own build",
        ),
        ("README.md" | "docs/go.md", l) if l.trim_start_matches('(').starts_with("cd go && go generate") => {
            How::Elsewhere(".ci/run runs `(cd go && go generate)`; tests/go_package.rs runs the module's tests")
        }
        ("docs/go.md", l) if l.starts_with("cargo build --release") => How::Elsewhere(
            "tests/go_package.rs runs `go test -race ./...` this way, with the library and server of its own build",
        ),
        ("README.md" | "docs/node.md", l) if l.starts_with("npm install ./node") => How::Elsewhere(
            ".ci/run installs the package this way; tests/node_package.rs runs the README's example with it",
        ),
        ("docs/node.md", l) if l.starts_with("cargo build --release") => How::Elsewhere(
            "tests/node_package.rs runs `node --test` this way, with the library and server of its own build",
        ),
        ("README.md" | "docs/java.md", l) if l.starts_with("(cd java && mvn -q install)") => How::Elsewhere(
            ".ci/run runs `(cd java && mvn -q -B install -DskipTests)`; tests/java_package.rs runs the JUnit suite and a consumer of the installed artifact",
        ),
        ("docs/c.md", l) if l.starts_with("cc -std=c11 -pthread -I include -I \"$(pg_config") => {
            How::Elsewhere("tests/c_examples.rs builds include/examples/ticket_sale.c with these flags (and -Werror, the sanitizers) and runs it")
        }
        ("docs/c.md", "cargo build --release") => {
            How::Elsewhere("tests/c_abi.rs builds tests/c/ticketing_test.c both ways and runs it")
        }
        ("docs/safety.md", l) if l.starts_with("scripts/mutants.sh") => How::Elsewhere(
            "mutants_script_refuses_mistakes_and_lists_a_groups_mutants (below) runs its checks and --list; \
             a run takes hours",
        ),
        ("docs/conformance.md", l) if l.starts_with("cargo test --release --test conformance") => {
            How::Elsewhere("`cargo test --release` runs tests/conformance.rs, every library")
        }
        _ => panic!("{}: a shell block nobody runs: {:?}", block.file, block.first),
    }
}

/// Runs `script` with bash, the `ticketing` binary first in PATH, in `dir`, with
/// `addrs` as the CLI's default addresses. Whatever it started in the background is
/// killed when it ends, however it ends (else its pipes would keep us waiting).
fn bash(script: &str, dir: &Path, addrs: &str) -> Output {
    let bin_dir = Path::new(bin()).parent().unwrap();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let script = format!("trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n{script}");
    let mut cmd = Command::new("timeout");
    cmd.args(["120", "bash", "-eu", "-o", "pipefail", "-c", &script])
        .current_dir(dir)
        .env("PATH", path)
        .env("TICKETING_ADDRS", addrs)
        .env_remove("TICKETING_AUTH_TOKEN")
        .env_remove("TICKETING_AUTH_TOKEN_FILE")
        .env_remove("TICKETING_PEER_AUTH_TOKEN")
        .env_remove("TICKETING_PEER_AUTH_TOKEN_FILE");
    cmd.output_within(BUILD)
}

/// `out`, unless the run failed because a server's address was taken (as its output or
/// `logs` say): then what they said, for [`with_fresh_ports`] to run it on new ports.
fn unless_taken(out: Output, logs: &str) -> Result<Output, String> {
    let said =
        format!("{}{}{logs}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    match !out.status.success() && addr_in_use(&said) {
        true => Err(said),
        false => Ok(out),
    }
}

fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// README's CLI tour against a standalone node it starts itself.
/// Run again on a new port when the node's was taken.
fn readme_cli(block: &Block) {
    let out = with_fresh_ports("README's CLI block", || {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("sell-seat.sh"),
            "#!/bin/sh\n[ -n \"$TICKETING_FENCE\" ] && echo \"sold with token $TICKETING_FENCE\"\n",
        )
        .unwrap();
        let port = free_port_pair();
        let script = block.text.replace("5225", &port.to_string());
        let out = bash(&format!("chmod +x sell-seat.sh\n{script}"), dir.path(), &format!("127.0.0.1:{port}"));
        unless_taken(out, "")
    });
    ok(&out, "README's CLI block");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("held owner=") && stdout.contains("released") && stdout.contains("sold with token")
    );
    assert!(stdout.contains("role=standalone"), "{stdout}");
}

/// `text` with each `from` replaced by its `to` in one pass, where it stands as a whole
/// number (so 5225 is not found again inside the port that replaced 5226).
fn replace_numbers(text: &str, pairs: &[(&str, String)]) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        let whole = |from: &str| {
            let end = i + from.len();
            text[i..].starts_with(from)
                && (i == 0 || !bytes[i - 1].is_ascii_digit())
                && bytes.get(end).is_none_or(|b| !b.is_ascii_digit())
        };
        match pairs.iter().find(|(from, _)| whole(from)) {
            Some((from, to)) => {
                out.push_str(to);
                i += from.len();
            }
            None => {
                let c = text[i..].chars().next().unwrap();
                out.push(c);
                i += c.len_utf8();
            }
        }
    }
    out
}

/// docs/operations.md's quick start: three nodes on 127.0.0.1, started, checked, used
/// and stopped by the block itself, on free ports. The block's own `kill` stops the
/// nodes; whatever it leaves running is killed by [`bash`] when the script ends, and
/// the whole process group by `timeout` after 120 s. Run again on new ports when a
/// node's was taken.
fn quick_start(block: &Block) {
    let started = Instant::now();
    let (client, out, logs) = with_fresh_ports("operations.md's quick start", || {
        let dir = tempfile::tempdir().unwrap();
        let client: Vec<u16> = (0..3).map(|_| free_port_pair()).collect();
        let metrics: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let mut pairs = Vec::new();
        for n in 0..3 {
            pairs.push((["5225", "5226", "5227"][n], client[n].to_string()));
            pairs.push((["9225", "9226", "9227"][n], metrics[n].to_string()));
        }
        let script = replace_numbers(&block.text, &pairs);
        for port in &client {
            assert!(script.contains(&format!("127.0.0.1:{port}")), "{script}");
        }
        let out = bash(&script, dir.path(), "127.0.0.1:1");
        let logs: Vec<String> = (1..=3)
            .map(|n| std::fs::read_to_string(dir.path().join(format!("node-{n}.log"))).unwrap_or_default())
            .collect();
        Ok((client, unless_taken(out, &logs.join("\n"))?, logs))
    });
    assert!(
        out.status.success(),
        "operations.md's quick start: {}\nstdout:\n{}\nstderr:\n{}\nlogs:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        logs.join("\n")
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    // `ticketing status`: one row per node, exactly one of them the leader.
    let rows: Vec<&str> = stdout.lines().filter(|l| l.starts_with("127.0.0.1:")).collect();
    assert_eq!(rows.len(), 3, "{stdout}");
    for port in &client {
        assert!(rows.iter().any(|r| r.starts_with(&format!("127.0.0.1:{port} "))), "{stdout}");
    }
    let leaders = rows.iter().filter(|r| r.split_whitespace().nth(2) == Some("leader")).count();
    assert_eq!(leaders, 1, "{stdout}");
    // The lock, taken, shown and given back.
    assert!(stdout.contains("held owner=") && stdout.contains("waiters=0"), "{stdout}");
    assert!(stdout.lines().any(|l| l == "released"), "{stdout}");
    // `admin members` with the operator secret: the three voters.
    for (n, port) in client.iter().enumerate() {
        let voter = format!("voter    {}@127.0.0.1:{port}", n + 1);
        assert!(stdout.contains(&voter), "{voter:?} in {stdout}");
    }
    // The block's `kill` stopped every node gracefully, and nothing listens any more.
    for (n, log) in logs.iter().enumerate() {
        assert!(log.contains("metrics on http://127.0.0.1:"), "node {}: {log}", n + 1);
        assert!(log.contains("] stopped"), "node {} did not stop gracefully: {log}", n + 1);
    }
    for port in &client {
        assert!(std::net::TcpStream::connect(("127.0.0.1", *port)).is_err(), "port {port} still served");
    }
    assert!(started.elapsed() < Duration::from_secs(120));
}

/// docs/operations.md's cluster start and replacement, with docs/cli.md's bench lines
/// against that cluster. Run again on new ports when a node's was taken.
fn operations_cluster(blocks: &[&Block]) {
    with_fresh_ports("operations.md's cluster", || operations_cluster_once(blocks));
}

/// [`operations_cluster`] once, on a port picked for it; why not, when a node's address
/// was taken.
fn operations_cluster_once(blocks: &[&Block]) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let etc = dir.path().join("etc");
    std::fs::create_dir(&etc).unwrap();
    std::fs::write(etc.join("auth-token"), TOKEN).unwrap();
    std::fs::write(etc.join("peer-token"), PEER_TOKEN).unwrap();
    for secret in ["auth-token", "peer-token"] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(etc.join(secret), std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let port = free_port_pair();
    let subst = |text: &str| {
        text.replace("/etc/ticketing", &etc.display().to_string())
            .replace("10.0.0.", "127.0.0.")
            .replace("5225", &port.to_string())
    };
    let find = |file: &str, start: &str| -> &Block {
        blocks.iter().find(|b| b.file == file && b.first.starts_with(start)).copied().unwrap()
    };
    let start = subst(&find("docs/operations.md", "export TICKETING_AUTH_TOKEN_FILE=").text);
    let join = subst(&find("docs/operations.md", "TICKETING_NODE_ID=4").text);
    let bench = subst(&find("docs/cli.md", "ticketing bench").text).replace("--duration 10", "--duration 1");
    // On one host every node needs its own listen address (on separate hosts the
    // default 0.0.0.0 does), and a server line runs in the background.
    let background = |script: &str| -> String {
        script
            .replace("\\\n", " ")
            .lines()
            .map(|l| match l.find("TICKETING_CLUSTER_SELF=127.0.0.") {
                Some(at) if l.contains("ticketing server") => {
                    let addr: String = l[at + 23..].split_whitespace().next().unwrap().to_string();
                    let line = l.split('#').next().unwrap().trim_end();
                    format!("TICKETING_LISTEN={addr} {line} 2>>servers.log &")
                }
                _ => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let admin = format!(
        "ticketing admin replace 1 4@127.0.0.4:{port} --addr 127.0.0.2:{port}\nticketing admin members --addr 127.0.0.2:{port}"
    );
    let script = format!(
        "{}\nfor i in $(seq 60); do ticketing query probe --addr 127.0.0.1:{port} >/dev/null 2>&1 && break; sleep 0.5; done\n\
         {bench}\n{}\n{admin}\n",
        background(&start),
        background(&join.replace("   ", ""))
    );
    let started = Instant::now();
    let out = bash(&script, dir.path(), &format!("127.0.0.1:{port}"));
    let log = std::fs::read_to_string(dir.path().join("servers.log")).unwrap_or_default();
    let out = unless_taken(out, &log)?;
    assert!(
        out.status.success(),
        "operations.md's cluster: {}\n{}\nservers:\n{log}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("replaced 1 by 4"), "{stdout}");
    assert!(stdout.contains("voter    4@127.0.0.4"), "{stdout}");
    assert!(started.elapsed() < Duration::from_secs(120));
    Ok(())
}

#[test]
fn every_shell_block_in_the_docs_runs_here_or_names_what_runs_it() {
    let all = blocks();
    assert!(all.len() >= 15, "found {} blocks", all.len());
    let mut cluster_blocks = Vec::new();
    let mut quick_starts = 0;
    for block in &all {
        match how(block) {
            How::Run("readme_cli") => readme_cli(block),
            How::Run("quick_start") => {
                quick_start(block);
                quick_starts += 1;
            }
            How::Run("operations_cluster") => cluster_blocks.push(block),
            How::Run(other) => panic!("no runner {other}"),
            How::Elsewhere(why) => assert!(!why.is_empty()),
        }
    }
    assert_eq!(quick_starts, 1, "docs/operations.md's one-host quick start");
    assert_eq!(cluster_blocks.len(), 3, "the cluster start, the join and the bench lines");
    operations_cluster(&cluster_blocks);
}

/// `scripts/mutants.sh` (docs/safety.md): its mistakes exit 2 naming what is wrong, and
/// with cargo-mutants installed, `--list` lists a group's mutants. (A run is hours of
/// builds: it is not part of the tests.)
#[test]
fn mutants_script_refuses_mistakes_and_lists_a_groups_mutants() {
    let script = repo().join("scripts/mutants.sh");
    let run =
        |args: &[&str]| Command::new("bash").arg(&script).args(args).current_dir(repo()).output_within(BUILD);
    let out = run(&["nothing"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("GROUP must be raft, lock, replica or client"));
    let out = run(&["lock", "--bogus"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown argument --bogus"));
    let installed = Command::new("cargo")
        .args(["mutants", "--version"])
        .try_output_within(TOOL)
        .is_ok_and(|o| o.status.success());
    if !installed {
        eprintln!("cargo-mutants is not installed: --list not checked");
        return;
    }
    let out = run(&["lock", "--file", "src/lock/timers.rs", "--list"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        listed.lines().count() > 10 && listed.lines().all(|l| l.starts_with("src/lock/timers.rs:")),
        "{listed}"
    );
}

/// `scripts/measure.sh` (the measurements docs/ cite): a name it does not know exits 2
/// with its usage before anything is built; `--help` lists every measurement that
/// bench/measure/main.rs runs, and every `scripts/measure.sh NAME` in the docs is one
/// of them. (A measurement takes minutes and asserts nothing: it is not a test.)
#[test]
fn measure_script_refuses_an_unknown_measurement_and_the_docs_name_known_ones() {
    let script = repo().join("scripts/measure.sh");
    let run =
        |args: &[&str]| Command::new("sh").arg(&script).args(args).current_dir(repo()).output_within(BUILD);
    let out = run(&["nothing"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage: scripts/measure.sh"));
    let help = run(&["--help"]);
    assert!(help.status.success());
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let main = std::fs::read_to_string(repo().join("bench/measure/main.rs")).unwrap();
    // Each runs in bench/measure/main.rs, but `flood`: the security test's own figures.
    let names =
        ["failover", "replacement", "handover", "rolling", "raw-throughput", "stop", "readyz", "flood"];
    for name in names {
        assert!(help.contains(&format!("scripts/measure.sh {name}")), "{help}");
        assert!(
            name == "flood" || main.contains(&format!("Some(\"{name}\")")),
            "bench/measure/main.rs runs no {name}"
        );
    }
    let mut cited = 0;
    for block in std::fs::read_dir(repo().join("docs")).unwrap() {
        let text = std::fs::read_to_string(block.unwrap().path()).unwrap_or_default();
        for rest in text.split("scripts/measure.sh ").skip(1) {
            let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
            assert!(names.contains(&name.as_str()), "docs name scripts/measure.sh {name:?}");
            cited += 1;
        }
    }
    assert!(cited >= 4, "the docs cite {cited} measurements");
}
