//! The deployment files in deploy/ and scripts/replace-node.sh: the systemd units pass
//! `systemd-analyze verify` (when the tool is installed; `.ci/run` tries to install it), the
//! Dockerfile and the Kubernetes example keep the properties docs/deploy.md promises,
//! and replace-node.sh really replaces a node of a running 3-node cluster (with a
//! stand-in for systemctl that starts the unit's command).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Cluster, PEER_TOKEN, TOKEN};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap()
}

fn which(tool: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(tool)).find(|p| p.is_file())
}

#[test]
fn systemd_units_pass_systemd_analyze_verify() {
    let Some(tool) = which("systemd-analyze") else {
        eprintln!("SKIPPED: systemd-analyze is not installed (apt-get install systemd; .ci/run does)");
        return;
    };
    // verify checks that ExecStart's binary exists: point the units at the one just built.
    let dir = tempfile::tempdir().unwrap();
    for unit in ["ticketing.service", "ticketing@.service"] {
        let text = read(&format!("deploy/{unit}"));
        assert!(text.contains("ExecStart=/usr/local/bin/ticketing server"));
        let text = text.replace("/usr/local/bin/ticketing", env!("CARGO_BIN_EXE_ticketing"));
        std::fs::write(dir.path().join(unit), text).unwrap();
    }
    for unit in ["ticketing.service", "ticketing@7.service"] {
        let out = Command::new(&tool).arg("verify").arg(dir.path().join(unit)).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        eprintln!("systemd-analyze verify {unit}: {}\n{stderr}", out.status);
        assert!(out.status.success(), "{unit}: {stderr}");
        // Unknown or misspelt directives are only warnings: fail on any.
        assert!(stderr.trim().is_empty(), "{unit}: {stderr}");
    }
}

#[test]
fn units_are_hardened_and_cluster_nodes_never_restart_in_place() {
    for unit in ["deploy/ticketing.service", "deploy/ticketing@.service"] {
        let text = read(unit);
        for line in
            ["ProtectSystem=strict", "NoNewPrivileges=yes", "DynamicUser=yes", "CapabilityBoundingSet="]
        {
            assert!(text.lines().any(|l| l == line), "{unit} lacks {line}");
        }
    }
    // The descriptor and task limits fit the server's caps.
    for unit in ["deploy/ticketing.service", "deploy/ticketing@.service"] {
        let text = read(unit);
        let value = |name: &str| -> u64 {
            let prefix = format!("{name}=");
            let line = text.lines().find_map(|l| l.strip_prefix(prefix.as_str()));
            line.unwrap_or_else(|| panic!("{unit} lacks {name}")).parse().unwrap()
        };
        let limits = ticketing::server::Limits::for_open_files(value("LimitNOFILE"));
        assert_eq!(limits.connections_max, ticketing::server::CONNECTIONS_MAX, "{unit}: LimitNOFILE too low");
        let threads =
            2 * limits.connections_max + limits.handshakes_max + ticketing::cluster::PEER_HANDSHAKES_MAX + 64;
        assert!(value("TasksMax") as usize >= threads, "{unit}: TasksMax below {threads}");
    }
    let node = read("deploy/ticketing@.service");
    assert!(node.lines().any(|l| l == "Restart=no"));
    assert!(node.contains("Environment=TICKETING_NODE_ID=%i"));
    assert!(node.contains("used-node-ids/%i"), "ExecStartPre refuses a NodeId that ran before");
}

#[test]
fn the_dockerfile_is_scratch_plus_the_static_binary() {
    let text = read("deploy/Dockerfile");
    let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).collect();
    assert_eq!(lines[0], "FROM scratch");
    let script = read("scripts/build-static.sh");
    assert!(
        script.contains("TARGET=x86_64-unknown-linux-gnu")
            && script.contains("BIN=\"target/$TARGET/release/ticketing\"")
    );
    assert!(lines.contains(&"COPY target/x86_64-unknown-linux-gnu/release/ticketing /ticketing"));
    assert!(lines.contains(&"EXPOSE 5225 6225"));
    assert!(lines.contains(&"ENTRYPOINT [\"/ticketing\"]"));
    assert!(repo().join("deploy/nsswitch.conf").is_file());
}

