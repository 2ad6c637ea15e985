//! docs/tls.md's openssl recipe, run as written (with the hosts 127.0.0.1–3 in place of
//! the example's 10.0.0.1–3): the certificates it makes start a TLS cluster, and the
//! CLI, given the CA bundle, takes a lock on it.

mod common;

use std::process::Command;
use std::time::Duration;

use common::children::{Within, TOOL};
use common::*;

/// The shell blocks of `doc` that follow the heading `section`, up to the next heading.
fn shell_blocks(doc: &str, section: &str) -> Vec<String> {
    let start = doc.find(section).unwrap_or_else(|| panic!("no {section:?} in the doc"));
    let rest = &doc[start + section.len()..];
    let end = rest.find("\n## ").unwrap_or(rest.len());
    let mut blocks = Vec::new();
    let mut text = &rest[..end];
    while let Some(open) = text.find("```sh\n") {
        let body = &text[open + 6..];
        let close = body.find("```").expect("an open shell block");
        blocks.push(body[..close].to_string());
        text = &body[close + 3..];
    }
    blocks
}

#[test]
fn the_tls_recipe_in_the_docs_starts_a_cluster_the_cli_can_use() {
    if Command::new("openssl").arg("version").try_output_within(TOOL).is_err() {
        eprintln!("SKIPPED: no openssl command (.ci/run installs it)");
        return;
    }
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/tls.md")).unwrap();
    let recipe = shell_blocks(&doc, "## The recipe");
    assert_eq!(recipe.len(), 1, "one recipe block");
    let recipe = recipe[0].replace("10.0.0.", "127.0.0.");
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("bash").args(["-euc", &recipe]).current_dir(dir.path()).output_within(TOOL);
    assert!(out.status.success(), "the recipe failed: {}", String::from_utf8_lossy(&out.stderr));
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    for node in ["node1", "node2", "node3"] {
        assert!(
            dir.path().join(format!("{node}.pem")).is_file()
                && dir.path().join(format!("{node}.key")).is_file()
        );
    }
    // The checks the doc suggests pass on what it made.
    let checks = shell_blocks(&doc, "Check a certificate before you deploy it:");
    let out = Command::new("bash").args(["-euc", &checks[0]]).current_dir(dir.path()).output_within(TOOL);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("IP Address:127.0.0.1"));

    // A cluster with one certificate per node.
    let (nodes, _) = Cluster::start_each(3, |i, _| {
        let (cert, key, ca) = (path(&format!("node{i}.pem")), path(&format!("node{i}.key")), path("ca.pem"));
        vec![
            ("TICKETING_TLS_CERT".to_string(), cert),
            ("TICKETING_TLS_KEY".to_string(), key),
            ("TICKETING_TLS_CA".to_string(), ca),
        ]
    });
    let port = nodes.port;
    // The CLI with the CA bundle, as the doc shows it, given one node's address.
    let mut err = String::new();
    // A try every 300 ms while the cluster elects its first leader.
    let token = eventually_every(Duration::from_secs(20), Duration::from_millis(300), || {
        let out = Command::new(bin())
            .args(["acquire", "seat:42", "--addr", &format!("127.0.0.2:{port}"), "--wait", "1000"])
            .env("TICKETING_AUTH_TOKEN", TOKEN)
            .env("TICKETING_TLS_CA", path("ca.pem"))
            .output_within(TOOL);
        err = String::from_utf8_lossy(&out.stderr).into_owned();
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    })
    .unwrap_or_else(|| panic!("no grant over TLS: {err}"));
    assert!(token.trim().parse::<u64>().is_ok(), "a fencing token: {token}");
    drop(nodes);
}
