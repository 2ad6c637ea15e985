//! Host name resolution that also works in a static binary.
//!
//! A binary linked with `+crt-static` (scripts/build-static.sh) carries glibc's own
//! `files` and `dns` NSS back ends but cannot load any other module: on a host whose
//! `/etc/nsswitch.conf` names `myhostname`, `resolve` or `mymachines` (systemd's), those
//! fail, and `localhost` — which systemd hosts often synthesize with `myhostname`
//! rather than list in `/etc/hosts` — may not resolve at all. In an empty chroot or a
//! `FROM scratch` container there is no `/etc/hosts` either. So every address that
//! Ticketing resolves (listen address, peers, client addresses) goes through
//! [`resolve`], in this order:
//!
//! 1. an IP literal (`127.0.0.1:5225`, `[::1]:5225`) is used as it is — no lookup;
//! 2. the host's entries in `/etc/hosts` (parsed here, so no NSS module is involved),
//!    in file order;
//! 3. `localhost` and any `*.localhost` name (RFC 6761 §6.3) → `127.0.0.1`, then `::1`;
//! 4. otherwise the system resolver (`getaddrinfo`: NSS as configured; in the static
//!    binary `files` and `dns` only, with `/etc/resolv.conf`).
//!
//! What was measured (glibc 2.36, Debian 12, static test program in an empty chroot):
//! without `/etc/hosts` neither `localhost` nor any name resolves ("Temporary failure
//! in name resolution"); with `/etc/hosts` both resolve, with or without
//! `/etc/nsswitch.conf`; a `nsswitch.conf` naming `myhostname`/`resolve` makes a name
//! that is not in `/etc/hosts` fail with "System error". `docs/deploy.md` has the
//! operator's version of this.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};

/// Where host entries are read from.
pub const HOSTS_PATH: &str = "/etc/hosts";

/// Longest `/etc/hosts` read, in bytes; a larger file is read up to this size. A hosts
/// file is a few KiB; this only bounds a pathological one.
pub const HOSTS_FILE_LEN_MAX: u64 = 4 << 20;

/// Resolves `host:port` (or `[v6]:port`) as described in the module docs.
pub fn resolve(addr: &str) -> io::Result<Vec<SocketAddr>> {
    if let Ok(sa) = addr.parse::<SocketAddr>() {
        return Ok(vec![sa]);
    }
    let (host, port) = split_host_port(addr)?;
    resolve_host(host, port)
}

/// Resolves `host` (no port, no brackets) with `port`.
pub fn resolve_host(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    // IP literals (the usual case for peers) never read the hosts file.
    if let Ok(ip) = host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let hosts = read_hosts_file();
    resolve_with(host, port, hosts.as_deref(), &|h, p| Ok((h, p).to_socket_addrs()?.collect()))
}

/// [`resolve_host`] with the hosts file's text and the system resolver given, for tests.
pub fn resolve_with(
    host: &str,
    port: u16,
    hosts_file: Option<&str>,
    system: &dyn Fn(&str, u16) -> io::Result<Vec<SocketAddr>>,
) -> io::Result<Vec<SocketAddr>> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    if host.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty host name"));
    }
    if let Some(text) = hosts_file {
        let ips = hosts_lookup(text, host);
        if !ips.is_empty() {
            return Ok(ips.into_iter().map(|ip| SocketAddr::new(ip, port)).collect());
        }
    }
    if is_localhost(host) {
        return Ok(vec![
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port),
            SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), port),
        ]);
    }
    let found = system(host, port)?;
    if found.is_empty() {
        return Err(io::Error::new(io::ErrorKind::NotFound, format!("{host} resolves to no address")));
    }
    Ok(found)
}

/// `localhost`, `localhost.` and every name under `.localhost` (RFC 6761 §6.3), any case.
pub fn is_localhost(host: &str) -> bool {
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    host == "localhost" || host.ends_with(".localhost")
}

/// The addresses `/etc/hosts`-format `text` gives `host` (case-insensitive), in file
/// order, without duplicates. Comments (`#` to end of line) and malformed lines are
/// skipped, as glibc does.
pub fn hosts_lookup(text: &str, host: &str) -> Vec<IpAddr> {
    let want = host.strip_suffix('.').unwrap_or(host);
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("");
        let mut fields = line.split_whitespace();
        let Some(ip) = fields.next() else { continue };
        // A zone index (fe80::1%eth0) is not supported by IpAddr; such lines are skipped.
        let Ok(ip) = ip.parse::<IpAddr>() else { continue };
        if fields.any(|name| name.eq_ignore_ascii_case(want)) && !out.contains(&ip) {
            out.push(ip);
        }
    }
    out
}

