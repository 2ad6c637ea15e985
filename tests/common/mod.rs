//! The integration tests' harness: real server processes and clusters, the raw
//! protocol, ports, waiting (for conditions and for child processes). Each concept lives in one submodule; a test binary takes
//! it all with `mod common;` and uses what it needs.
#![allow(dead_code)]
#![allow(unused_imports)]

pub mod bindings;
pub mod cc;
pub mod children;
pub mod cluster;
pub mod facts_cluster;
pub mod grants;
pub mod java;
pub mod load;
pub mod ports;
pub mod process;
pub mod raw;
pub mod rolling;
pub mod wait;

pub use children::{run_within, Within};
pub use cluster::Cluster;
pub use ports::{free_port, free_port_pair, with_fresh_ports};
pub use process::{bin, start_server, tail, KillOnDrop, Server, ServerProcess};
pub use raw::{acquire, connect, connect_with, granted_token, operator, release, status_map, Raw};
pub use wait::{eventually, eventually_every, eventually_some};

/// The client secret of every server the tests start.
pub const TOKEN: &str = "test-secret-0123456789";
/// The peer and operator secret of test clusters (it must differ from `TOKEN`).
pub const PEER_TOKEN: &str = "test-peer-secret-0123456789";

/// The repository's root (the crate's manifest directory).
pub fn repo() -> &'static std::path::Path {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
}
