//! The deployment files in deploy/ and scripts/replace-node.sh: the systemd units pass
//! `systemd-analyze verify` (when the tool is installed; `.ci/run` tries to install it), the
//! Dockerfile and the Kubernetes example keep the properties docs/deploy.md promises
//! (self-healing: every restart is a fresh node in join mode, founded once by
//! `ticketing admin found`), and replace-node.sh really replaces a node of a running
//! 3-node cluster (with a stand-in for systemctl that starts the unit's command).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::children::{run_within_leaving, Within, TOOL};
use common::{eventually_every, repo, Cluster, PEER_TOKEN, TOKEN};

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap()
}

fn which(tool: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(tool)).find(|p| p.is_file())
}

/// The systemd units in deploy/.
const UNITS: [&str; 3] = ["ticketing.service", "ticketing-node.service", "ticketing@.service"];

#[test]
fn systemd_units_pass_systemd_analyze_verify() {
    let Some(tool) = which("systemd-analyze") else {
        eprintln!("SKIPPED: systemd-analyze is not installed (apt-get install systemd; .ci/run does)");
        return;
    };
    // verify checks that ExecStart's binary exists: point the units at the one just built.
    let dir = tempfile::tempdir().unwrap();
    for unit in UNITS {
        let text = read(&format!("deploy/{unit}"));
        assert!(text.contains("ExecStart=/usr/local/bin/ticketing server"));
        let text = text.replace("/usr/local/bin/ticketing", env!("CARGO_BIN_EXE_ticketing"));
        std::fs::write(dir.path().join(unit), text).unwrap();
    }
    for unit in ["ticketing.service", "ticketing-node.service", "ticketing@7.service"] {
        let out = Command::new(&tool).arg("verify").arg(dir.path().join(unit)).output_within(TOOL);
        let stderr = String::from_utf8_lossy(&out.stderr);
        eprintln!("systemd-analyze verify {unit}: {}\n{stderr}", out.status);
        assert!(out.status.success(), "{unit}: {stderr}");
        // Unknown or misspelt directives are only warnings: fail on any.
        assert!(stderr.trim().is_empty(), "{unit}: {stderr}");
    }
}

/// The lines of `text` that are directives (no comments, no blank lines).
fn directives(text: &str) -> Vec<&str> {
    text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect()
}

