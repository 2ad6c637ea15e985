//! Client addresses of cluster members (`host:port`): in the configuration, in admin
//! requests, in PEER HELLOs and in the replicated member records. One check for all of
//! them, so an address that is stored anywhere fits everywhere it travels (a `str8`)
//! and can be dialed (peer port = port + 1000).

/// Longest address, in bytes: it travels as a `str8`.
pub const ADDR_LEN_MAX: usize = 255;
/// The peer port is the client port + this.
pub const PEER_PORT_OFFSET: u16 = 1000;

/// Why an address was refused; `Display` says what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddrError(pub String);

impl std::fmt::Display for AddrError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Checks `addr` is `host:port` with a non-empty host of name or IP characters (an IPv6
/// literal in brackets), a port in 1..=64535 and at most 255 bytes in all.
pub fn check_client_addr(addr: &str) -> Result<(), AddrError> {
    let fail = |what: String| Err(AddrError(what));
    if addr.is_empty() || addr.len() > ADDR_LEN_MAX {
        return fail(format!("{addr:?} must be 1..=255 bytes"));
    }
    let Some((host, port)) = addr.rsplit_once(':') else {
        return fail(format!("{addr:?} is not host:port"));
    };
    match port.parse::<u16>() {
        Ok(p) if p > 0 && p <= u16::MAX - PEER_PORT_OFFSET && !port.starts_with('+') => {}
        _ => return fail(format!("port in {addr:?} must be 1..=64535 (peer port = port + 1000)")),
    }
    if host.is_empty() {
        return fail(format!("{addr:?} has no host"));
    }
    let bracketed = host.starts_with('[') && host.ends_with(']') && host.len() > 2;
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_');
    let ok = if bracketed {
        host[1..host.len() - 1].chars().all(|c| c.is_ascii_hexdigit() || matches!(c, ':' | '.' | '%'))
    } else {
        host.chars().all(allowed)
    };
    if !ok {
        return fail(format!("host in {addr:?} must be a name, an IPv4 address or an [IPv6] address"));
    }
    Ok(())
}

/// The host part of `host:port` or `[v6]:port`, if the address has that shape (any
/// port number, any host text): what a client dials and checks a TLS name against.
pub fn host_of(addr: &str) -> Option<&str> {
    let (host, port) = addr.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    let host = match host.strip_prefix('[') {
        Some(inner) => inner.strip_suffix(']')?,
        None if host.contains(':') => return None,
        None => host,
    };
    if host.is_empty() {
        return None;
    }
    Some(host)
}

/// True when `host` can be a TLS server name (a DNS name or an IP address).
pub fn is_tls_server_name(host: &str) -> bool {
    rustls::pki_types::ServerName::try_from(host).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_of_addresses() {
        assert_eq!(host_of("10.0.0.1:5225"), Some("10.0.0.1"));
        assert_eq!(host_of("db.example:1"), Some("db.example"));
        assert_eq!(host_of("[::1]:5225"), Some("::1"));
        assert_eq!(host_of("::1:5225"), None);
        assert_eq!(host_of("nohost"), None);
        assert_eq!(host_of(":5225"), None);
        assert_eq!(host_of("h:99999"), None);
        assert!(is_tls_server_name("db.example") && is_tls_server_name("10.0.0.1"));
        assert!(!is_tls_server_name("bad name"));
    }

    #[test]
    fn names_and_ip_literals_pass_and_garbage_does_not() {
        for good in ["10.0.0.1:5225", "node-1.ticketing-peers:5225", "[::1]:5225", "h:64535", "a_b:1"] {
            assert!(check_client_addr(good).is_ok(), "{good}");
        }
        let long = format!("{}:5225", "a".repeat(251));
        for bad in [
            "",
            ":5225",
            "host",
            "host:0",
            "host:64536",
            "host:x",
            "host:+5",
            "ho st:5225",
            "h\u{fffd}:5225",
            "h,i:5225",
            "1@h:5225",
            "[]:5225",
            "[::1:5225",
            "h\n:5225",
            long.as_str(),
        ] {
            assert!(check_client_addr(bad).is_err(), "{bad:?}");
        }
    }
}