/// Splits `host:port` / `[v6]:port`.
pub fn split_host_port(addr: &str) -> io::Result<(&str, u16)> {
    let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidInput, why.to_owned());
    let (host, port) = addr.rsplit_once(':').ok_or_else(|| bad("no port"))?;
    let port: u16 = port.parse().map_err(|_| bad("the port is not a number in 0..=65535"))?;
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    if host.is_empty() || host.contains(['[', ']']) {
        return Err(bad("no host"));
    }
    Ok((host, port))
}

fn read_hosts_file() -> Option<String> {
    use std::io::Read;
    let file = std::fs::File::open(HOSTS_PATH).ok()?;
    let mut text = String::new();
    // Not UTF-8 or unreadable: behave as if there were no hosts file.
    file.take(HOSTS_FILE_LEN_MAX).read_to_string(&mut text).ok()?;
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_system(_: &str, _: u16) -> io::Result<Vec<SocketAddr>> {
        Err(io::Error::other("system resolver not available"))
    }

    #[test]
    fn ip_literals_need_no_lookup() {
        assert_eq!(resolve("127.0.0.1:5225").unwrap(), vec!["127.0.0.1:5225".parse().unwrap()]);
        assert_eq!(resolve("[::1]:5225").unwrap(), vec!["[::1]:5225".parse().unwrap()]);
        assert_eq!(resolve_with("[::1]", 1, None, &no_system).unwrap(), vec!["[::1]:1".parse().unwrap()]);
    }

    #[test]
    fn localhost_without_a_hosts_file() {
        let got = resolve_with("localhost", 5225, None, &no_system).unwrap();
        assert_eq!(got, vec!["127.0.0.1:5225".parse().unwrap(), "[::1]:5225".parse().unwrap()]);
        assert!(resolve_with("LocalHost.", 1, None, &no_system).is_ok());
        assert!(resolve_with("node1.localhost", 1, None, &no_system).is_ok());
        assert!(!is_localhost("localhost.example.com"));
        assert!(!is_localhost("notlocalhost"));
    }

    #[test]
    fn hosts_file_entries_first_in_file_order() {
        let text = "# comment\n127.0.0.1 localhost\n\n10.1.2.3   db-1 db-1.lan # the db\n\
                    bogus line\n10.1.2.4\tDB-1\n10.1.2.3 db-1\n::1 localhost ip6-localhost\n";
        assert_eq!(
            hosts_lookup(text, "db-1"),
            vec!["10.1.2.3".parse::<IpAddr>().unwrap(), "10.1.2.4".parse().unwrap()]
        );
        assert_eq!(hosts_lookup(text, "db-1.lan."), vec!["10.1.2.3".parse::<IpAddr>().unwrap()]);
        assert!(hosts_lookup(text, "the").is_empty(), "comments are not names");
        let got = resolve_with("db-1", 7, Some(text), &no_system).unwrap();
        assert_eq!(got[0], "10.1.2.3:7".parse().unwrap());
        // The hosts file wins over the built-in localhost rule.
        let got = resolve_with("localhost", 7, Some("127.0.0.9 localhost\n"), &no_system).unwrap();
        assert_eq!(got, vec!["127.0.0.9:7".parse().unwrap()]);
    }

    #[test]
    fn other_names_go_to_the_system_resolver() {
        let system = |h: &str, p: u16| {
            assert_eq!(h, "example.internal");
            Ok(vec![SocketAddr::new("192.0.2.1".parse().unwrap(), p)])
        };
        assert_eq!(resolve_with("example.internal", 9, Some(""), &system).unwrap().len(), 1);
        let err = resolve_with("example.internal", 9, Some(""), &no_system).unwrap_err();
        assert!(err.to_string().contains("not available"));
        let empty = |_: &str, _: u16| Ok(Vec::new());
        assert_eq!(resolve_with("x", 9, None, &empty).unwrap_err().kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn split_host_port_forms() {
        assert_eq!(split_host_port("a:1").unwrap(), ("a", 1));
        assert_eq!(split_host_port("[::1]:2").unwrap(), ("::1", 2));
        assert!(split_host_port("a").is_err());
        assert!(split_host_port(":1").is_err());
        assert!(split_host_port("a:99999").is_err());
    }
}