#[test]
fn units_are_hardened_and_restart_as_documented() {
    for unit in UNITS {
        let unit = format!("deploy/{unit}");
        let text = read(&unit);
        for line in
            ["ProtectSystem=strict", "NoNewPrivileges=yes", "DynamicUser=yes", "CapabilityBoundingSet="]
        {
            assert!(text.lines().any(|l| l == line), "{unit} lacks {line}");
        }
        // The descriptor and task limits fit the server's caps.
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
    // Both cluster units hand the secrets over as credentials.
    for unit in ["deploy/ticketing-node.service", "deploy/ticketing@.service"] {
        let text = read(unit);
        let lines = directives(&text);
        for line in [
            "LoadCredential=auth-token:/etc/ticketing/auth-token",
            "Environment=TICKETING_AUTH_TOKEN_FILE=%d/auth-token",
            "LoadCredential=peer-token:/etc/ticketing/peer-token",
            "Environment=TICKETING_PEER_AUTH_TOKEN_FILE=%d/peer-token",
        ] {
            assert!(lines.contains(&line), "{unit} lacks {line}");
        }
    }

    // The self-healing unit: every start is a fresh node in join mode, restarted after
    // anything but a configuration mistake (exit 2).
    let healing = read("deploy/ticketing-node.service");
    let lines = directives(&healing);
    for line in [
        "Restart=always",
        "RestartSec=2s",
        "RestartPreventExitStatus=2",
        "Environment=TICKETING_CLUSTER_STATE=join",
        "EnvironmentFile=/etc/ticketing/cluster.env",
        "EnvironmentFile=/etc/ticketing/node.env",
        "UnsetEnvironment=TICKETING_NODE_ID",
    ] {
        assert!(lines.contains(&line), "ticketing-node.service lacks {line}");
    }
    // No fixed NodeId anywhere, and no guard of used ids (the ids are fresh).
    for line in &lines {
        assert!(
            !line.contains("TICKETING_NODE_ID") || line.starts_with("UnsetEnvironment="),
            "ticketing-node.service sets a NodeId: {line}"
        );
        assert!(!line.contains("used-node-ids") && !line.starts_with("StateDirectory="), "{line}");
    }
    assert_eq!(lines.iter().filter(|l| l.starts_with("Restart=")).count(), 1);
    assert!(healing.contains("ticketing admin found"), "the header names the founding step");

    // The manual unit: fixed ids, never restarted in place.
    let node = read("deploy/ticketing@.service");
    assert!(node.lines().any(|l| l == "Restart=no"));
    assert!(node.contains("Environment=TICKETING_NODE_ID=%i"));
    assert!(node.contains("used-node-ids/%i"), "ExecStartPre refuses a NodeId that ran before");
    assert!(node.contains("ticketing-node.service"), "the header points at the self-healing unit");
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

/// The pod names `ticketing-N` in a comma-separated list of `ticketing-N.ticketing-peers:5225`.
fn pods_in(list: &str) -> Vec<String> {
    list.split(',')
        .map(|a| {
            let pod = a.strip_suffix(".ticketing-peers:5225").unwrap_or_else(|| panic!("{a:?}"));
            assert!(pod.strip_prefix("ticketing-").is_some_and(|n| n.parse::<u32>().is_ok()), "{a:?}");
            pod.to_string()
        })
        .collect()
}

#[test]
fn the_kubernetes_example_heals_itself_and_is_founded_once() {
    let text = read("deploy/kubernetes.yaml");
    let kinds: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("kind: ")).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "StatefulSet").count(), 1, "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| **k == "Job").count(), 1, "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| **k == "PodDisruptionBudget").count(), 1, "{kinds:?}");
    assert!(!kinds.contains(&"Pod") && !kinds.contains(&"Deployment"), "{kinds:?}");
    // Nothing in the file keeps a node from restarting (a restart is a fresh node), and
    // no pod has a fixed NodeId.
    assert!(!text.contains("restartPolicy: Never"));
    assert!(!text.contains("name: TICKETING_NODE_ID"));
    assert!(!text.contains("kubernetes-replacement"));
    for line in [
        "  serviceName: ticketing-peers",
        "  podManagementPolicy: Parallel",
        "  publishNotReadyAddresses: true",
        "      restartPolicy: OnFailure",
        // Never a rolling update (two voters restarted within seconds lose the
        // majority), and a drain evicts one pod at a time.
        "    type: OnDelete",
        "  maxUnavailable: 1",
    ] {
        assert!(text.lines().any(|l| l == line), "kubernetes.yaml lacks {line:?}");
    }
    let replicas: u32 = text.lines().find_map(|l| l.strip_prefix("  replicas: ")).unwrap().parse().unwrap();
    assert!(replicas >= 4, "3 voters and at least one standby: replicas {replicas}");

    // The rest from the parsed documents, where python3 with PyYAML is at hand: it
    // prints what the assertions below read.
    let check = r#"
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
sts = [d for d in docs if d['kind'] == 'StatefulSet']
job = [d for d in docs if d['kind'] == 'Job']
assert len(sts) == 1 and len(job) == 1
sts, job = sts[0], job[0]
pod = sts['spec']['template']['spec']
assert pod.get('restartPolicy', 'Always') == 'Always', pod.get('restartPolicy')
assert pod['terminationGracePeriodSeconds'] >= 10
[c] = pod['containers']
assert c['readinessProbe']['tcpSocket']['port'] == 5225
assert 'livenessProbe' not in c
env = [e['name'] for e in c['env']]
values = {e['name']: e.get('value') for e in c['env']}
assert c['env'][0] == {'name': 'POD_NAME', 'valueFrom': {'fieldRef': {'fieldPath': 'metadata.name'}}}, c['env'][0]
secrets = {e['name']: e['valueFrom']['secretKeyRef'] for e in c['env'] if 'secretKeyRef' in e.get('valueFrom', {})}
assert set(secrets) == {'TICKETING_AUTH_TOKEN', 'TICKETING_PEER_AUTH_TOKEN'}, secrets
jpod = job['spec']['template']['spec']
assert jpod['restartPolicy'] == 'OnFailure' and job['spec']['backoffLimit'] >= 10
[jc] = jpod['containers']
jsecret = [e for e in jc['env'] if e['name'] == 'TICKETING_PEER_AUTH_TOKEN'][0]['valueFrom']['secretKeyRef']
assert jsecret == secrets['TICKETING_PEER_AUTH_TOKEN'], jsecret
for key, value in [
    ('service', sts['spec']['serviceName']), ('replicas', sts['spec']['replicas']),
    ('state', values.get('TICKETING_CLUSTER_STATE')), ('self', values.get('TICKETING_CLUSTER_SELF')),
    ('listen', values.get('TICKETING_LISTEN')), ('peers', values.get('TICKETING_CLUSTER_PEERS')),
    ('node_id', 'TICKETING_NODE_ID' in env), ('job_args', ' '.join(jc['args'])),
]:
    print(f'{key}={value}')
