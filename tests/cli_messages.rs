//! Every connection failure of the CLI names its cause (docs/cli.md, "When a command
//! fails"): a closed port, a wrong auth token, a TLS certificate for another name, TLS
//! against a plain server and the other way round, and a cluster without a quorum.

mod common;

use std::process::{Command, Output};
use std::time::Duration;

use common::children::{Within, CLI};
use common::*;
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};

fn cli(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .env_remove("TICKETING_ADDRS")
        .env_remove("TICKETING_TLS_CA")
        .env("TICKETING_AUTH_TOKEN", TOKEN);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output_within(CLI)
}

/// Runs `ticketing query k --addr ADDR` and returns (exit status, stderr).
fn query(addr: &str, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let out = cli(&["query", "k", "--addr", addr], env);
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_closed_port_and_a_wrong_token_are_told_apart() {
    let closed = ports::closed_addr();
    let (code, err) = query(&closed.addr.to_string(), &[]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("connection refused: no server listens there"), "{err}");

    let server = start_server(&[]);
    let (code, err) =
        query(&server.addr.to_string(), &[("TICKETING_AUTH_TOKEN", "not-the-server-secret-0123")]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("refused our auth token"), "{err}");
    assert!(!err.contains("connection refused"), "{err}");
}

struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    /// A CA and a server certificate for `names`, as files.
    fn new(names: &[&str]) -> Pki {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let cert = CertificateParams::new(names).unwrap().signed_by(&key, &ca, &ca_key).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cert.pem"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("key.pem"), key.serialize_pem()).unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        Pki { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_str().unwrap().to_owned()
    }
}

#[test]
fn tls_mistakes_are_named() {
    // A certificate for another name than the one the client dials.
    let pki = Pki::new(&["127.0.0.9"]);
    let (cert, key, ca) = (pki.path("cert.pem"), pki.path("key.pem"), pki.path("ca.pem"));
    let tls_server = start_server(&[("TICKETING_TLS_CERT", &cert), ("TICKETING_TLS_KEY", &key)]);
    let (code, err) = query(&tls_server.addr.to_string(), &[("TICKETING_TLS_CA", &ca)]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("not valid for") && err.contains("subjectAltName"), "{err}");
    // A plain client against that TLS server.
    let (code, err) = query(&tls_server.addr.to_string(), &[]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("set TICKETING_TLS_CA"), "{err}");
    // A TLS client against a plain server.
    let plain = start_server(&[]);
    let (code, err) = query(&plain.addr.to_string(), &[("TICKETING_TLS_CA", &ca)]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("does not speak TLS"), "{err}");
}

#[test]
fn a_cluster_without_a_majority_says_no_quorum() {
    let mut cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader(Duration::from_secs(15));
    let survivor = (leader + 1) % 3;
    for i in 0..3 {
        if i != survivor {
            cluster.kill(i);
        }
    }
    // The survivor has noticed it has no leader (after an election timeout).
    let addr = cluster.addr(survivor);
    assert!(
        eventually(Duration::from_secs(15), || status_map(&mut connect(addr), 1)["leader_id"].is_empty()),
        "{addr} still names a leader after the two others were killed"
    );
    let out = cli(&["query", "k", "--addr", &cluster.addr(survivor).to_string()], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("no quorum") && err.contains("1 of its 3 voters answer"), "{err}");
}

/// A command's request budget (`CLI_REQUEST_TIMEOUT`). "At once" is checked against it:
/// what ends at once takes a fraction of a second, what waits takes all of it.
const BUDGET: Duration = ticketing::cli::CLI_REQUEST_TIMEOUT;

/// Runs `ticketing ARGS` and returns (exit status, stderr, how long it took).
fn timed(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, Duration) {
    let started = std::time::Instant::now();
    let out = cli(args, env);
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned(), started.elapsed())
}

