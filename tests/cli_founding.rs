//! The self-healing recipe's ceremonies and views as an operator meets them
//! (deploy/ticketing-node.service, docs/operations.md "Founding"): three nodes started
//! `join` wait, and `status`, `query`, `admin members`, `top` and `/readyz` say so and
//! name the fix; `admin found` with a listed node down names each listed node's state
//! and talks to no other address; founded, `admin members` shows healthy members as
//! heard, not unreachable; run again (also after a heal), `admin found` says the
//! cluster is founded already and changes nothing — only for nodes of one running
//! cluster: nodes of two clusters, or a waiting node beside members, are refused; a
//! node joining under a fixed id says whom it joins.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use common::children::{Within, CLI};
use common::{
    bin, eventually, free_port, free_port_pair, with_fresh_ports, Server, ServerProcess, PEER_TOKEN, TOKEN,
};

/// The autopilot's smallest threshold for the default timing: the heal takes seconds.
const DEAD_MS: &str = "6000";

/// `ticketing ARGS` with the client and operator secrets and no TICKETING_ADDRS:
/// (exit status, stdout, stderr, how long it took).
fn cli(args: &[&str]) -> (i32, String, String, Duration) {
    let started = Instant::now();
    let out = Command::new(bin())
        .args(args)
        .env_clear()
        .env("TICKETING_AUTH_TOKEN", TOKEN)
        .env("TICKETING_PEER_AUTH_TOKEN", PEER_TOKEN)
        .output_within(CLI);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr), started.elapsed())
}

/// (status code, body) of `GET path` on `addr`.
fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).expect("metrics port");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let code = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, text.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_string())
}

/// A node started as the recipe's unit starts every one: `join`, no node id, the
/// members' addresses; `extra` environment too.
fn join_node(addr: &str, seeds: &str, extra: &[(&str, &str)]) -> ServerProcess {
    try_join_node(addr, seeds, extra).unwrap_or_else(|why| panic!("{why}"))
}

/// [`join_node`], or why it did not listen.
fn try_join_node(addr: &str, seeds: &str, extra: &[(&str, &str)]) -> Result<ServerProcess, String> {
    Server::new()
        .listen(addr)
        .member(None, addr, seeds, "join")
        .env("TICKETING_AUTOPILOT_DEAD_MS", DEAD_MS)
        .envs(extra)
        .try_start()
}

/// The voters the leader reports (ids), if `addr` answers MEMBERS as a member.
fn voter_lines(addr: &str) -> Vec<String> {
    let (_, out, _, _) = cli(&["admin", "members", "--addr", addr]);
    out.lines().filter(|l| l.starts_with("voter ")).map(str::to_owned).collect()
}