"#;
    let parsed = match Command::new("python3")
        .args(["-c", check])
        .arg(repo().join("deploy/kubernetes.yaml"))
        .try_output_within(TOOL)
    {
        Ok(out) if out.status.success() => Some(String::from_utf8_lossy(&out.stdout).into_owned()),
        Ok(out) if String::from_utf8_lossy(&out.stderr).contains("No module named 'yaml'") => {
            eprintln!("kubernetes.yaml not parsed: PyYAML is not installed");
            None
        }
        Ok(out) => panic!("kubernetes.yaml: {}", String::from_utf8_lossy(&out.stderr)),
        Err(_) => {
            eprintln!("kubernetes.yaml not parsed: no python3");
            None
        }
    };
    // Without PyYAML, the same values read from the text (each appears once).
    let field = |name: &str| -> String {
        let at = text.find(&format!("- name: {name}\n")).unwrap_or_else(|| panic!("no {name}"));
        let value = text[at..].lines().nth(1).unwrap().trim().strip_prefix("value: ").unwrap();
        value.trim_matches('"').to_string()
    };
    // The Job's args as written: ["admin", "found", "A,B,C"].
    let args_line = text.lines().find_map(|l| l.trim().strip_prefix("args: [\"admin\"")).unwrap();
    let text_args = format!("[\"admin\"{args_line}");
    let text_args: Vec<String> = text_args
        .trim_start_matches("[\"")
        .trim_end_matches("\"]")
        .split("\", \"")
        .map(str::to_string)
        .collect();
    let (state, self_addr, listen, peers, job_args) = match &parsed {
        Some(out) => {
            let get = |key: &str| -> String {
                let prefix = format!("{key}=");
                let value = out.lines().find_map(|l| l.strip_prefix(prefix.as_str()));
                value.unwrap_or_else(|| panic!("{key} in {out}")).to_string()
            };
            assert_eq!(get("service"), "ticketing-peers");
            assert_eq!(get("replicas"), replicas.to_string());
            assert_eq!(get("node_id"), "False", "no TICKETING_NODE_ID: every start draws a fresh one");
            let args: Vec<String> = get("job_args").split(' ').map(str::to_string).collect();
            assert_eq!(args, text_args);
            (get("state"), get("self"), get("listen"), get("peers"), args)
        }
        None => (
            field("TICKETING_CLUSTER_STATE"),
            field("TICKETING_CLUSTER_SELF"),
            field("TICKETING_LISTEN"),
            field("TICKETING_CLUSTER_PEERS"),
            text_args,
        ),
    };
    assert_eq!(state, "join");
    assert_eq!(self_addr, "$(POD_NAME).ticketing-peers:5225");
    // POD_NAME comes from the downward API and is declared before SELF uses it.
    let pod_name = text.find("- name: POD_NAME\n").expect("POD_NAME");
    assert!(text[pod_name..].lines().nth(1).unwrap().contains("fieldPath: metadata.name"));
    assert!(pod_name < text.find("- name: TICKETING_CLUSTER_SELF\n").unwrap());
    assert_eq!(listen, "0.0.0.0:5225");
    // The members to ask are the StatefulSet's pods, ticketing-0 .. ticketing-(replicas-1).
    let members = pods_in(&peers);
    let all: Vec<String> = (0..replicas).map(|n| format!("ticketing-{n}")).collect();
    assert_eq!(members, all, "TICKETING_CLUSTER_PEERS lists every pod");
    // The Job founds the cluster of 3 of those pods.
    assert_eq!(job_args.len(), 3, "{job_args:?}");
    assert_eq!(job_args[..2], ["admin", "found"], "{job_args:?}");
    let founders = pods_in(&job_args[2]);
    assert_eq!(founders.len(), 3, "{founders:?}");
    assert!(founders.iter().all(|p| all.contains(p)), "{founders:?} are not pods of the StatefulSet");
    let mut unique = founders.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 3, "{founders:?}");
}