/// A mistake that trying again cannot fix — a CA that did not sign the server's
/// certificate, a wrong secret, TLS on one side only — ends `status`, `query`,
/// `acquire` and `release` at once (exit 3) with the cause and the variable to fix,
/// instead of after the 5 s budget.
#[test]
fn mistakes_that_retrying_cannot_fix_end_every_command_at_once() {
    let pki = Pki::new(&["127.0.0.1"]);
    let other = Pki::new(&["127.0.0.1"]);
    let tls = start_server(&[
        ("TICKETING_TLS_CERT", &pki.path("cert.pem")),
        ("TICKETING_TLS_KEY", &pki.path("key.pem")),
    ]);
    let plain = start_server(&[]);
    let (tls_addr, plain_addr) = (tls.addr.to_string(), plain.addr.to_string());
    let other_ca = other.path("ca.pem");
    let ca = pki.path("ca.pem");
    // (what, address, environment, the cause the command must name)
    type Mistake<'a> = (&'a str, &'a str, Vec<(&'a str, &'a str)>, &'a str);
    let mistakes: [Mistake<'_>; 4] = [
        (
            "another CA",
            &tls_addr,
            vec![("TICKETING_TLS_CA", &other_ca)],
            "not signed by the CA in TICKETING_TLS_CA",
        ),
        (
            "a wrong secret",
            &plain_addr,
            vec![("TICKETING_AUTH_TOKEN", "not-the-server-secret-0123")],
            "TICKETING_AUTH_TOKEN is not the server's client secret",
        ),
        (
            "a plain client at a TLS server",
            &tls_addr,
            vec![],
            "speaks TLS and this client does not: set TICKETING_TLS_CA",
        ),
        (
            "a TLS client at a plain server",
            &plain_addr,
            vec![("TICKETING_TLS_CA", &ca)],
            "does not speak TLS (a plain server: unset TICKETING_TLS_CA)",
        ),
    ];
    for (mistake, addr, env, cause) in &mistakes {
        for command in
            [&["status"][..], &["query", "k"], &["acquire", "k", "--wait", "60000"], &["release", "k", "7"]]
        {
            let args: Vec<&str> = command.iter().copied().chain(["--addr", addr]).collect();
            let (code, err, took) = timed(&args, env);
            assert_eq!(code, Some(3), "{mistake}, {command:?}: {err}");
            assert!(err.contains(cause), "{mistake}, {command:?}: {err}");
            assert!(err.contains("trying again will not help"), "{mistake}, {command:?}: {err}");
            // Before, every one of them took the whole budget (5 s, or the 60 s wait); at
            // once is a fraction of a second.
            assert!(took < BUDGET, "{mistake}, {command:?} took {took:?}: {err}");
        }
    }
    // The servers were never given a request: the probe of a plain client changed nothing.
    let (code, out, _) = timed(&["query", "k", "--addr", &tls_addr], &[("TICKETING_TLS_CA", &ca)]);
    assert_eq!(code, Some(0), "{out}");
}

/// `status` of a dead address keeps to its 5 s budget (it used to ask twice: 10 s) and
/// names the cause per address; a `release` nothing could carry says it was not sent.
#[test]
fn a_dead_address_is_named_within_the_budget() {
    let closed = ports::closed_addr();
    let addr = closed.addr.to_string();
    let (code, err, took) = timed(&["status", "--addr", &addr], &[]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains(&format!("{addr}: connection refused")), "{err}");
    assert!(took < BUDGET, "status took {took:?}");
    let (code, err, _) = timed(&["release", "k", "9", "--addr", &addr], &[]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("no server reachable") && err.contains("nothing was sent"), "{err}");
    assert!(!err.contains("not confirmed"), "{err}");
}

