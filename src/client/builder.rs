//! [`ClientBuilder`]: collects and validates the configuration without network I/O.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::pool::Pool;
use super::release::run_worker;
use super::supervisor::{run_supervisor, IDLE_PING_DEFAULT};
use super::{tls, BuildError, Client, Closer, Inner};
use crate::proto::handshake::auth_key;
use crate::proto::limits::{AUTH_TOKEN_LEN_MIN, OWNER_LEN_MAX, OWNER_LEN_MIN};

/// Extra time, after the wait, that the client waits for the answer to an ACQUIRE
/// before calling it indeterminate: room for the grant to commit and travel back.
pub const COMMIT_MARGIN: Duration = Duration::from_secs(5);
/// Default time budget of QUERY, STATUS and PING.
pub const REQUEST_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
/// Even with a zero wait, an ACQUIRE waits this long for a first connection before it
/// gives up as unavailable (a fresh client has not connected yet).
pub const CONNECT_WAIT_MIN: Duration = Duration::from_secs(3);

/// Default client port.
pub const DEFAULT_ADDR: &str = "127.0.0.1:5225";

enum Secret {
    Bytes(Vec<u8>),
    File(PathBuf),
}

/// Builds a [`Client`]. Obtain one with [`Client::builder`].
///
/// `build` checks everything it can without touching the network (addresses are
/// `host:port`, the token is at least 16 bytes, files are readable, the CA bundle
/// parses) and starts the background connection threads, which connect on their own.
#[must_use]
pub struct ClientBuilder {
    addrs: Vec<String>,
    secret: Option<Secret>,
    owner: Option<String>,
    ca: Option<PathBuf>,
    request_timeout: Duration,
    commit_margin: Duration,
    idle_ping: Duration,
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder::new()
    }
}

impl ClientBuilder {
    pub fn new() -> ClientBuilder {
        ClientBuilder {
            addrs: Vec::new(),
            secret: None,
            owner: None,
            ca: None,
            request_timeout: REQUEST_TIMEOUT_DEFAULT,
            commit_margin: COMMIT_MARGIN,
            idle_ping: IDLE_PING_DEFAULT,
        }
    }

    /// A builder preset from the environment (docs/configuration.md, client side):
    /// `TICKETING_ADDRS` (comma-separated; default `127.0.0.1:5225`),
    /// `TICKETING_AUTH_TOKEN` or `TICKETING_AUTH_TOKEN_FILE`, `TICKETING_TLS_CA`,
    /// `TICKETING_OWNER`. Later calls override what it set.
    pub fn from_env() -> ClientBuilder {
        let mut builder = ClientBuilder::new();
        let addrs = std::env::var("TICKETING_ADDRS").unwrap_or_default();
        let addrs = split_addrs(&addrs);
        builder = if addrs.is_empty() { builder.addrs([DEFAULT_ADDR]) } else { builder.addrs(addrs) };
        if let Some(token) = std::env::var_os("TICKETING_AUTH_TOKEN").filter(|t| !t.is_empty()) {
            builder = builder.auth_token(token.into_encoded_bytes());
        } else if let Some(path) = std::env::var_os("TICKETING_AUTH_TOKEN_FILE").filter(|p| !p.is_empty()) {
            builder = builder.auth_token_file(path);
        }
        if let Some(ca) = std::env::var_os("TICKETING_TLS_CA").filter(|p| !p.is_empty()) {
            builder = builder.tls_ca_file(ca);
        }
        if let Ok(owner) = std::env::var("TICKETING_OWNER") {
            if !owner.is_empty() {
                builder = builder.owner(owner);
            }
        }
        builder
    }

    /// Adds server client-port addresses (`host:port`), one per cluster node.
    pub fn addrs<I, S>(mut self, addrs: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.addrs.extend(addrs.into_iter().map(Into::into));
        self
    }

    /// Replaces the addresses given so far (the CLI's `--addr` overrides the environment).
    pub fn replace_addrs<I, S>(mut self, addrs: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.addrs.clear();
        self.addrs(addrs)
    }

    /// The shared secret (at least 16 bytes). It never crosses the wire.
    pub fn auth_token(mut self, token: impl AsRef<[u8]>) -> Self {
        self.secret = Some(Secret::Bytes(token.as_ref().to_vec()));
        self
    }

    /// Reads the shared secret from a file at `build` (one trailing newline is ignored).
    pub fn auth_token_file(mut self, path: impl AsRef<Path>) -> Self {
        self.secret = Some(Secret::File(path.as_ref().to_owned()));
        self
    }

    /// The owner string sent with every ACQUIRE and RELEASE (1..=255 bytes).
    /// Default: `host-pid-random`, unique per client.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// Turns TLS on, trusting the PEM certificates in `path`. The server name checked
    /// is the host part of each address.
    pub fn tls_ca_file(mut self, path: impl AsRef<Path>) -> Self {
        self.ca = Some(path.as_ref().to_owned());
        self
    }

    /// Time budget of QUERY, STATUS and PING (default 10 s).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Extra wait for an ACQUIRE's answer after its wait (default [`COMMIT_MARGIN`]).
    pub fn commit_margin(mut self, margin: Duration) -> Self {
        self.commit_margin = margin;
        self
    }

    /// How long a connection may receive nothing before the client PINGs it (default
    /// [`IDLE_PING_DEFAULT`], 1 s). A connection that then receives nothing for
    /// [`PING_ANSWER_TIMEOUT`](super::PING_ANSWER_TIMEOUT) (1.5 s) is closed and
    /// redialed: that is how a frozen or cut-off node is found out.
    pub fn idle_ping(mut self, interval: Duration) -> Self {
        self.idle_ping = interval;
        self
    }