/// The Kubernetes example validates against the Kubernetes schemas (kubernetes-validate,
/// offline; `.ci/run` installs it).
#[test]
fn the_kubernetes_files_validate_against_the_schemas() {
    let Ok(probe) = Command::new("kubernetes-validate").arg("--version").try_output_within(TOOL) else {
        assert!(
            std::env::var_os("TICKETING_REQUIRE_K8S_VALIDATE").is_none(),
            "kubernetes-validate is required here but not installed"
        );
        eprintln!("SKIPPED: kubernetes-validate is not installed (pip install kubernetes-validate)");
        return;
    };
    assert!(probe.status.success());
    let file = repo().join("deploy/kubernetes.yaml");
    let out = Command::new("kubernetes-validate").arg("--strict").arg(&file).output_within(TOOL);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("kubernetes-validate --strict {}:\n{text}", file.display());
    assert!(out.status.success() && !text.contains("ERROR"), "{}: {text}", file.display());
    // Every resource of the file was checked.
    for resource in [
        "secret/ticketing-auth",
        "service/ticketing-peers",
        "service/ticketing",
        "statefulset/ticketing",
        "poddisruptionbudget/ticketing",
        "job/ticketing-found",
    ] {
        assert!(
            text.contains(&format!("passed for resource {resource} ")),
            "{resource} not validated: {text}"
        );
    }
}

/// Kills a node the fake systemctl started.
struct PidFile(PathBuf);

impl Drop for PidFile {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(&self.0) {
            let _ = Command::new("kill").arg(pid.trim()).try_output_within(TOOL);
        }
    }
}

/// Stand-in for systemctl: runs ticketing@N.service's ExecStart with its environment
/// files, and records the exit status itself (an exited child of a gone parent may
/// linger as a zombie that `kill -0` still finds); `stop` returns once the node exited.
const FAKE_SYSTEMCTL: &str = r#"#!/usr/bin/env bash
set -eu
cmd=$1; shift
[ "${1:-}" = --quiet ] && shift
id=${1#ticketing@}; id=${id%.service}
pid="$CONF_DIR/node-$id.pid" exit_file="$CONF_DIR/node-$id.exit"
case $cmd in
start)
    rm -f "$exit_file"
    ( set -a; . "$CONF_DIR/cluster.env"; . "$CONF_DIR/node-$id.env"
      TICKETING_NODE_ID=$id; TICKETING_AUTH_TOKEN_FILE=$CONF_DIR/auth-token
      TICKETING_PEER_AUTH_TOKEN_FILE=$CONF_DIR/peer-token; set +a
      "$TICKETING" server >"$CONF_DIR/node-$id.log" 2>&1 &
      echo $! > "$pid.tmp"; mv "$pid.tmp" "$pid"
      code=0; wait $! || code=$?
      echo $code > "$exit_file" ) >/dev/null 2>&1 &
    while [ ! -e "$pid" ]; do sleep 0.02; done ;;
stop)
    # As systemd does: wait until it has exited (TimeoutStopSec=10s, then SIGKILL).
    kill "$(cat "$pid")" 2>/dev/null || true
    for _ in $(seq 200); do [ -e "$exit_file" ] && exit 0; sleep 0.05; done
    kill -9 "$(cat "$pid")" 2>/dev/null || true ;;
is-active) [ -e "$pid" ] && [ ! -e "$exit_file" ] ;;
*) echo "fake systemctl: $cmd?" >&2; exit 1 ;;
esac
"#;

