//! The shape of the source tree that the docs describe (docs/architecture.md §9).

/// `server/` starts `cluster/` and hands it channels; `cluster/` never imports anything
/// of `server/` (the messages both use live in `src/messages.rs`).
#[test]
fn the_cluster_module_imports_nothing_of_the_server_module() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cluster");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        files += 1;
        for (n, line) in text.lines().enumerate() {
            assert!(!line.contains("crate::server"), "{}:{}: {line}", path.display(), n + 1);
        }
    }
    assert!(files >= 4, "read {files} files of src/cluster");
    let messages = std::fs::read_to_string(dir.join("../messages.rs")).unwrap();
    assert!(!messages.contains("crate::server"), "src/messages.rs imports server/");
}
