//! A peer connection whose handshake is done — the socket, its TLS state, what the
//! peer said of itself — as the threads that dial and accept hand it to the Raft thread
//! (`messages::ToRaft::Conn`). Its own leaf, below both `messages.rs` and `cluster/`.

use std::net::TcpStream;

/// What a node says about itself when connecting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerHello {
    pub node_id: u64,
    pub incarnation: u64,
    pub domain: u64,
    /// Its client address as configured (`TICKETING_CLUSTER_SELF`).
    pub addr: String,
    /// Its `TICKETING_CLUSTER_NAME`; empty when it has none.
    pub name: String,
}

/// A connection whose handshake is done, ready for the event loop.
pub struct Established {
    pub tcp: TcpStream,
    pub tls: Option<rustls::Connection>,
    /// Ciphertext already read past the handshake.
    pub leftover: Vec<u8>,
    pub peer: PeerHello,
    /// The leader address the listener's WELCOME named (dialer side; empty otherwise).
    pub welcome_leader: String,
}