/// Stand-in for `journalctl --unit ticketing@N.service --lines L ...`: the end of the log
/// the fake systemctl keeps.
const FAKE_JOURNALCTL: &str = r#"#!/usr/bin/env bash
set -eu
id="" lines=10
while [ $# -gt 0 ]; do
    case $1 in
    --unit) id=${2#ticketing@}; id=${id%.service}; shift ;;
    --lines) lines=$2; shift ;;
    esac
    shift
done
tail -n "$lines" "$CONF_DIR/node-$id.log"
"#;

/// A $CONF_DIR for replace-node.sh: cluster.env, the two secrets, and the stand-ins for
/// systemctl and journalctl; the nodes the stand-in started are killed on drop.
struct Conf {
    // Dropped first (fields drop in declaration order): the pid files must still exist.
    _started: Vec<PidFile>,
    dir: tempfile::TempDir,
}

impl Conf {
    fn new(cluster_env: &str) -> Conf {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cluster.env"), cluster_env).unwrap();
        std::fs::write(dir.path().join("auth-token"), TOKEN).unwrap();
        std::fs::write(dir.path().join("peer-token"), PEER_TOKEN).unwrap();
        for (name, text) in [("systemctl", FAKE_SYSTEMCTL), ("journalctl", FAKE_JOURNALCTL)] {
            std::fs::write(dir.path().join(name), text).unwrap();
            std::fs::set_permissions(dir.path().join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let started = (4..=9).map(|id| PidFile(dir.path().join(format!("node-{id}.pid")))).collect();
        Conf { _started: started, dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn file(&self, name: &str) -> String {
        self.path().join(name).to_str().unwrap().to_owned()
    }

    /// Runs scripts/replace-node.sh with `args`; returns (exit status, stderr, how long
    /// it took). Its deadline is 45 s, so that a run that cannot finish ends in time.
    fn replace(&self, args: &[&str]) -> (Option<i32>, String, Duration) {
        let started = Instant::now();
        let mut cmd = Command::new(repo().join("scripts/replace-node.sh"));
        cmd.args(args)
            .env("CONF_DIR", self.path())
            .env("TICKETING", env!("CARGO_BIN_EXE_ticketing"))
            .env("SYSTEMCTL", self.path().join("systemctl"))
            .env("JOURNALCTL", self.path().join("journalctl"))
            .env("REPLACE_DEADLINE_S", "45")
            .env_remove("TICKETING_ADDRS")
            .env_remove("TICKETING_AUTH_TOKEN")
            .env_remove("TICKETING_PEER_AUTH_TOKEN")
            .env_remove("TICKETING_TLS_CA");
        // The nodes it starts are the cluster's from then on: they outlive the script.
        let out = run_within_leaving(&mut cmd, TOOL, "scripts/replace-node.sh");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        eprintln!("replace-node.sh {}: {} in {:?}\n{stderr}", args.join(" "), out.status, started.elapsed());
        (out.status.code(), stderr, started.elapsed())
    }

    /// TICKETING_CLUSTER_PEERS of cluster.env, as written.
    fn peers(&self) -> String {
        let text = std::fs::read_to_string(self.path().join("cluster.env")).unwrap();
        text.lines().find_map(|l| l.strip_prefix("TICKETING_CLUSTER_PEERS=")).unwrap().to_string()
    }

    /// The voter ids TICKETING_CLUSTER_PEERS lists in cluster.env, sorted.
    fn voters(&self) -> Vec<u64> {
        let mut ids: Vec<u64> =
            self.peers().split(',').map(|p| p.split('@').next().unwrap().parse().unwrap()).collect();
        ids.sort();
        ids
    }

    /// The client addresses TICKETING_CLUSTER_PEERS lists in cluster.env.
    fn addrs(&self) -> String {
        let peers = self.peers();
        peers.split(',').map(|p| p.split_once('@').unwrap().1).collect::<Vec<_>>().join(",")
    }
}

/// Waits up to 20 s until the harness's node `old` (1-based) exits by itself.
fn exits_by_itself(cluster: &mut Cluster, old: u64) {
    let node = cluster.nodes[old as usize - 1].as_mut().unwrap();
    node.exit_code_within(Duration::from_secs(20), &format!("node {old}, removed,"));
    cluster.kill(old as usize - 1);
}

/// The documented rolling restart (docs/operations.md), done with the script three
/// times, once from a cluster.env that still lists a node that left; and the mistakes:
/// an OLD id that is no voter, a NEW id that was used.
#[test]
fn replace_node_script_does_a_rolling_restart_and_refuses_mistakes_quickly() {
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_leader(Duration::from_secs(20));
    let original = format!("TICKETING_CLUSTER_PEERS={}\n", cluster.peers);
    let conf = Conf::new(&original);
    let port = cluster.port;
    let addr = |id: u64| format!("127.0.0.{id}:{port}");

    // A wrong OLD id: refused within 10 s with exit 1; nothing started, nothing written.
    let (code, err, took) = conf.replace(&["99", "7", &addr(7), &addr(7)]);
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
        let (code, err, took) = conf.replace(&[&old.to_string(), &new.to_string(), &addr(new), &addr(new)]);
        assert_eq!(code, Some(0), "{err}");
        assert!(took < Duration::from_secs(60), "replacing {old} took {took:?}");
        let env = std::fs::read_to_string(conf.path().join(format!("node-{new}.env"))).unwrap();
        assert!(env.contains("TICKETING_CLUSTER_STATE=join"));
        // cluster.env now lists exactly the voters.
        let expected: Vec<u64> =
            (1..=6).filter(|id| (*id > 3 && *id <= new) || (*id <= 3 && *id > old)).collect();
        assert_eq!(conf.voters(), expected, "after replacing {old}");
        exits_by_itself(&mut cluster, old);
    }

    // NEW ids that were used: refused at once, nothing started.
    let (code, err, _) = conf.replace(&["4", "5", &addr(7), &addr(7)]);
    assert_eq!(code, Some(1), "{err}");
    let (code, err, took) = conf.replace(&["4", "2", &addr(7), &addr(7)]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("was a member before"), "{err}");
    assert!(took < Duration::from_secs(10), "{took:?}");
}

/// `ticketing admin members` over `addrs`: the leader's NodeId.
fn leader_id(addrs: &str, ca: Option<&str>) -> u64 {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ticketing"));
    cmd.args(["admin", "members", "--addr", addrs]).env("TICKETING_PEER_AUTH_TOKEN", PEER_TOKEN);
    if let Some(ca) = ca {
        cmd.env("TICKETING_TLS_CA", ca);
    }
    let out = cmd.output_within(TOOL);
    let text = String::from_utf8_lossy(&out.stdout);
    // "leader   ADDR (node ID, term T)"
    let line = text.lines().find(|l| l.starts_with("leader ")).unwrap_or_else(|| panic!("{text}"));
    let id =
        line.split("(node ").nth(1).and_then(|r| r.split(',').next()).unwrap_or_else(|| panic!("{line}"));
    id.parse().unwrap_or_else(|_| panic!("no leader: {line}"))
}

/// `ticketing acquire KEY` over `addrs` (with the CA, over TLS) succeeds within 20 s.
fn cli_acquires(key: &str, addrs: &str, ca: &str) {
    let mut err = String::new();
    // A try every 200 ms while the nodes start and elect a leader.
    let token = eventually_every(Duration::from_secs(20), Duration::from_millis(200), || {
        let out = Command::new(env!("CARGO_BIN_EXE_ticketing"))
            .args(["acquire", key, "--addr", addrs, "--wait", "1000"])
            .env("TICKETING_AUTH_TOKEN", TOKEN)
            .env("TICKETING_TLS_CA", ca)
            .output_within(TOOL);
        err = String::from_utf8_lossy(&out.stderr).into_owned();
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    })
    .unwrap_or_else(|| panic!("no grant of {key} over TLS from {addrs}: {err}"));
    assert!(token.trim().parse::<u64>().is_ok(), "a fencing token: {token}");
}

/// GET /metrics at `addr` answers 200 with the node's figures.
fn metrics_answer(addr: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else { return false };
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    text.starts_with("HTTP/1.1 200") && text.contains("ticketing_")
}

/// A TLS cluster as docs/operations.md describes it for the script: mutual TLS between
/// peers, TLS to clients, metrics on, each node its own certificate; the CA in
/// cluster.env, the rest in node-template.env. The leader, then a follower, are
/// replaced; each time the script exits 0, cluster.env names the new voters, the new
/// node serves its metrics, and the cluster grants a lock over TLS.
#[test]
fn replace_node_script_replaces_the_leader_then_a_follower_of_a_tls_cluster() {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let conf = Conf::new("");
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    std::fs::write(conf.path().join("ca.pem"), ca.pem()).unwrap();
    for id in 1..=5 {
        let key = KeyPair::generate().unwrap();
        let cert =
            CertificateParams::new(vec![format!("127.0.0.{id}")]).unwrap().signed_by(&key, &ca, &ca_key);
        std::fs::write(conf.path().join(format!("node-{id}.pem")), cert.unwrap().pem()).unwrap();
        std::fs::write(conf.path().join(format!("node-{id}.key")), key.serialize_pem()).unwrap();
    }
    let ca_path = conf.file("ca.pem");
    let (mut cluster, metrics) = Cluster::start_each(3, |id, metrics| {
        let (cert, key) = (conf.file(&format!("node-{id}.pem")), conf.file(&format!("node-{id}.key")));
        let metrics_addr = format!("127.0.0.{id}:{metrics}");
        [
            ("TICKETING_TLS_CERT", cert),
            ("TICKETING_TLS_KEY", key),
            ("TICKETING_TLS_CA", ca_path.clone()),
            ("TICKETING_METRICS_LISTEN", metrics_addr),
        ]
        .map(|(k, v)| (k.to_string(), v))
        .to_vec()
    });
    let port = cluster.port;
    let addr = |id: u64| format!("127.0.0.{id}:{port}");
    let cluster_env = format!("TICKETING_CLUSTER_PEERS={}\nTICKETING_TLS_CA={ca_path}\n", cluster.peers);
    std::fs::write(conf.path().join("cluster.env"), cluster_env).unwrap();
    let dir = conf.path().display();
    let template = format!(
        "# every new node: its own certificate, metrics and listen address\n\
         TICKETING_TLS_CERT={dir}/node-{{ID}}.pem\nTICKETING_TLS_KEY={dir}/node-{{ID}}.key\n\
         TICKETING_METRICS_LISTEN={{HOST}}:{metrics}\nTICKETING_LISTEN={{HOST}}:{{PORT}}\n"
    );
    std::fs::write(conf.path().join("node-template.env"), template).unwrap();
    cli_acquires("tls-before", &conf.addrs(), &ca_path);

    let leader = leader_id(&conf.addrs(), Some(&ca_path));
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let mut voters = vec![1u64, 2, 3];
    for (old, new) in [(leader, 4u64), (follower, 5)] {
        let (code, err, took) = conf.replace(&[&old.to_string(), &new.to_string(), &addr(new)]);
        assert_eq!(code, Some(0), "replacing {old} by {new}: {err}");
        assert!(took < Duration::from_secs(30), "replacing {old} took {took:?}");
        voters.retain(|id| *id != old);
        voters.push(new);
        voters.sort();
        assert_eq!(conf.voters(), voters, "cluster.env after replacing {old}");
        let env = std::fs::read_to_string(conf.path().join(format!("node-{new}.env"))).unwrap();
        for line in [
            format!("TICKETING_LISTEN={}", addr(new)),
            format!("TICKETING_TLS_CERT={dir}/node-{new}.pem"),
            format!("TICKETING_TLS_KEY={dir}/node-{new}.key"),
            format!("TICKETING_METRICS_LISTEN=127.0.0.{new}:{metrics}"),
        ] {
            assert!(env.lines().any(|l| l == line), "node-{new}.env lacks {line}:\n{env}");
        }
        assert!(metrics_answer(&format!("127.0.0.{new}:{metrics}")), "node {new} serves no metrics");
        cli_acquires(&format!("tls-after-{new}"), &conf.addrs(), &ca_path);
        exits_by_itself(&mut cluster, old);
    }
}

/// The new node cannot start: without LISTEN it listens on 0.0.0.0:PORT, which the
/// other nodes of this host hold on 127.0.0.x:PORT. The script prints the node's own
/// error line, exits 2, and leaves no node running and the membership as it was.
#[test]
fn replace_node_script_prints_the_new_nodes_own_error_when_it_cannot_start() {
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_leader(Duration::from_secs(20));
    let conf = Conf::new(&format!("TICKETING_CLUSTER_PEERS={}\n", cluster.peers));
    let port = cluster.port;
    let (code, err, took) = conf.replace(&["2", "4", &format!("127.0.0.4:{port}")]);
    assert!(
        err.contains(&format!("ticketing: cannot start on 0.0.0.0:{port}: Address already in use")),
        "the node's own error is not shown: {err}"
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(took < Duration::from_secs(20), "{took:?}");
    assert!(conf.path().join("node-4.env.failed").exists() && !conf.path().join("node-4.env").exists());
    assert_eq!(conf.voters(), vec![1, 2, 3]);
    for node in cluster.nodes.iter_mut() {
        assert!(node.as_mut().unwrap().child.try_wait().unwrap().is_none(), "a member stopped");
    }
    let leader = leader_id(&conf.addrs(), None);
    assert!((1..=3).contains(&leader), "leader {leader}");
}

/// cluster.env is stale: it names a node that was never a member, and the leader, which
/// runs on this host (ticketing@4) and is the node replaced. The script judges by the
/// membership after the swap as the new leader reports it (not by node 4, which leaves),
/// stops ticketing@4 only then, exits 0, and cluster.env names the live voters.
#[test]
fn replace_node_script_replaces_the_leader_from_a_stale_cluster_env() {
    let mut cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader(Duration::from_secs(20)) as u64 + 1;
    let port = cluster.port;
    let addr = |id: u64| format!("127.0.0.{id}:{port}");
    let conf = Conf::new(&format!("TICKETING_CLUSTER_PEERS={}\n", cluster.peers));
    // Node 4 replaces a follower on this host, then leads.
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let (code, err, _) = conf.replace(&[&follower.to_string(), "4", &addr(4), &addr(4)]);
    assert_eq!(code, Some(0), "{err}");
    exits_by_itself(&mut cluster, follower);
    let out = Command::new(env!("CARGO_BIN_EXE_ticketing"))
        .args(["admin", "transfer-leader", "4", "--addr", &conf.addrs()])
        .env("TICKETING_PEER_AUTH_TOKEN", PEER_TOKEN)
        .output_within(TOOL);
    assert!(out.status.success(), "transfer-leader 4: {}", String::from_utf8_lossy(&out.stderr));

    // Node 4, the leader, replaced by node 5, from a cluster.env naming only node 4 and a
    // node 9 that never was.
    std::fs::write(
        conf.path().join("cluster.env"),
        format!("TICKETING_CLUSTER_PEERS=9@{},4@{}\n", addr(9), addr(4)),
    )
    .unwrap();
    let (code, err, took) = conf.replace(&["4", "5", &addr(5), &addr(5)]);
    assert_eq!(code, Some(0), "{err}");
    assert!(took < Duration::from_secs(30), "{took:?}");
    let mut expected: Vec<u64> = (1..=3).filter(|id| *id != follower).collect();
    expected.push(5);
    assert_eq!(conf.voters(), expected);
    assert!(conf.path().join("node-4.exit").exists(), "ticketing@4 still runs");
    // Every address cluster.env names is a live voter that knows a leader among them.
    let deadline = Instant::now() + Duration::from_secs(10);
    for a in conf.addrs().split(',') {
        let mut text = String::new();
        // A try every 100 ms (each runs the CLI).
        let live = eventually_every(
            deadline.saturating_duration_since(Instant::now()),
            Duration::from_millis(100),
            || {
                let out = Command::new(env!("CARGO_BIN_EXE_ticketing"))
                    .args(["admin", "members", "--addr", a])
                    .env("TICKETING_PEER_AUTH_TOKEN", PEER_TOKEN)
                    .output_within(TOOL);
                text = String::from_utf8_lossy(&out.stdout).into_owned();
                let leads = expected.iter().any(|id| text.contains(&format!("(node {id}, ")));
                (out.status.success() && leads).then_some(())
            },
        );
        assert!(live.is_some(), "{a} is no live voter that knows the leader: {text}");
    }
}

/// Every `docs/FILE.md ("Section")` a deployment file points to exists, and so does the
/// section.
#[test]
fn deployment_files_point_at_sections_that_exist() {
    let mut checked = 0;
    for file in [
        "deploy/Dockerfile",
        "deploy/kubernetes.yaml",
        "deploy/ticketing.service",
        "deploy/ticketing-node.service",
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