    /// Validates the configuration and starts the client's background threads.
    pub fn build(self) -> Result<Client, BuildError> {
        let mut addrs = Vec::new();
        for addr in &self.addrs {
            let addr = addr.trim();
            if addr.is_empty() {
                continue;
            }
            let host = host_of(addr).ok_or_else(|| BuildError::BadAddr(addr.to_owned()))?;
            addrs.push((addr.to_owned(), host));
        }
        if addrs.is_empty() {
            return Err(BuildError::NoAddrs);
        }
        let secret = match self.secret {
            None => return Err(BuildError::NoAuthToken),
            Some(Secret::Bytes(bytes)) => bytes,
            Some(Secret::File(path)) => {
                let mut bytes =
                    std::fs::read(&path).map_err(|error| BuildError::File { path: path.clone(), error })?;
                if bytes.last() == Some(&b'\n') {
                    bytes.pop();
                    if bytes.last() == Some(&b'\r') {
                        bytes.pop();
                    }
                }
                bytes
            }
        };
        if secret.len() < AUTH_TOKEN_LEN_MIN {
            return Err(BuildError::AuthTokenTooShort(secret.len()));
        }
        let owner = match self.owner {
            Some(owner) => owner,
            None => default_owner(),
        };
        check_owner(&owner)?;
        let tls = match &self.ca {
            Some(path) => {
                for (_, host) in &addrs {
                    tls::check_server_name(host)?;
                }
                Some(tls::client_config(path)?)
            }
            None => None,
        };
        let (release_tx, release_rx) = crossbeam_channel::unbounded();
        let pool = Arc::new(Pool::new(addrs.clone(), auth_key(&secret), tls, release_tx, self.idle_ping));
        let spawn = |name: &str, body: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new().name(name.into()).spawn(body).map(|_| ()).map_err(BuildError::Thread)
        };
        {
            let pool = Arc::clone(&pool);
            spawn("ticketing-release", Box::new(move || run_worker(pool, release_rx)))?;
        }
        let client = Client {
            inner: Arc::new(Inner {
                pool: Arc::clone(&pool),
                owner,
                addrs: addrs.into_iter().map(|(a, _)| a).collect(),
                request_timeout: self.request_timeout,
                commit_margin: self.commit_margin,
                _closer: Arc::new(Closer(Arc::clone(&pool))),
            }),
        };
        // From here on, dropping `client` stops every thread started so far.
        {
            let pool = Arc::clone(&pool);
            spawn("ticketing-watch", Box::new(move || run_supervisor(pool)))?;
        }
        pool.start().map_err(BuildError::Thread)?;
        Ok(client)
    }
}

/// Splits a comma-separated address list, dropping empty parts.
pub fn split_addrs(list: &str) -> Vec<String> {
    list.split(',').map(str::trim).filter(|a| !a.is_empty()).map(str::to_owned).collect()
}

/// The host part of `host:port` or `[v6]:port`, if the address has that shape.
pub(crate) fn host_of(addr: &str) -> Option<String> {
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
    Some(host.to_owned())
}

pub(crate) fn check_owner(owner: &str) -> Result<(), BuildError> {
    if owner.len() < OWNER_LEN_MIN || owner.len() > OWNER_LEN_MAX {
        return Err(BuildError::BadOwner(format!("{} bytes; must be 1..=255", owner.len())));
    }
    if owner.chars().any(char::is_control) {
        return Err(BuildError::BadOwner("contains control characters".into()));
    }
    Ok(())
}

/// `host-pid-random`: unique per client, readable in STATUS and QUERY answers.
fn default_owner() -> String {
    let host = crate::sys::hostname().unwrap_or_else(|| "host".into());
    let nonce = crate::proto::handshake::fresh_nonce();
    let mut owner = format!(
        "{host}-{}-{:02x}{:02x}{:02x}{:02x}",
        std::process::id(),
        nonce[0],
        nonce[1],
        nonce[2],
        nonce[3]
    );
    if owner.len() > OWNER_LEN_MAX {
        let cut = owner.len() - OWNER_LEN_MAX;
        owner.drain(..cut);
    }
    owner
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_of_addresses() {
        assert_eq!(host_of("10.0.0.1:5225").as_deref(), Some("10.0.0.1"));
        assert_eq!(host_of("db.example:1").as_deref(), Some("db.example"));
        assert_eq!(host_of("[::1]:5225").as_deref(), Some("::1"));
        assert_eq!(host_of("::1:5225"), None);
        assert_eq!(host_of("nohost"), None);
        assert_eq!(host_of(":5225"), None);
        assert_eq!(host_of("h:99999"), None);
    }

    #[test]
    fn build_validates_without_io() {
        let err = |b: ClientBuilder| b.build().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err(ClientBuilder::new().auth_token("0123456789abcdef")).contains("no server"));
        assert!(err(ClientBuilder::new().addrs(["x"]).auth_token("0123456789abcdef")).contains("host:port"));
        assert!(err(ClientBuilder::new().addrs(["h:1"])).contains("no auth token"));
        assert!(err(ClientBuilder::new().addrs(["h:1"]).auth_token("short")).contains("16"));
        assert!(err(ClientBuilder::new().addrs(["h:1"]).auth_token("0123456789abcdef").owner(""))
            .contains("owner"));
    }

    #[test]
    fn default_owner_has_pid() {
        let owner = default_owner();
        assert!(owner.contains(&std::process::id().to_string()), "{owner}");
        check_owner(&owner).unwrap();
    }
}
