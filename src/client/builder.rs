//! [`ClientBuilder`]: collects and validates the configuration without network I/O,
//! then starts the client.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::api::Client;
use super::calls::check_owner;
use super::core::{Config, IDLE_PING_DEFAULT};
use super::direct::Direct;
use super::error::BuildError;
use super::io::dial::{Dialer, SettingNames, Words, ENV_WORDS, RUST_WORDS};
use super::io::{self};
use super::tls;
use crate::proto::addr::{host_of, is_tls_server_name};
use crate::proto::handshake::auth_key;
use crate::proto::limits::{AUTH_TOKEN_LEN_MIN, OWNER_LEN_MAX};

/// Extra time, after the wait, that the client waits for the answer to an ACQUIRE
/// before calling it indeterminate: room for the grant to commit and travel back.
pub const COMMIT_MARGIN: Duration = Duration::from_secs(5);
/// Default time budget of QUERY, STATUS and PING.
pub const REQUEST_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);

/// Default client port.
pub const DEFAULT_ADDR: &str = "127.0.0.1:5225";

enum Secret {
    Bytes(Vec<u8>),
    /// A file, and the setting that named it (for messages).
    File(PathBuf, &'static str),
}

/// The client secret's variables (docs/configuration.md, client side).
const TOKEN_VAR: &str = "TICKETING_AUTH_TOKEN";
const TOKEN_FILE_VAR: &str = "TICKETING_AUTH_TOKEN_FILE";
const CA_VAR: &str = "TICKETING_TLS_CA";
const NAME_VAR: &str = "TICKETING_CLUSTER_NAME";

impl Client {
    /// Starts a configuration. See [`ClientBuilder`].
    pub fn builder() -> ClientBuilder {
        ClientBuilder::new()
    }
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
    /// The CA bundle, and the setting it came from when that is not the caller's own
    /// (for messages).
    ca: Option<(PathBuf, Option<&'static str>)>,
    /// The caller's names for its settings: the fixes messages give are in its terms.
    words: &'static Words,
    /// What a refused secret is said to be, when not `words`' default (the variable
    /// it came from).
    secret_named: Option<String>,
    request_timeout: Duration,
    commit_margin: Duration,
    idle_ping: Duration,
    /// The cluster's name: the client sends nothing to a node that reports another or
    /// none.
    cluster_name: Option<String>,
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
            words: &RUST_WORDS,
            secret_named: None,
            request_timeout: REQUEST_TIMEOUT_DEFAULT,
            commit_margin: COMMIT_MARGIN,
            idle_ping: IDLE_PING_DEFAULT,
            cluster_name: None,
        }
    }

    /// A builder preset from the environment (docs/configuration.md, client side):
    /// `TICKETING_ADDRS` (comma-separated; default `127.0.0.1:5225`),
    /// `TICKETING_AUTH_TOKEN` or `TICKETING_AUTH_TOKEN_FILE`, `TICKETING_TLS_CA`,
    /// `TICKETING_OWNER`. Later calls override what it set.
    pub fn from_env() -> ClientBuilder {
        let mut builder = ClientBuilder::new().words(&ENV_WORDS);
        let addrs = std::env::var("TICKETING_ADDRS").unwrap_or_default();
        let addrs = split_addrs(&addrs);
        builder = if addrs.is_empty() { builder.addrs([DEFAULT_ADDR]) } else { builder.addrs(addrs) };
        if let Some(token) = std::env::var_os(TOKEN_VAR).filter(|t| !t.is_empty()) {
            builder = builder.auth_token(token.into_encoded_bytes());
            builder.secret_named = Some(format!("{TOKEN_VAR} is not the server's client secret"));
        } else if let Some(path) = std::env::var_os(TOKEN_FILE_VAR).filter(|p| !p.is_empty()) {
            builder.secret = Some(Secret::File(path.into(), TOKEN_FILE_VAR));
            builder.secret_named =
                Some(format!("the secret in {TOKEN_FILE_VAR} is not the server's client secret"));
        }
        if let Some(ca) = std::env::var_os(CA_VAR).filter(|p| !p.is_empty()) {
            builder.ca = Some((ca.into(), Some(CA_VAR)));
        }
        if let Ok(owner) = std::env::var("TICKETING_OWNER") {
            if !owner.is_empty() {
                builder = builder.owner(owner);
            }
        }
        if let Ok(name) = std::env::var(NAME_VAR) {
            if !name.trim().is_empty() {
                builder.cluster_name = Some(name.trim().to_owned());
            }
        }
        builder
    }

