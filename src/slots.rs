//! Places for connections, per source address and in all: the accept loops of both
//! ports take one before they spend a thread on a connection.
//!
//! Addresses are grouped as a host would hold them: an IPv4 address is one group, an
//! IPv6 address counts by its /64 (one host commonly has a whole /64), and an
//! IPv4-mapped IPv6 address counts as its IPv4 address.
//!
//! Handshake places are scarce and an outsider without a secret can take them (a
//! connection that never speaks holds one until the handshake deadline). So when every
//! place is taken, a new connection takes the place of the *oldest* handshake still
//! running, whose socket is shut down: an honest client finishes its handshake in
//! milliseconds, so a flood of silent connections must keep arriving faster than that
//! to keep it out, and cannot hold the places for the deadline.

use std::collections::HashMap;
use std::net::{IpAddr, TcpStream};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// Stack of each connection thread (reader, writer) and handshake thread. They parse
/// small frames and run TLS; the default 2 MiB of address space per thread is far more
/// than they use.
pub const CONNECTION_STACK_BYTES: usize = 256 * 1024;

/// The group an address counts in.
pub fn ip_group(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut segments = v6.segments();
                segments[4..].fill(0);
                IpAddr::V6(segments.into())
            }
        },
    }
}

/// Open connections per address group, at most `per_group` each.
pub struct GroupCounter {
    per_group: usize,
    counts: Mutex<HashMap<IpAddr, usize>>,
}

impl GroupCounter {
    pub fn new(per_group: usize) -> Arc<GroupCounter> {
        Arc::new(GroupCounter { per_group, counts: Mutex::new(HashMap::new()) })
    }

    /// A place for a connection from `ip`, or `None` when its group is full.
    pub fn take(self: &Arc<Self>, ip: IpAddr) -> Option<GroupPlace> {
        let group = ip_group(ip);
        let mut counts = lock(&self.counts);
        let n = counts.get(&group).copied().unwrap_or(0);
        if n >= self.per_group {
            return None;
        }
        counts.insert(group, n + 1);
        Some(GroupPlace { counter: self.clone(), group })
    }

    /// Groups with a place taken (for tests: the map never keeps empty groups).
    pub fn groups(&self) -> usize {
        lock(&self.counts).len()
    }
}

/// A taken place; given back when dropped.
pub struct GroupPlace {
    counter: Arc<GroupCounter>,
    group: IpAddr,
}

impl Drop for GroupPlace {
    fn drop(&mut self) {
        let mut counts = lock(&self.counter.counts);
        if let Some(n) = counts.get_mut(&self.group) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.group);
            }
        }
    }
}

/// Handshakes running, at most `max` in all and `per_group` per address group.
pub struct HandshakeTable {
    max: usize,
    per_group: usize,
    inner: Mutex<Handshakes>,
}

#[derive(Default)]
struct Handshakes {
    next_id: u64,
    /// id → (group, started, socket): the socket lets an evicted handshake be ended.
    running: HashMap<u64, (IpAddr, Instant, Arc<TcpStream>)>,
    per_group: HashMap<IpAddr, usize>,
}

/// Why no handshake place was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoPlace {
    /// The address group has `per_group` handshakes running.
    GroupFull,
}

impl HandshakeTable {
    pub fn new(max: usize, per_group: usize) -> Arc<HandshakeTable> {
        Arc::new(HandshakeTable { max: max.max(1), per_group: per_group.max(1), inner: Mutex::default() })
    }

