//! A hand-built scene for the core's unit tests: the connections brought up or failed
//! by hand, the clock moved by hand, and the `Cx` an operation acts through.

use std::time::{Duration, Instant};

use super::claims::Claims;
use super::cx::{Config, Cx, World};
use super::ids::{OpId, SessionId, SlotId};
use super::net::{DialFailure, Net};
use super::orphans::Orphans;

/// The commit margin of every scene.
pub(crate) const MARGIN: Duration = Duration::from_secs(2);
/// The operation under test.
pub(crate) const OP: OpId = OpId(1);

pub(crate) struct Scene {
    pub(crate) world: World,
    pub(crate) config: Config,
    pub(crate) start: Instant,
    pub(crate) now: Instant,
}

impl Scene {
    /// A client of `seeds`, every one still making its first connection.
    pub(crate) fn new(seeds: &[&str]) -> Scene {
        let start = Instant::now();
        let seeds: Vec<String> = seeds.iter().map(|s| s.to_string()).collect();
        let world = World {
            net: Net::new(seeds.clone(), false, named(), start),
            orphans: Orphans::new(MARGIN),
            claims: Claims::new(MARGIN),
            jobs: Vec::new(),
        };
        let config = Config {
            seeds,
            tls: false,
            commit_margin: MARGIN,
            idle_ping: Duration::from_secs(1),
            named: true,
            seeds_setting: "TICKETING_ADDRS",
            name_setting: "TICKETING_CLUSTER_NAME",
        };
        Scene { world, config, start, now: start }
    }

    /// A connection to `addr` is up, its node in `role` naming `leader` (the client's
    /// other connections to it failed, so nothing is still making its first one).
    pub(crate) fn up(&mut self, addr: &str, role: u8, leader: &str) -> SessionId {
        let session = welcome(&mut self.world.net, addr, 1, role, leader, self.now);
        self.down(addr);
        session
    }

    /// Every connection attempt to `addr` not up failed.
    pub(crate) fn down(&mut self, addr: &str) {
        fail_dials(&mut self.world.net, addr, self.now);
    }

    /// `n` ms after the scene began.
    pub(crate) fn at(&mut self, n: u64) {
        self.now = self.start + Duration::from_millis(n);
    }

    /// How the operation under test sees the world now.
    pub(crate) fn cx(&mut self) -> Cx<'_> {
        self.world.cx(&self.config, self.now, OP, false)
    }

    /// A `Wait`'s instant, in ms after the start.
    pub(crate) fn ms_of(&self, at: Instant) -> u64 {
        at.duration_since(self.start).as_millis() as u64
    }
}

/// The connections of a client of `seeds`, every one dialing (for tests of `Net` alone).
pub(crate) fn net_of(seeds: &[&str], now: Instant) -> Net {
    Net::new(seeds.iter().map(|s| s.to_string()).collect(), false, named(), now)
}

/// A WELCOME on the first slot dialing `addr` that has no session, from node `node` in
/// `role` naming `leader`; the peer is the address itself.
pub(crate) fn welcome(
    net: &mut Net,
    addr: &str,
    node: u64,
    role: u8,
    leader: &str,
    now: Instant,
) -> SessionId {
    let slot = net.slots.iter().find(|s| s.addr == addr && s.session.is_none()).expect("a free slot").id;
    net.connected(slot, node, role, SCENE_DOMAIN, leader, addr.to_owned(), now).expect("the slot exists")
}

/// The fencing domain every node of a scene reports.
pub(crate) const SCENE_DOMAIN: u64 = 7;

/// Every slot dialing `addr` that has no session failed its attempt ("refused").
pub(crate) fn fail_dials(net: &mut Net, addr: &str, now: Instant) {
    let slots: Vec<SlotId> =
        net.slots.iter().filter(|s| s.addr == addr && s.session.is_none()).map(|s| s.id).collect();
    for slot in slots {
        net.dial_failed(slot, DialFailure::transient("refused"), now);
    }
}

/// The domain settings of these scenes: requests never wait for the other seeds to
/// report their domain (`domains_tests.rs` tests that wait).
pub(crate) fn named() -> super::domain_record::Domains {
    super::domain_record::Domains::new(true, "TICKETING_ADDRS", "TICKETING_CLUSTER_NAME").without_settling()
}