#[test]
fn the_kubernetes_example_never_restarts_a_node_in_place() {
    let text = read("deploy/kubernetes.yaml");
    let kinds: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("kind: ")).collect();
    assert!(!kinds.contains(&"StatefulSet") && !kinds.contains(&"Deployment"), "{kinds:?}");
    let pods = kinds.iter().filter(|k| **k == "Pod").count();
    assert_eq!(pods, 3);
    assert_eq!(text.matches("\n  restartPolicy: Never").count(), pods, "every node pod: restartPolicy Never");
    assert_eq!(text.matches("metadata.labels['ticketing/node-id']").count(), pods);
    // Well-formed YAML, where python3 with PyYAML is at hand.
    let check = "import sys, yaml; docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]; \
                 assert [d['kind'] for d in docs].count('Pod') == 3";
    match Command::new("python3").args(["-c", check]).arg(repo().join("deploy/kubernetes.yaml")).output() {
        Ok(out) if out.status.success() => {}
        Ok(out) if String::from_utf8_lossy(&out.stderr).contains("No module named 'yaml'") => {
            eprintln!("kubernetes.yaml not parsed: PyYAML is not installed")
        }
        Ok(out) => panic!("kubernetes.yaml: {}", String::from_utf8_lossy(&out.stderr)),
        Err(_) => eprintln!("kubernetes.yaml not parsed: no python3"),
    }
    // The replacement pod is the same pod with a placeholder NodeId, in join mode.
    let replacement = read("deploy/kubernetes-replacement.yaml");
    assert!(replacement.contains("ticketing/cluster-state: \"join\"") && replacement.contains("NEW_ID"));
    assert!(replacement.contains("\n  restartPolicy: Never"));
}

/// Both Kubernetes files validate against the Kubernetes schemas (kubernetes-validate,
/// offline; `.ci/run` installs it): the example as it is, the replacement template once
/// its placeholder is filled in as the docs say.
#[test]
fn the_kubernetes_files_validate_against_the_schemas() {
    let Ok(probe) = Command::new("kubernetes-validate").arg("--version").output() else {
        assert!(
            std::env::var_os("TICKETING_REQUIRE_K8S_VALIDATE").is_none(),
            "kubernetes-validate is required here but not installed"
        );
        eprintln!("SKIPPED: kubernetes-validate is not installed (pip install kubernetes-validate)");
        return;
    };
    assert!(probe.status.success());
    let dir = tempfile::tempdir().unwrap();
    let filled = dir.path().join("replacement-4.yaml");
    std::fs::write(&filled, read("deploy/kubernetes-replacement.yaml").replace("NEW_ID", "4")).unwrap();
    for file in [repo().join("deploy/kubernetes.yaml"), filled] {
        let out = Command::new("kubernetes-validate").arg("--strict").arg(&file).output().unwrap();
        let text =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && !text.contains("ERROR"), "{}: {text}", file.display());
    }
}

/// Kills the replacement node the fake systemctl started.
struct PidFile(PathBuf);

impl Drop for PidFile {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(&self.0) {
            let _ = Command::new("kill").arg(pid.trim()).status();
        }
    }
}

const FAKE_SYSTEMCTL: &str = r#"#!/usr/bin/env bash
# Stand-in for systemctl: runs ticketing@N.service's ExecStart with its environment files.
set -eu
cmd=$1; shift
[ "${1:-}" = --quiet ] && shift
id=${1#ticketing@}; id=${id%.service}
pid="$CONF_DIR/node-$id.pid"
case $cmd in
start)
    ( set -a; . "$CONF_DIR/cluster.env"; . "$CONF_DIR/node-$id.env"
      TICKETING_NODE_ID=$id; TICKETING_AUTH_TOKEN_FILE=$CONF_DIR/auth-token
      TICKETING_PEER_AUTH_TOKEN_FILE=$CONF_DIR/peer-token
      exec "$TICKETING" server ) >"$CONF_DIR/node-$id.log" 2>&1 &
    echo $! > "$pid" ;;
stop) kill "$(cat "$pid")" ;;
is-active) [ -e "$pid" ] && kill -0 "$(cat "$pid")" 2>/dev/null ;;
*) echo "fake systemctl: $cmd?" >&2; exit 1 ;;
esac
"#;

/// Runs scripts/replace-node.sh OLD NEW NEW_ADDR with the fake systemctl; returns
/// (exit status, stderr, how long it took).
fn replace_node(
    conf: &std::path::Path,
    fake: &std::path::Path,
    old: u64,
    new: u64,
    addr: &str,
) -> (Option<i32>, String, Duration) {
    let started = Instant::now();
    let out = Command::new(repo().join("scripts/replace-node.sh"))
        .args([old.to_string(), new.to_string(), addr.to_string(), addr.to_string()])
        .env("CONF_DIR", conf)
        .env("TICKETING", env!("CARGO_BIN_EXE_ticketing"))
        .env("SYSTEMCTL", fake)
        .env_remove("TICKETING_ADDRS")
        .env_remove("TICKETING_AUTH_TOKEN")
        .env_remove("TICKETING_PEER_AUTH_TOKEN")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    eprintln!("replace-node.sh {old} {new} {addr}: {}\n{stderr}", out.status);
    (out.status.code(), stderr, started.elapsed())
}

/// The voter ids TICKETING_CLUSTER_PEERS lists in cluster.env.
fn env_voters(conf: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(conf.join("cluster.env")).unwrap();
    let peers = text.lines().find_map(|l| l.strip_prefix("TICKETING_CLUSTER_PEERS=")).unwrap().to_string();
    let mut ids: Vec<String> = peers.split(',').map(|p| p.split('@').next().unwrap().to_string()).collect();
    ids.sort();
    ids
}