    /// A place for the handshake of `socket` from `ip`. When every place is taken, the
    /// oldest running handshake is ended (its socket shut down) to make room; its
    /// place is given back when its thread drops its ticket. Refused only when `ip`'s
    /// own group is full.
    pub fn take(self: &Arc<Self>, ip: IpAddr, socket: Arc<TcpStream>) -> Result<HandshakeTicket, NoPlace> {
        let group = ip_group(ip);
        let mut inner = lock(&self.inner);
        if inner.per_group.get(&group).copied().unwrap_or(0) >= self.per_group {
            return Err(NoPlace::GroupFull);
        }
        if inner.running.len() >= self.max {
            let oldest = inner.running.iter().min_by_key(|(_, (_, started, _))| *started).map(|(id, _)| *id);
            if let Some(id) = oldest {
                if let Some((old_group, _, old_socket)) = inner.running.remove(&id) {
                    let _ = old_socket.shutdown(std::net::Shutdown::Both);
                    inner.leave_group(old_group);
                }
            }
        }
        let id = inner.next_id;
        inner.next_id += 1;
        inner.running.insert(id, (group, Instant::now(), socket));
        *inner.per_group.entry(group).or_insert(0) += 1;
        Ok(HandshakeTicket { table: self.clone(), id })
    }

    /// Handshakes running now.
    pub fn running(&self) -> usize {
        lock(&self.inner).running.len()
    }
}

impl Handshakes {
    fn leave_group(&mut self, group: IpAddr) {
        if let Some(n) = self.per_group.get_mut(&group) {
            *n -= 1;
            if *n == 0 {
                self.per_group.remove(&group);
            }
        }
    }
}

/// A running handshake's place; given back when dropped (unless it was evicted, which
/// gave it back already).
pub struct HandshakeTicket {
    table: Arc<HandshakeTable>,
    id: u64,
}

impl Drop for HandshakeTicket {
    fn drop(&mut self) {
        let mut inner = lock(&self.table.inner);
        if let Some((group, _, _)) = inner.running.remove(&self.id) {
            inner.leave_group(group);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn socket_pair(listener: &TcpListener) -> (Arc<TcpStream>, TcpStream) {
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (Arc::new(server), client)
    }

    #[test]
    fn ipv6_counts_by_its_64_and_mapped_ipv4_as_ipv4() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(ip_group(a), ip_group(b));
        assert_ne!(ip_group(a), ip_group(c));
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(ip_group(mapped), "10.0.0.1".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn group_places_are_bounded_and_given_back() {
        let counter = GroupCounter::new(2);
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let one = counter.take(ip).unwrap();
        let _two = counter.take(ip).unwrap();
        assert!(counter.take(ip).is_none());
        assert!(counter.take("10.0.0.2".parse().unwrap()).is_some());
        drop(one);
        assert!(counter.take(ip).is_some());
    }

    #[test]
    fn a_full_table_evicts_the_oldest_handshake_and_a_full_group_is_refused() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let table = HandshakeTable::new(2, 2);
        let (first, mut first_client) = socket_pair(&listener);
        let (second, _c2) = socket_pair(&listener);
        let (third, _c3) = socket_pair(&listener);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let t1 = table.take(a, first).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let t2 = table.take("10.0.0.2".parse().unwrap(), second).unwrap();
        // Full: the third takes the place of the oldest, whose socket is shut down.
        let t3 = table.take("10.0.0.3".parse().unwrap(), third).unwrap();
        assert_eq!(table.running(), 2);
        let mut byte = [0u8; 1];
        assert_eq!(std::io::Read::read(&mut first_client, &mut byte).unwrap(), 0, "evicted socket is closed");
        // The evicted handshake's ticket gives nothing back twice.
        drop(t1);
        assert_eq!(table.running(), 2);
        // A group with `per_group` running is refused outright.
        let (x, _cx) = socket_pair(&listener);
        let (y, _cy) = socket_pair(&listener);
        let b: IpAddr = "10.0.0.9".parse().unwrap();
        drop((t2, t3));
        let _x = table.take(b, x).unwrap();
        let _y = table.take(b, y).unwrap();
        let (z, _cz) = socket_pair(&listener);
        assert_eq!(table.take(b, z).err(), Some(NoPlace::GroupFull));
    }
}