/// Configuration mistakes name the variable to fix.
#[test]
fn configuration_mistakes_name_the_variable() {
    let (code, err, _) = timed(&["query", "k"], &[("TICKETING_TLS_CA", "nope.pem")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("cannot read nope.pem (TICKETING_TLS_CA)"), "{err}");
    let out = Command::new(bin())
        .args(["query", "k"])
        .env_remove("TICKETING_AUTH_TOKEN")
        .env_remove("TICKETING_AUTH_TOKEN_FILE")
        .output_within(CLI);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no auth token given: set TICKETING_AUTH_TOKEN"), "{err}");
    let (code, err, _) =
        timed(&["query", "k"], &[("TICKETING_AUTH_TOKEN_FILE", "nope.token"), ("TICKETING_AUTH_TOKEN", "")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("cannot read nope.token (TICKETING_AUTH_TOKEN_FILE)"), "{err}");
    // An address that is not host:port names where it came from.
    let (code, err, _) = timed(&["query", "k"], &[("TICKETING_ADDRS", "127.0.0.1")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("address \"127.0.0.1\" (TICKETING_ADDRS) is not host:port"), "{err}");
    let (code, err, _) = timed(&["status", "--addr", "127.0.0.1"], &[("TICKETING_ADDRS", "127.0.0.1:1")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("address \"127.0.0.1\" (--addr) is not host:port"), "{err}");
    let (code, err, _) = timed(&["bench", "--duration", "1"], &[("TICKETING_ADDRS", "127.0.0.1")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("address \"127.0.0.1\" (TICKETING_ADDRS) is not host:port"), "{err}");
    // `admin` with a secret the server does not hold names the operator secret.
    let server = start_server(&[("TICKETING_PEER_AUTH_TOKEN", PEER_TOKEN)]);
    let (code, err, took) = timed(
        &["admin", "members", "--addr", &server.addr.to_string()],
        &[("TICKETING_PEER_AUTH_TOKEN", "not-the-peer-secret-0123")],
    );
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("TICKETING_PEER_AUTH_TOKEN is not that node's peer (operator) secret: wrong here, or, if other nodes accept it, wrong on that node"), "{err}");
    // At once: the refusal, not the budget.
    assert!(took < BUDGET, "admin members took {took:?}");
    // ... and the client secret given as the operator secret: the server answers, and
    // refuses; that is the same mistake, not a refusal of the operation (exit 1).
    for args in [
        &["admin", "members"][..],
        &["admin", "transfer-leader"],
        &["admin", "replace", "2", "4@127.0.0.1:1"],
    ] {
        let addr = server.addr.to_string();
        let args: Vec<&str> = args.iter().copied().chain(["--addr", &addr]).collect();
        let (code, err, took) = timed(&args, &[("TICKETING_PEER_AUTH_TOKEN", TOKEN)]);
        assert_eq!(code, Some(3), "{args:?}: {err}");
        assert!(err.contains("TICKETING_PEER_AUTH_TOKEN holds the client secret"), "{args:?}: {err}");
        assert!(!err.contains("greeting"), "{args:?}: {err}");
        assert!(took < BUDGET, "{args:?} took {took:?}");
    }
}

/// A refused address is reported at once, alone or among live ones: `status` asks each
/// node once and only a node that stays silent takes the budget (it took 5 s).
#[test]
fn a_refused_address_is_reported_at_once() {
    let server = start_server(&[]);
    let live = server.addr.to_string();
    let closed = ports::closed_addr();
    let dead = closed.addr.to_string();
    for addrs in [dead.clone(), format!("{live},{dead}"), format!("{dead},{live}")] {
        let (code, err, took) = timed(&["status", "--addr", &addrs], &[]);
        assert!(err.contains(&format!("{dead}: connection refused")), "{addrs}: {err}");
        assert_eq!(code, Some(if addrs == dead { 3 } else { 0 }), "{addrs}: {err}");
        // At once: a fraction of a second, not the budget a silent node takes.
        assert!(took < BUDGET, "status --addr {addrs} took {took:?}");
    }
}

/// `acquire` against a dead address tries for `max(--wait, 5 s)` and its message names
/// the budget it spent: 8 s for `--wait 8000` (it said 5 s), 5 s for `--wait 0`. How
/// little it runs past the budget (it took 6.1 s: a try begun late waited its own 3 s to
/// connect) is measured by `scripts/overruns.sh` (docs/safety.md), not bounded here.
#[test]
fn acquire_keeps_to_its_budget_and_says_which() {
    let closed = ports::closed_addr();
    let dead = closed.addr.to_string();
    for (wait, budget) in [("0", 5.0), ("8000", 8.0)] {
        let (code, err, took) = timed(&["acquire", "k", "--wait", wait, "--addr", &dead], &[]);
        assert_eq!(code, Some(3), "{err}");
        let said = format!("no server reachable within {budget:.0} s");
        assert!(err.contains(&said), "--wait {wait}: {err}");
        assert!(err.contains(&format!("{dead}: connection refused")), "--wait {wait}: {err}");
        let took = took.as_secs_f64();
        assert!(took >= budget - 0.1, "--wait {wait} took {took:.2} s");
    }
}