    /// The name of the cluster this client serves (`TICKETING_CLUSTER_NAME` on its
    /// nodes; docs/client.md, "One cluster per client"): each new connection reads the
    /// node's STATUS first, and a node that reports another name or none is never sent
    /// a request — the connection fails as a lasting mistake naming both names. Without
    /// a name, the client compares the fencing domains its nodes report instead.
    pub fn cluster_name(mut self, name: impl Into<String>) -> Self {
        self.cluster_name = Some(name.into());
        self
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
        self.secret_named = None;
        self
    }

    /// Reads the shared secret from a file at `build` (one trailing newline is ignored).
    pub fn auth_token_file(mut self, path: impl AsRef<Path>) -> Self {
        self.secret = Some(Secret::File(path.as_ref().to_owned(), "auth_token_file"));
        self.secret_named = None;
        self
    }

    /// Whose names messages give the settings in: the environment's (the CLI, a node's
    /// own client), the C ABI's, the Python package's (default: this builder's).
    pub(crate) fn words(mut self, words: &'static Words) -> Self {
        self.words = words;
        self
    }

    /// What a refused secret is said to be (a node's own client: its peer secret).
    pub(crate) fn secret_named(mut self, phrase: impl Into<String>) -> Self {
        self.secret_named = Some(phrase.into());
        self
    }

    /// The operator (peer) secret from `TICKETING_PEER_AUTH_TOKEN` or its `_FILE`, for
    /// `ticketing admin`: failures then name those variables. False when neither is set.
    pub(crate) fn operator_secret_from_env(&mut self) -> bool {
        const VAR: &str = "TICKETING_PEER_AUTH_TOKEN";
        const FILE_VAR: &str = "TICKETING_PEER_AUTH_TOKEN_FILE";
        let secret = if let Some(token) = std::env::var_os(VAR).filter(|t| !t.is_empty()) {
            self.secret_named = Some(format!(
                "{VAR} is not that node's peer (operator) secret: wrong here, or, if other nodes accept it, \
                 wrong on that node"
            ));
            Secret::Bytes(token.into_encoded_bytes())
        } else if let Some(path) = std::env::var_os(FILE_VAR).filter(|p| !p.is_empty()) {
            self.secret_named = Some(format!(
                "the secret in {FILE_VAR} is not that node's peer (operator) secret: wrong here, or, if \
                     other nodes accept it, wrong on that node"
            ));
            Secret::File(path.into(), FILE_VAR)
        } else {
            return false;
        };
        self.secret = Some(secret);
        true
    }

    /// The owner string sent with every ACQUIRE and RELEASE (1..=255 bytes). It names
    /// this client to the servers: no other client may use the same one (the client
    /// takes a holder with its owner and a token it does not know for a lost grant of
    /// its own, and releases it: docs/client.md, "No grant left orphaned"). Default:
    /// `host-pid-random`, unique per client.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// Turns TLS on, trusting the PEM certificates in `path`. The server name checked
    /// is the host part of each address.
    pub fn tls_ca_file(mut self, path: impl AsRef<Path>) -> Self {
        // Given by a method: named in the caller's words, unless the words are the
        // environment's (then it is this method's).
        let setting = (self.words.settings == ENV_WORDS.settings).then_some(RUST_WORDS.ca);
        self.ca = Some((path.as_ref().to_owned(), setting));
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
        let settled = self.settle()?;
        let handle = io::start(settled.config, settled.dialer).map_err(BuildError::Thread)?;
        Ok(Client::new(handle, settled.owner, settled.addrs, settled.request_timeout))
    }