/// The documented rolling restart (docs/operations.md), done with the script three
/// times, once from a cluster.env that still lists a node that left; and the mistakes:
/// an OLD id that is no voter, a NEW id that was used.
#[test]
fn replace_node_script_does_a_rolling_restart_and_refuses_mistakes_quickly() {
    use std::os::unix::fs::PermissionsExt;
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_leader(Duration::from_secs(20));
    let conf = tempfile::tempdir().unwrap();
    let original = format!("TICKETING_CLUSTER_PEERS={}\n", cluster.peers);
    std::fs::write(conf.path().join("cluster.env"), &original).unwrap();
    std::fs::write(conf.path().join("auth-token"), TOKEN).unwrap();
    std::fs::write(conf.path().join("peer-token"), PEER_TOKEN).unwrap();
    let fake = conf.path().join("systemctl");
    std::fs::write(&fake, FAKE_SYSTEMCTL).unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let _started: Vec<PidFile> =
        (4..=7).map(|id| PidFile(conf.path().join(format!("node-{id}.pid")))).collect();
    let port = cluster.port;
    let addr = |id: u64| format!("127.0.0.{id}:{port}");

    // A wrong OLD id: refused within 10 s with exit 1; nothing started, nothing written.
    let (code, err, took) = replace_node(conf.path(), &fake, 99, 7, &addr(7));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("node 99 is not a voter"), "{err}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(!conf.path().join("node-7.env").exists() && !conf.path().join("node-7.pid").exists());
    assert_eq!(std::fs::read_to_string(conf.path().join("cluster.env")).unwrap(), original);

    // The rolling restart: 1 → 4, 2 → 5 (from the stale cluster.env), 3 → 6.
    for (old, new) in [(1u64, 4u64), (2, 5), (3, 6)] {
        if old == 2 {
            std::fs::write(conf.path().join("cluster.env"), &original).unwrap();
        }
        let (code, err, took) = replace_node(conf.path(), &fake, old, new, &addr(new));
        assert_eq!(code, Some(0), "{err}");
        assert!(took < Duration::from_secs(60), "replacing {old} took {took:?}");
        let env = std::fs::read_to_string(conf.path().join(format!("node-{new}.env"))).unwrap();
        assert!(env.contains("TICKETING_CLUSTER_STATE=join"));
        // cluster.env now lists exactly the voters.
        let mut expected: Vec<String> = [1u64, 2, 3, 4, 5, 6]
            .into_iter()
            .filter(|id| (*id > 3 && *id <= new) || (*id <= 3 && *id > old))
            .map(|id| id.to_string())
            .collect();
        expected.sort();
        assert_eq!(env_voters(conf.path()), expected, "after replacing {old}");
        // The removed node stops by itself.
        let node = cluster.nodes[old as usize - 1].as_mut().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while node.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "node {old} did not stop after its removal");
            std::thread::sleep(Duration::from_millis(50));
        }
        cluster.kill(old as usize - 1);
    }

    // NEW ids that were used: refused at once, nothing started.
    let (code, err, _) = replace_node(conf.path(), &fake, 4, 5, &addr(7));
    assert_eq!(code, Some(1), "{err}");
    let (code, err, took) = replace_node(conf.path(), &fake, 4, 2, &addr(7));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("was a member before"), "{err}");
    assert!(took < Duration::from_secs(10), "{took:?}");
}

/// Every `docs/FILE.md ("Section")` a deployment file points to exists, and so does the
/// section.
#[test]
fn deployment_files_point_at_sections_that_exist() {
    let mut checked = 0;
    for file in [
        "deploy/Dockerfile",
        "deploy/kubernetes.yaml",
        "deploy/kubernetes-replacement.yaml",
        "deploy/ticketing.service",
        "deploy/ticketing@.service",
    ] {
        let text = read(file);
        for (at, _) in text.match_indices("docs/") {
            let rest = &text[at..];
            let Some(end) = rest.find(".md") else { continue };
            let doc = &rest[..end + 3];
            let body = std::fs::read_to_string(repo().join(doc))
                .unwrap_or_else(|_| panic!("{file}: {doc} does not exist"));
            // A section named right after it: docs/x.md ("Name") or docs/x.md, "Name".
            let after = rest[end + 3..].trim_start_matches([' ', '(', ',']);
            if let Some(quoted) = after.strip_prefix('"') {
                let name = &quoted[..quoted.find('"').unwrap()];
                let headings: Vec<&str> = body.lines().filter(|l| l.starts_with('#')).collect();
                assert!(headings.iter().any(|h| h.contains(name)), "{file}: {doc} has no section {name:?}");
                checked += 1;
            }
        }
    }
    assert!(checked >= 3, "only {checked} section references found");
}
