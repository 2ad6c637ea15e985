//! One cluster per client and per node (docs/security.md §6): two clusters that share
//! every secret never both grant one key to clients whose seed lists mix them, named or
//! not; a node whose peers have another cluster name, another peer secret or two
//! fencing domains stops at once (exit 2) naming the variable to fix.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use ticketing::proto::frame::{Request, Response};

/// Every CLI run and every server exit a test waits for ends by then, or fails the test.
const DEADLINE: Duration = Duration::from_secs(60);

/// `ticketing ARGS` with the client secret and `env`: (exit status, stdout, stderr).
/// Killed, and the test failed, if it runs past [`DEADLINE`].
fn cli(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .env_clear()
        .env("TICKETING_AUTH_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = KillOnDrop(cmd.spawn().expect("ticketing runs"));
    let status = eventually_some(DEADLINE, || child.0.try_wait().unwrap())
        .unwrap_or_else(|| panic!("ticketing {args:?} ran past {DEADLINE:?}"));
    let read = |r: Option<&mut dyn std::io::Read>| {
        let mut text = String::new();
        if let Some(r) = r {
            let _ = r.read_to_string(&mut text);
        }
        text
    };
    let out = read(child.0.stdout.as_mut().map(|s| s as &mut dyn std::io::Read));
    let err = read(child.0.stderr.as_mut().map(|s| s as &mut dyn std::io::Read));
    (status.code().unwrap_or(-1), out, err)
}

/// The owner holding `key` in `cluster` (asked of its leader), or `None` when free.
fn holder(cluster: &Cluster, key: &str) -> Option<String> {
    let leader = cluster.wait_leader(DEADLINE);
    let mut c = connect(cluster.addr(leader));
    match c.call(1, &Request::Query { key: key.into() }) {
        Response::Holder { owner, .. } => Some(owner),
        Response::Free => None,
        other => panic!("QUERY answered {other:?}"),
    }
}

/// The fencing domain of `cluster`, as its leader reports it once it has one.
fn domain_of(cluster: &Cluster) -> String {
    let read = || status_field(cluster.addr(cluster.wait_leader(DEADLINE)), "domain");
    assert!(eventually(DEADLINE, || !matches!(read().as_str(), "0" | "")), "no fencing domain reported");
    read()
}

/// The value of `name` in the STATUS of the node at `addr`.
fn status_field(addr: std::net::SocketAddr, name: &str) -> String {
    status_map(&mut connect(addr), 1).get(name).cloned().unwrap_or_default()
}

/// A seed list that mixes the clusters: two nodes of one, one of the other, in an order
/// drawn from `draw`.
fn mixed_seeds(a: &Cluster, b: &Cluster, draw: u64) -> String {
    let (two, one) = if draw.is_multiple_of(2) { (a, b) } else { (b, a) };
    let mut seeds = [
        two.addr((draw / 2 % 3) as usize).to_string(),
        two.addr(((draw / 2 + 1) % 3) as usize).to_string(),
        one.addr((draw / 6 % 3) as usize).to_string(),
    ];
    seeds.rotate_left((draw / 18 % 3) as usize);
    seeds.join(",")
}

/// Runs `ticketing acquire KEY` for every client at once (its name, if any, and its
/// seeds) and returns each one's (exit status, stdout, stderr).
fn contend(key: &str, clients: &[(Option<&str>, String)]) -> Vec<(i32, String, String)> {
    let threads: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(i, (name, seeds))| {
            let (key, name, seeds) = (key.to_owned(), name.map(str::to_owned), seeds.clone());
            std::thread::spawn(move || {
                let owner = format!("client-{i}");
                let mut env = vec![("TICKETING_ADDRS", seeds.as_str()), ("TICKETING_OWNER", owner.as_str())];
                if let Some(name) = &name {
                    env.push(("TICKETING_CLUSTER_NAME", name.as_str()));
                }
                cli(&["acquire", &key, "--lease", "120", "--wait", "3000"], &env)
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn clients_whose_seeds_mix_two_clusters_sharing_every_secret_never_get_grants_from_both() {
    // No names: the clients compare fencing domains.
    let a = Cluster::start(3, &[]);
    let b = Cluster::start(3, &[]);
    a.wait_leader(DEADLINE);
    b.wait_leader(DEADLINE);
    let (da, db) = (domain_of(&a), domain_of(&b));
    assert_ne!(da, db);
    // The control: one cluster's seeds alone serve.
    let seeds_a = a.addrs().join(",");
    let (code, _, err) = cli(&["acquire", "control", "--lease", "5"], &[("TICKETING_ADDRS", &seeds_a)]);
    assert_eq!(code, 0, "{err}");

    let clients: Vec<(Option<&str>, String)> =
        (0..20u64).map(|i| (None, mixed_seeds(&a, &b, i * 7 + 3))).collect();
    let results = contend("seat:78", &clients);
    let (ha, hb) = (holder(&a, "seat:78"), holder(&b, "seat:78"));
    assert!(ha.is_none() || hb.is_none(), "both clusters hold seat:78: {ha:?} and {hb:?}\n{results:#?}");
    for (code, _, err) in &results {
        if *code == 3 {
            assert!(
                err.contains(&format!("fencing domain {da}"))
                    && err.contains(&format!("fencing domain {db}")),
                "a refusal names both domains: {err}"
            );
            assert!(err.contains("TICKETING_ADDRS") && err.contains("TICKETING_CLUSTER_NAME"), "{err}");
        }
    }
    let refused = results.iter().filter(|(code, _, _)| *code == 3).count();
    assert!(refused > 0, "no client saw the two domains: {results:#?}");
}

#[test]
fn named_clients_use_only_their_cluster_and_unnamed_ones_with_mixed_seeds_serve_nothing() {
    let a = Cluster::start(3, &[("TICKETING_CLUSTER_NAME", "alpha")]);
    let b = Cluster::start(3, &[("TICKETING_CLUSTER_NAME", "beta")]);
    a.wait_leader(DEADLINE);
    b.wait_leader(DEADLINE);
    assert_eq!(status_field(a.addr(1), "cluster_name"), "alpha");
    assert_eq!(status_field(b.addr(2), "cluster_name"), "beta");

    let clients: Vec<(Option<&str>, String)> = (0..20u64)
        .map(|i| (if i % 2 == 0 { Some("alpha") } else { None }, mixed_seeds(&a, &b, i * 5 + 1)))
        .collect();
    let results = contend("seat:78", &clients);
    let (ha, hb) = (holder(&a, "seat:78"), holder(&b, "seat:78"));
    assert!(hb.is_none(), "beta granted seat:78 to {hb:?}: {results:#?}");
    let ha = ha.expect("a client named alpha holds seat:78");
    let winner: usize = ha.strip_prefix("client-").unwrap().parse().unwrap();
    assert!(clients[winner].0 == Some("alpha"), "{ha} is not a client named alpha");
    for (i, (code, _, err)) in results.iter().enumerate() {
        match clients[i].0 {
            // Named: granted once, the others queued behind it and timed out.
            Some(_) => assert!(*code == 0 || *code == 1, "client {i}: {code} {err}"),
            None => assert!(*code == 3 || *code == 1, "client {i}: {code} {err}"),
        }
    }

    // A name no node has: every node is refused, naming both names and the variable.
    let seeds = format!("{},{}", a.addr(0), b.addr(0));
    let (code, _, err) =
        cli(&["query", "k"], &[("TICKETING_ADDRS", &seeds), ("TICKETING_CLUSTER_NAME", "gamma")]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("cluster name \"alpha\"") || err.contains("cluster name \"beta\""), "{err}");
    assert!(err.contains("\"gamma\"") && err.contains("TICKETING_CLUSTER_NAME"), "{err}");
    // A bad name is refused before any I/O.
    let (code, _, err) =
        cli(&["query", "k"], &[("TICKETING_ADDRS", &seeds), ("TICKETING_CLUSTER_NAME", "a b")]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("TICKETING_CLUSTER_NAME"), "{err}");
}

/// A node started to join `seeds` with `extra` environment; it listens, then stops.
/// Started again on another port when its port was taken.
fn joiner(seeds: &str, extra: &[(&str, &str)]) -> ServerProcess {
    with_fresh_ports("a joining node", || try_joiner(seeds, extra))
}

/// [`joiner`] once, or why it did not listen.
fn try_joiner(seeds: &str, extra: &[(&str, &str)]) -> Result<ServerProcess, String> {
    let port = free_port_pair();
    let addr = format!("127.0.0.9:{port}");
    Server::new().listen(&addr).member(None, &addr, seeds, "join").envs(extra).try_start()
}

/// Its exit status and the line it stopped with, waiting up to [`DEADLINE`].
fn stops_with(node: &mut ServerProcess, what: &str) -> (Option<i32>, String) {
    let code = node.exit_code_within(DEADLINE, what);
    let lines: Vec<String> = node.log.try_iter().collect();
    let last = lines.iter().rev().find(|l| l.starts_with("ticketing: ")).cloned().unwrap_or_default();
    (code, last)
}

#[test]
fn a_joining_node_of_another_name_or_none_stops_naming_the_variable() {
    let a = Cluster::start(3, &[("TICKETING_CLUSTER_NAME", "alpha")]);
    a.wait_leader(DEADLINE);
    let seeds = a.addrs().join(",");
    let mut beta = joiner(&seeds, &[("TICKETING_CLUSTER_NAME", "beta")]);
    let (code, line) = stops_with(&mut beta, "a node named beta joining alpha");
    assert_eq!(code, Some(2), "{line}");
    assert!(
        line.contains("TICKETING_CLUSTER_NAME") && line.contains("\"alpha\"") && line.contains("\"beta\""),
        "{line}"
    );
    let mut unnamed = joiner(&seeds, &[]);
    let (code, line) = stops_with(&mut unnamed, "a node without a name joining alpha");
    assert_eq!(code, Some(2), "{line}");
    assert!(line.contains("TICKETING_CLUSTER_NAME") && line.contains("none"), "{line}");
    // The cluster took neither in.
    let members = status_field(a.addr(0), "learners");
    assert!(members.is_empty(), "learners: {members}");
}

#[test]
fn a_joining_node_whose_peers_are_of_two_domains_stops_naming_both() {
    let a = Cluster::start(3, &[]);
    let b = Cluster::start(3, &[]);
    a.wait_leader(DEADLINE);
    b.wait_leader(DEADLINE);
    let (da, db) = (domain_of(&a), domain_of(&b));
    let mut node = joiner(&format!("{},{}", a.addr(1), b.addr(2)), &[]);
    let (code, line) = stops_with(&mut node, "a node joining two clusters");
    assert_eq!(code, Some(2), "{line}");
    assert!(
        line.contains(&format!("fencing domain {da}")) && line.contains(&format!("fencing domain {db}")),
        "{line}"
    );
    assert!(line.contains("TICKETING_CLUSTER_PEERS"), "{line}");
}

#[test]
fn a_node_with_another_peer_secret_stops_naming_it_and_the_others_blame_the_right_secret() {
    let a = Cluster::start(3, &[]);
    a.wait_leader(DEADLINE);
    let mut node =
        joiner(&a.addrs().join(","), &[("TICKETING_PEER_AUTH_TOKEN", "another-peer-secret-0123456789")]);
    let (code, line) = stops_with(&mut node, "a joining node with another peer secret");
    assert_eq!(code, Some(2), "{line}");
    assert!(line.contains("TICKETING_PEER_AUTH_TOKEN"), "{line}");
    // What its members logged of it names both secrets (it used the client port).
    let said = a.nodes[0].as_ref().unwrap().log.try_iter().find(|l| l.contains("authentication failed"));
    if let Some(said) = said {
        assert!(said.contains("TICKETING_PEER_AUTH_TOKEN"), "{said}");
    }
}

#[test]
fn a_founder_with_a_typo_stops_and_the_other_two_found_the_cluster() {
    for (var, wrong) in
        [("TICKETING_CLUSTER_NAME", "prdo"), ("TICKETING_PEER_AUTH_TOKEN", "another-peer-secret-0123456789")]
    {
        let right: &[(&str, &str)] = &[("TICKETING_CLUSTER_NAME", "prod")];
        let wrong_env: Vec<(&str, &str)> =
            if var == "TICKETING_CLUSTER_NAME" { vec![(var, wrong)] } else { vec![right[0], (var, wrong)] };
        let (mut cluster, _) = Cluster::start_each(3, |i, _| {
            let env: &[(&str, &str)] = if i == 2 { &wrong_env } else { right };
            env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        });
        let (code, line) =
            stops_with(cluster.nodes[1].as_mut().unwrap(), &format!("the founder with {var}={wrong}"));
        assert_eq!(code, Some(2), "{var}: {line}");
        assert!(line.contains(var), "{var}: {line}");
        cluster.nodes[1] = None;
        let leader = cluster.wait_leader(DEADLINE);
        assert_ne!(leader, 1);
        for i in [0, 2] {
            assert!(
                cluster.nodes[i].as_mut().unwrap().wait_exit(Duration::ZERO).is_none(),
                "node {} runs",
                i + 1
            );
        }
    }
}

/// (status code, body) of `GET path` on `addr`.
fn http_get(addr: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let addr: std::net::SocketAddr = addr.parse().unwrap();
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else {
        return (0, String::new());
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = write!(s, "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let code = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, text.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_string())
}

#[test]
fn a_waiting_node_whose_members_cannot_be_asked_is_not_advised_to_found() {
    // Its one member address has no server: founding is not the fix.
    let nobody = format!("127.0.0.1:{}", free_port_pair());
    let (node, metrics) = with_fresh_ports("a waiting node", || {
        let metrics = format!("127.0.0.1:{}", free_port());
        Ok((try_joiner(&nobody, &[("TICKETING_METRICS_LISTEN", &metrics)])?, metrics))
    });
    let said = std::cell::RefCell::new(String::new());
    let waiting = eventually(DEADLINE, || {
        let (code, body) = http_get(&metrics, "/readyz");
        let done = code == 503 && body.contains("waiting to join");
        *said.borrow_mut() = body;
        done
    });
    let said = said.into_inner();
    assert!(waiting, "/readyz never said why the node waits: {said}");
    assert!(said.contains(&nobody) && !said.contains("admin found"), "{said}");
    drop(node);
}