    /// Validates the configuration as [`ClientBuilder::build`] does, and makes a
    /// [`Direct`]: no thread, no connection until it is asked something (the CLI's
    /// views of every node: `status`, `top`, `admin members`).
    pub(crate) fn build_direct(self) -> Result<Direct, BuildError> {
        Ok(Direct::new(self.settle()?.dialer))
    }

    /// Checks every setting and prepares what a client runs on, without I/O.
    fn settle(self) -> Result<Settled, BuildError> {
        check_setting("request_timeout", self.request_timeout, Duration::ZERO)?;
        check_setting("commit_margin", self.commit_margin, Duration::ZERO)?;
        check_setting("idle_ping", self.idle_ping, IDLE_PING_MIN)?;
        let mut addrs = Vec::new();
        for addr in &self.addrs {
            let addr = addr.trim();
            if addr.is_empty() {
                continue;
            }
            host_of(addr).ok_or_else(|| BuildError::BadAddr(addr.to_owned()))?;
            addrs.push(addr.to_owned());
        }
        if addrs.is_empty() {
            return Err(BuildError::NoAddrs);
        }
        let secret = match self.secret {
            None => return Err(BuildError::NoAuthToken),
            Some(Secret::Bytes(bytes)) => bytes,
            Some(Secret::File(path, setting)) => {
                let mut bytes = std::fs::read(&path).map_err(|error| BuildError::File {
                    setting,
                    path: path.clone(),
                    error,
                })?;
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
        let mut names = SettingNames::of(self.words);
        if let Some(phrase) = self.secret_named {
            names.secret = phrase;
        }
        let tls = match &self.ca {
            Some((path, setting)) => {
                for host in addrs.iter().filter_map(|a| host_of(a)) {
                    if !is_tls_server_name(host) {
                        return Err(BuildError::Tls(format!("{host:?} cannot be a TLS server name")));
                    }
                }
                let setting = setting.unwrap_or(self.words.ca);
                names.ca = format!("{setting} ({})", path.display());
                Some(tls::client_config(path, setting)?)
            }
            None => None,
        };
        if let Some(name) = &self.cluster_name {
            crate::proto::limits::check_cluster_name(name).map_err(BuildError::BadClusterName)?;
        }
        let config = Config {
            seeds: addrs.clone(),
            tls: tls.is_some(),
            commit_margin: self.commit_margin,
            idle_ping: self.idle_ping,
            named: self.cluster_name.is_some(),
            seeds_setting: self.words.settings.addrs,
            name_setting: self.words.settings.cluster_name,
        };
        let dialer = Dialer { key: auth_key(&secret), tls, names, cluster_name: self.cluster_name };
        Ok(Settled { config, dialer, owner, addrs, request_timeout: self.request_timeout })
    }
}

/// A checked configuration, before anything runs.
struct Settled {
    config: Config,
    dialer: Dialer,
    owner: String,
    addrs: Vec<String>,
    request_timeout: Duration,
}

/// The longest any time setting may be: a bound on every deadline the client computes.
const SETTING_MAX: Duration = Duration::from_secs(3600);
/// The shortest idle-PING interval (a PING per 10 ms of silence is already a lot).
const IDLE_PING_MIN: Duration = Duration::from_millis(10);

fn check_setting(name: &str, value: Duration, min: Duration) -> Result<(), BuildError> {
    if value < min || value > SETTING_MAX {
        return Err(BuildError::Setting(format!("{name} is {value:?}; must be {min:?}..={SETTING_MAX:?}")));
    }
    Ok(())
}

/// Splits a comma-separated address list, dropping empty parts.
pub fn split_addrs(list: &str) -> Vec<String> {
    list.split(',').map(str::trim).filter(|a| !a.is_empty()).map(str::to_owned).collect()
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
