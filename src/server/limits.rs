//! How many client connections the node serves: caps from the open-files limit, so
//! the node never runs out of descriptors for its own links.

/// Client connections served at once at most; more are closed at accept. Fewer when
/// the open-files limit is low (see [`Limits`]).
pub const CONNECTIONS_MAX: usize = 10_000;
/// Client connections still in their handshake at once, at most.
pub const HANDSHAKES_MAX: usize = 1024;
/// Client connections in their handshake from one IP address at once, at most.
pub const HANDSHAKES_PER_IP_MAX: usize = 64;
/// File descriptors kept for everything but client connections: the listeners, peer
/// links and their handshakes, dialers, logs.
pub const RESERVED_FDS: u64 = 256;
pub use crate::slots::CONNECTION_STACK_BYTES;

/// The connection caps in force, from the open-files limit: every connection costs
/// one descriptor, and `RESERVED_FDS` stay free for the cluster's own links.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Authenticated connections, all sources.
    pub connections_max: usize,
    /// Open connections from one IP address (half the total: no single host can take
    /// every place).
    pub connections_per_ip_max: usize,
    pub handshakes_max: usize,
    pub handshakes_per_ip_max: usize,
}

impl Limits {
    /// The caps for an open-files limit of `open_files`.
    pub fn for_open_files(open_files: u64) -> Limits {
        let budget = open_files.saturating_sub(RESERVED_FDS).max(64) as usize;
        let handshakes_max = (budget / 8).clamp(16, HANDSHAKES_MAX);
        let connections_max = (budget - handshakes_max).clamp(16, CONNECTIONS_MAX);
        Limits {
            connections_max,
            connections_per_ip_max: (connections_max / 2).max(1),
            handshakes_max,
            handshakes_per_ip_max: HANDSHAKES_PER_IP_MAX.min(handshakes_max),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_caps_follow_the_open_files_limit() {
        let full = Limits::for_open_files(16_384);
        assert_eq!((full.connections_max, full.handshakes_max), (CONNECTIONS_MAX, HANDSHAKES_MAX));
        assert_eq!(full.connections_per_ip_max, CONNECTIONS_MAX / 2);
        // The common soft limit of 1024: descriptors stay for the reserve.
        let low = Limits::for_open_files(1024);
        assert!(low.connections_max + low.handshakes_max + RESERVED_FDS as usize <= 1024, "{low:?}");
        assert!(low.connections_max >= 16 && low.handshakes_max >= 16);
    }
}