#[test]
fn the_recipe_s_ceremonies_and_views_say_what_each_node_is() {
    // Again on new ports when one was taken.
    let (port, addrs, seeds, metrics, mut nodes) = with_fresh_ports("three waiting nodes", || {
        let port = free_port_pair();
        let addrs: Vec<String> = (1..=3).map(|i| format!("127.0.0.{i}:{port}")).collect();
        let seeds = addrs.join(",");
        let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let metrics_env = metrics.to_string();
        let nodes: Vec<Option<ServerProcess>> = vec![
            Some(try_join_node(&addrs[0], &seeds, &[("TICKETING_METRICS_LISTEN", &metrics_env)])?),
            Some(try_join_node(&addrs[1], &seeds, &[])?),
            Some(try_join_node(&addrs[2], &seeds, &[])?),
        ];
        Ok((port, addrs, seeds, metrics, nodes))
    });

    // Waiting: every view names the state and the fix, none the majority-loss runbook.
    let (code, _, err, _) = cli(&["query", "k", "--addr", &addrs[0]]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("waiting to be founded") && err.contains("ticketing admin found"), "{err}");
    assert!(!err.contains("Losing a majority") && !err.contains("no quorum"), "{err}");
    let (code, out, err, _) = cli(&["status", "--addr", &addrs[0]]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\nrole=waiting\n"), "{out}");
    let (code, out, err, _) = cli(&["admin", "members", "--addr", &addrs[0]]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(err.contains("waiting to be founded") && !out.contains("leader "), "{out}{err}");
    let (code, out, err, _) = cli(&["top", "--once", "--addr", &addrs[0]]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("{}  waiting", addrs[0])) && out.contains("waiting to be founded"),
        "{out}"
    );
    // No node leads, so TOP KEYS is not asked: it used to be, of a node that cannot
    // answer it, and waited out its budget twice (11 s) to print a timeout.
    assert!(out.contains("keys: no leader known: the queues live on the leader"), "{out}");
    let (code, body) = http_get(metrics, "/readyz");
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("waiting to be founded") && body.contains("ticketing admin found"), "{body}");

    // One listed node down: each listed node's state, at once, and no other address.
    nodes[1].take().unwrap().kill();
    let (code, out, err, took) = cli(&["admin", "found", &seeds]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(err.contains("nothing founded"), "{err}");
    assert!(err.contains(&format!("{}: connection refused", addrs[1])), "{err}");
    for at in [&addrs[0], &addrs[2]] {
        assert!(err.contains(&format!("{at}: waiting to be founded (node ")), "{err}");
    }
    assert!(!err.contains(":5225"), "only the listed addresses are asked: {err}");
    // The answers, not the request budget (5 s): it takes a fraction of a second.
    assert!(took < ticketing::cli::CLI_REQUEST_TIMEOUT, "admin found took {took:?}");

    // The node comes back; founded.
    nodes[1] = Some(join_node(&addrs[1], &seeds, &[]));
    let (code, out, err, _) = cli(&["admin", "found", &seeds]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out.lines().filter(|l| l.contains(": founding=")).count(), 3, "{out}");

    // Healthy members are heard, not unreachable.
    let healthy = || {
        let lines = voter_lines(&addrs[0]);
        lines.len() == 3
            && lines.iter().filter(|l| l.contains("  heard ") && l.ends_with(" s ago")).count() == 2
            && !lines.iter().any(|l| l.contains("unreachable"))
    };
    assert!(eventually(Duration::from_secs(15), healthy), "{:?}", voter_lines(&addrs[0]));
    let (code, body) = http_get(metrics, "/readyz");
    assert_eq!(code, 200, "{body}");

    // Run again: founded already, nothing sent.
    let again = || {
        let (code, out, err, _) = cli(&["admin", "found", &seeds]);
        let ok = code == 0 && out.starts_with("founded already: ") && out.contains("nothing changed");
        assert!(!out.contains("founding="), "{out}");
        (ok, format!("{code}: {out}{err}"))
    };
    let (ok, said) = again();
    assert!(ok, "{said}");

    // A heal: the third node dies and comes back as a fresh process at its address; the
    // autopilot swaps it in. The recipe run again still founds nothing.
    // "voter    ID@ADDR  incarnation ...": the voter at the third address.
    let third = || {
        let lines = voter_lines(&addrs[0]);
        let at = format!("@{}", addrs[2]);
        let id = lines.iter().filter_map(|l| l.split_whitespace().nth(1)).find(|m| m.ends_with(&at));
        (lines.len(), id.map(str::to_owned))
    };
    let (_, before) = third();
    assert!(before.is_some(), "{:?}", voter_lines(&addrs[0]));
    nodes[2].take().unwrap().kill();
    nodes[2] = Some(join_node(&addrs[2], &seeds, &[]));
    let healed = || {
        let (voters, now) = third();
        voters == 3 && now.is_some() && now != before
    };
    assert!(eventually(Duration::from_secs(40), healed), "{:?}", voter_lines(&addrs[0]));
    // Every node reports the new configuration within a heartbeat or so.
    assert!(eventually(Duration::from_secs(5), || again().0), "{}", again().1);

    // A node joining under a fixed id waits for `admin replace`: it says whom it joins,
    // and a client given only its address is sent to that leader.
    // At the cluster's port, or another when that was taken.
    let mut fourth_port = port;
    let (fourth, joining) = with_fresh_ports("the fourth node", || {
        let fourth = format!("127.0.0.4:{fourth_port}");
        fourth_port = free_port_pair();
        let joining = Server::new()
            .listen(&fourth)
            .member(Some(4_000_004), &fourth, &seeds, "join")
            .env("TICKETING_AUTOPILOT_DEAD_MS", DEAD_MS)
            .try_start()?;
        Ok((fourth, joining))
    });
    let status_of_fourth = || cli(&["status", "--node", "--addr", &fourth]).1;
    assert!(eventually(Duration::from_secs(15), || status_of_fourth().contains("\nrole=joining\n")));
    let (code, out, err, _) = cli(&["admin", "members", "--addr", &fourth]);
    assert!(
        (code == 3 && err.contains("is joining the cluster led by node "))
            || (code == 0 && out.contains("voter ")),
        "{out}{err}"
    );
    let (code, out, err, _) = cli(&["query", "k", "--addr", &fourth]);
    assert_eq!((code, out.trim()), (0, "free"), "{err}");
    drop(joining);
    drop(nodes);
}

/// Three nodes on a port picked for them (another when one was taken) started as the
/// recipe starts them and founded by `admin found`.
fn founded_cluster() -> (Vec<String>, Vec<ServerProcess>) {
    let (port, addrs, seeds, nodes) = with_fresh_ports("three waiting nodes", || {
        let port = free_port_pair();
        let addrs: Vec<String> = (1..=3).map(|i| format!("127.0.0.{i}:{port}")).collect();
        let seeds = addrs.join(",");
        let nodes = addrs.iter().map(|a| try_join_node(a, &seeds, &[])).collect::<Result<Vec<_>, _>>()?;
        Ok((port, addrs, seeds, nodes))
    });
    let (code, out, err, _) = cli(&["admin", "found", &seeds]);
    assert_eq!(code, 0, "{out}{err}");
    // Every node names the same leader.
    let led = || {
        let leaders: Vec<Option<String>> = addrs
            .iter()
            .map(|a| common::raw::status(a.parse().unwrap()).and_then(|s| s.get("leader_id").cloned()))
            .collect();
        leaders[0].as_ref().is_some_and(|l| !l.is_empty() && l != "0")
            && leaders.iter().all(|l| *l == leaders[0])
    };
    assert!(eventually(Duration::from_secs(15), led), "no leader after founding on port {port}");
    (addrs, nodes)
}

/// A node at 127.0.0.`host` waiting to join a member that does not run (at
/// 127.0.0.5), on a port picked for it (another when that was taken); its address.
fn waiting_node(host: u8) -> (String, ServerProcess) {
    with_fresh_ports("a waiting node", || {
        let port = free_port_pair();
        let at = format!("127.0.0.{host}:{port}");
        Ok((at.clone(), try_join_node(&at, &format!("127.0.0.5:{port}"), &[])?))
    })
}

#[test]
fn found_again_is_founded_already_only_for_one_running_cluster() {
    let (x, _x_nodes) = founded_cluster();
    let (y, _y_nodes) = founded_cluster();

    // One running cluster, one listed address down: founded already, the address named.
    let nobody = format!("127.0.0.9:{}", free_port());
    let list = format!("{},{},{nobody}", x[0], x[1]);
    let (code, out, err, _) = cli(&["admin", "found", &list]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("founded already: ") && out.contains("led by node "), "{out}");
    assert!(out.contains(&format!("{nobody}: connection refused")), "{out}");

    // Nodes of two clusters: refused, each node's line says which leader it follows.
    let list = format!("{},{},{}", x[0], x[1], y[0]);
    let (code, out, err, _) = cli(&["admin", "found", &list]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(!out.contains("founded already") && err.contains("nothing founded"), "{out}{err}");
    assert_eq!(err.matches("belongs to a cluster already").count(), 3, "{err}");

    // A node waiting to be founded beside members of a cluster: refused too.
    let (lone, _waiting) = waiting_node(4);
    let list = format!("{},{},{lone}", x[0], x[1]);
    let (code, out, err, _) = cli(&["admin", "found", &list]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains(&format!("{lone}: waiting to be founded")), "{err}");

    // Nothing answering but waiting nodes and a refused address: nothing founded (3).
    let (lone2, _waiting2) = waiting_node(6);
    let (code, out, err, _) = cli(&["admin", "found", &format!("{lone},{lone2},{nobody}")]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(err.contains("nothing founded"), "{err}");
}
