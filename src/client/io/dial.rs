//! Making a session: TCP (each resolved address in turn, [`CONNECT_TIMEOUT`] each),
//! TLS if configured (rustls, the server name being the address's host), then the
//! challenge-response handshake with the server's proof checked. A failure is one
//! sentence naming its cause and what to check, and says whether trying again can
//! help ([`DialFailure::lasting`]): a refused secret, an untrusted certificate, TLS on
//! one side only or a port of another kind will fail the same way every time.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ring::hmac;
use rustls::pki_types::ServerName;
use rustls::ClientConfig;

use crate::client::core::DialFailure;
use crate::client::error::SettingWords;
use crate::proto::addr::host_of;
use crate::proto::handshake::{client_handshake, HandshakeError, Welcome, CLIENT_LABELS};
use crate::proto::limits::HANDSHAKE_TIMEOUT_MS;
use crate::tls::{greeting_within, GREETING_PROBE_AFTER, PROBE_LIMIT};
use crate::tls_verdict::{rustls_error, tls_cause, TlsCause};
use crate::transport::{self, Duplex, ReadHalf, WriteHalf};

/// Longest wait for a TCP connection to one resolved address.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest wait for the server's side of the handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_millis(HANDSHAKE_TIMEOUT_MS);

/// What a dial needs: the secret and the TLS configuration, if any, and how the
/// messages name them.
pub(crate) struct Dialer {
    pub(crate) key: hmac::Key,
    pub(crate) tls: Option<Arc<ClientConfig>>,
    pub(crate) names: SettingNames,
    /// The cluster name the client was given: a node's STATUS must report it before
    /// the connection is used ([`check_cluster_name`]).
    pub(crate) cluster_name: Option<String>,
}

/// How failures name the settings an operator fixes: the variables when the client
/// was configured from the environment, the builder's methods, the C ABI's arguments,
/// the Python keywords ([`Words`]).
#[derive(Clone, Debug)]
pub(crate) struct SettingNames {
    /// Said when the server refuses the secret, e.g. "TICKETING_AUTH_TOKEN is not the
    /// server's client secret".
    pub(crate) secret: String,
    /// Where the trusted CA comes from, e.g. "TICKETING_TLS_CA (ca.pem)".
    pub(crate) ca: String,
    /// How this caller turns TLS on and off.
    pub(crate) words: &'static Words,
}

impl Default for SettingNames {
    fn default() -> Self {
        SettingNames::of(&RUST_WORDS)
    }
}

impl SettingNames {
    /// The names `words` gives, before any setting is known.
    pub(crate) fn of(words: &'static Words) -> SettingNames {
        SettingNames {
            secret: format!("{} is not the server's client secret", words.secret),
            ca: "the configured CA bundle".into(),
            words,
        }
    }
}

/// Each caller's names for the settings a connection failure asks to fix. One message
/// per failure is built in one place (this file); only these names differ, so a fix is
/// given in the caller's own terms.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Words {
    /// The client secret's setting.
    pub(crate) secret: &'static str,
    /// The CA bundle's setting.
    pub(crate) ca: &'static str,
    /// How to turn TLS on, followed by "that signed its certificate" in a message.
    pub(crate) tls_on: &'static str,
    /// How to turn TLS off.
    pub(crate) tls_off: &'static str,
    /// The settings a refused configuration names (`ClientBuilder::build`'s errors).
    pub(crate) settings: SettingWords,
    /// How this caller writes one key of a hold: the text before the key, between the
    /// key and the count, between the count and the capacity, and after it
    /// ([`Words::hold_part`]).
    pub(crate) hold_part: [&'static str; 4],
    /// Where this caller gives a hold its keys, said after "a hold names 1 to 16 keys".
    pub(crate) hold_keys: &'static str,
}

impl Words {
    /// One key of a hold as this caller wrote it, e.g. `Permits("k", 3, 2)` in Python.
    pub(crate) fn hold_part(&self, key: &str, count: u32, capacity: u32) -> String {
        let [before, to_count, to_capacity, after] = self.hold_part;
        format!("{before}{key:?}{to_count}{count}{to_capacity}{capacity}{after}")
    }
}

/// `ClientBuilder::from_env`: the environment variables, and the builder's holds.
pub(crate) const ENV_WORDS: Words = Words {
    secret: "TICKETING_AUTH_TOKEN",
    ca: "TICKETING_TLS_CA",
    tls_on: "set TICKETING_TLS_CA to the CA bundle",
    tls_off: "unset TICKETING_TLS_CA",
    settings: SettingWords {
        addrs: "TICKETING_ADDRS",
        auth_token: "TICKETING_AUTH_TOKEN",
        owner: "TICKETING_OWNER",
        cluster_name: "TICKETING_CLUSTER_NAME",
    },
    hold_part: ["Hold::permits(", ", ", ", ", ")"],
    hold_keys: "Hold::key, Hold::permits",
};

/// The `ticketing` command: the environment variables, and its hold's KEY arguments
/// with `--count` and `--permits`.
pub(crate) const CLI_WORDS: Words = Words {
    hold_part: ["KEY ", " with --count ", " --permits ", ""],
    hold_keys: "KEY arguments",
    ..ENV_WORDS
};

/// The Rust library: the builder's methods.
pub(crate) const RUST_WORDS: Words = Words {
    secret: "the token given to ClientBuilder::auth_token",
    ca: "tls_ca_file",
    tls_on: "give ClientBuilder::tls_ca_file the CA bundle",
    tls_off: "build the client without ClientBuilder::tls_ca_file",
    settings: SettingWords {
        addrs: "ClientBuilder::addrs",
        auth_token: "ClientBuilder::auth_token",
        owner: "ClientBuilder::owner",
        cluster_name: "ClientBuilder::cluster_name",
    },
    hold_part: ["Hold::permits(", ", ", ", ", ")"],
    hold_keys: "Hold::key, Hold::permits",
};

/// The C ABI: `ticketing_client_new`'s arguments.
pub(crate) const C_WORDS: Words = Words {
    secret: "the auth_token given to ticketing_client_new",
    ca: "tls_ca_file",
    tls_on: "pass ticketing_client_new, as tls_ca_file, the CA bundle",
    tls_off: "pass ticketing_client_new a NULL tls_ca_file",
    settings: SettingWords {
        addrs: "addrs",
        auth_token: "auth_token",
        owner: "owner",
        cluster_name: "cluster_name",
    },
    hold_part: ["ticketing_hold_part {.key = ", ", .count = ", ", .capacity = ", "}"],
    hold_keys: "ticketing_hold's parts_len",
};

/// The Python package: `ticketing.Client`'s keywords.
pub(crate) const PYTHON_WORDS: Words = Words {
    secret: "the auth_token= given to ticketing.Client",
    ca: "tls_ca=",
    tls_on: "pass ticketing.Client the CA bundle as tls_ca=",
    tls_off: "leave out tls_ca=",
    settings: SettingWords {
        addrs: "addrs",
        auth_token: "auth_token=",
        owner: "owner=",
        cluster_name: "cluster_name=",
    },
    hold_part: ["Permits(", ", ", ", ", ")"],
    hold_keys: "client.hold(keys)",
};

/// The Go module: `ticketing.Config`'s fields.
pub(crate) const GO_WORDS: Words = Words {
    secret: "the Config.AuthToken given to ticketing.New",
    ca: "Config.TLSCAFile",
    tls_on: "set Config.TLSCAFile to the CA bundle",
    tls_off: "leave Config.TLSCAFile empty",
    settings: SettingWords {
        addrs: "Config.Addrs",
        auth_token: "Config.AuthToken",
        owner: "Config.Owner",
        cluster_name: "Config.ClusterName",
    },
    hold_part: ["Part{Key: ", ", Count: ", ", Capacity: ", "}"],
    hold_keys: "AcquireAll's keys, AcquirePermits' parts",
};

/// The Java library: `Client.builder()`'s methods.
pub(crate) const JAVA_WORDS: Words = Words {
    secret: "the authToken given to Client.builder()",
    ca: "tlsCaFile",
    tls_on: "give Client.builder() the CA bundle as tlsCaFile",
    tls_off: "build the client without tlsCaFile",
    settings: SettingWords {
        addrs: "addrs",
        auth_token: "authToken",
        owner: "owner",
        cluster_name: "clusterName",
    },
    hold_part: ["permits(", ", ", ", ", ")"],
    hold_keys: "Hold.key, Hold.permits or acquire's list of keys",
};

/// The Node.js package: the options of `new Client({...})`.
pub(crate) const NODE_WORDS: Words = Words {
    secret: "the authToken given to new Client",
    ca: "tlsCa",
    tls_on: "give new Client the CA bundle as tlsCa",
    tls_off: "leave out tlsCa",
    settings: SettingWords {
        addrs: "addrs",
        auth_token: "authToken",
        owner: "owner",
        cluster_name: "clusterName",
    },
    hold_part: ["{ key: ", ", count: ", ", capacity: ", " }"],
    hold_keys: "client.hold(keys)",
};

/// An authenticated connection, split for a reader and a writer.
pub(crate) struct Dialed {
    pub(crate) welcome: Welcome,
    /// The socket address reached (`ip:port`).
    pub(crate) peer: String,
    pub(crate) reader: ReadHalf,
    pub(crate) writer: WriteHalf,
}

impl Dialer {
    /// Connects and authenticates to `addr`. `connected` is told when the TCP
    /// connection is up and the greeting is awaited (a plain client at a TLS server
    /// waits there: the server waits for TLS).
    pub(crate) fn dial(&self, addr: &str, connected: impl FnOnce(String)) -> Result<Dialed, DialFailure> {
        self.dial_within(addr, connected, None)
    }

    /// [`Dialer::dial`], all of it (connects and handshake) within `limit` if given.
    pub(crate) fn dial_within(
        &self,
        addr: &str,
        connected: impl FnOnce(String),
        limit: Option<Duration>,
    ) -> Result<Dialed, DialFailure> {
        let end = limit.map(|l| Instant::now() + l);
        let left = |cap: Duration| match end {
            Some(end) => cap.min(end.saturating_duration_since(Instant::now())).max(Duration::from_millis(1)),
            None => cap,
        };
        let host = host_of(addr)
            .ok_or_else(|| DialFailure::lasting(format!("address {addr:?} is not host:port")))?;
        let resolved: Vec<SocketAddr> = crate::resolve::resolve(addr)
            .map_err(|e| DialFailure::transient(format!("cannot resolve {addr}: {e}")))?;
        let mut last = format!("{addr} resolved to no address");
        let mut sock = None;
        for target in resolved {
            match TcpStream::connect_timeout(&target, left(CONNECT_TIMEOUT)) {
                Ok(s) => {
                    sock = Some((s, target));
                    break;
                }
                Err(e) => last = explain_connect_error(&target.to_string(), &e),
            }
        }
        let (sock, target) = sock.ok_or(DialFailure::transient(last))?;
        let transient = |e: io::Error| DialFailure::transient(format!("{addr}: {e}"));
        let peer = sock.peer_addr().map_err(transient)?.to_string();
        let tls = self.tls.is_some();
        connected(if tls {
            format!("{addr}: connected, but the TLS handshake has not finished yet")
        } else {
            format!(
                "{addr}: connected, but the server has not sent its greeting yet (a TLS server waits for TLS: \
                 {})",
                self.names.words.tls_on
            )
        });
        sock.set_nodelay(true).map_err(transient)?;
        let deadline = Instant::now() + left(HANDSHAKE_TIMEOUT);
        if !tls
            && !greeting_within(&sock, GREETING_PROBE_AFTER.min(left(HANDSHAKE_TIMEOUT)))
            && crate::tls::speaks_tls(target, left(PROBE_LIMIT)) == Some(true)
        {
            return Err(DialFailure::lasting(format!(
                "{addr}: the server speaks TLS and this client does not: {} that signed its certificate \
                 (docs/tls.md)",
                self.names.words.tls_on
            )));
        }
        let tls_state = match &self.tls {
            None => None,
            Some(config) => {
                let name = ServerName::try_from(host.to_owned()).map_err(|e| {
                    DialFailure::lasting(format!("{addr}: bad TLS server name {host:?}: {e}"))
                })?;
                let conn = rustls::ClientConnection::new(Arc::clone(config), name)
                    .map_err(|e| DialFailure::lasting(format!("{addr}: TLS: {e}")))?;
                Some(rustls::Connection::Client(conn))
            }
        };
        let (mut reader, mut writer) = transport::split(sock, tls_state).map_err(transient)?;
        reader.set_deadline(Some(deadline)).map_err(transient)?;
        writer.set_write_deadline(Some(deadline)).map_err(transient)?;
        let welcome = client_handshake(
            &mut Duplex { reader: &mut reader, writer: &mut writer },
            &self.key,
            &CLIENT_LABELS,
        )
        .map_err(|e| explain_handshake_error(addr, host, tls, &self.names, &e))?;
        if let Some(name) = &self.cluster_name {
            let text = read_status(&mut reader, &mut writer, deadline)
                .map_err(|why| DialFailure::transient(format!("{addr}: reading its cluster name: {why}")))?;
            check_cluster_name(name, &text).map_err(|why| {
                DialFailure::lasting(format!(
                    "{addr}: {why}: this client serves cluster {name:?} only ({}), so it sends that node \
                     nothing; list only that cluster's nodes in {}",
                    self.names.words.settings.cluster_name, self.names.words.settings.addrs
                ))
            })?;
        }
        // Why no read deadline from here on: answers to queued ACQUIREs may take up to
        // the longest wait; callers time out on their own, dead-session detection
        // PINGs a silent session, and closing the socket wakes the reader.
        reader.set_deadline(None).map_err(transient)?;
        writer.set_write_deadline(None).map_err(transient)?;
        Ok(Dialed { welcome, peer, reader, writer })
    }
}

/// The request id of the STATUS that reads a node's cluster name before the session
/// starts (no other request is pending on the connection then).
const NAME_STATUS_ID: u32 = 1;

/// Sends STATUS on a fresh connection and reads its answer by `deadline`.
fn read_status(reader: &mut ReadHalf, writer: &mut WriteHalf, deadline: Instant) -> Result<String, String> {
    use crate::proto::frame::{decode_response, encode_request, Request, Response};
    let mut frame = Vec::with_capacity(16);
    encode_request(&mut frame, NAME_STATUS_ID, &Request::Status);
    writer.write_counted(&frame, deadline).map_err(|e| format!("{e:?}"))?;
    let mut frames = crate::proto::io::FrameReader::new(reader, crate::proto::limits::RESPONSE_FRAME_LEN_MAX);
    let payload = frames.read_payload().map_err(|e| format!("{e:?}"))?;
    match decode_response(payload) {
        Ok((NAME_STATUS_ID, Response::Status { text })) => Ok(text),
        Ok((_, other)) => Err(format!("answer {other:?} to STATUS")),
        Err(e) => Err(format!("bad frame: {e}")),
    }
}

/// Does the STATUS `text` of a node report cluster name `name`? `Err` says what it
/// reports instead (another name, or none: a node without `TICKETING_CLUSTER_NAME`, or
/// one from before names existed, which sends no `cluster_name` line).
pub(crate) fn check_cluster_name(name: &str, text: &str) -> Result<(), String> {
    let theirs = text.lines().find_map(|l| l.strip_prefix("cluster_name=")).unwrap_or("");
    match theirs {
        t if t == name => Ok(()),
        "" => Err("the node reports no cluster name (its TICKETING_CLUSTER_NAME is unset)".to_owned()),
        t => Err(format!("the node reports cluster name {t:?}")),
    }
}

/// A failed TCP connect, said so that the operator knows what to check.
fn explain_connect_error(target: &str, e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => format!("{target}: connection refused: no server listens there"),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => {
            format!(
                "{target}: no answer to the connection within {CONNECT_TIMEOUT:?} (host down, or a firewall)"
            )
        }
        _ => format!("{target}: cannot connect: {e}"),
    }
}

/// A failed handshake, said by its cause: the auth token, TLS, or the wrong kind of
/// server. Each names what to check; all but a broken or silent connection are
/// lasting.
pub(crate) fn explain_handshake_error(
    addr: &str,
    host: &str,
    tls: bool,
    names: &SettingNames,
    e: &HandshakeError,
) -> DialFailure {
    let lasting = |text: String| DialFailure::lasting(text);
    match e {
        // Our AUTH had the version the server's HELLO named and a well-formed body: a
        // server refuses such an AUTH only for its mac (docs/protocol.md §3).
        HandshakeError::Rejected(_) => {
            lasting(format!("{addr}: the server refused our auth token ({})", names.secret))
        }
        HandshakeError::BadProof => lasting(format!(
            "{addr}: the server's proof does not match our auth token: it holds another secret, or it is not \
             a Ticketing server"
        )),
        HandshakeError::WrongPortKind(b'P') => lasting(format!(
            "{addr}: this is a node's peer port, not its client port (the client port is 1000 lower)"
        )),
        HandshakeError::BadMagic | HandshakeError::WrongPortKind(_) => {
            lasting(format!("{addr}: not a Ticketing client port (another service listens there)"))
        }
        HandshakeError::Io(io) => explain_handshake_io(addr, host, tls, names, io),
        other => lasting(format!("{addr}: {other}")),
    }
}

fn explain_handshake_io(
    addr: &str,
    host: &str,
    tls: bool,
    names: &SettingNames,
    io: &io::Error,
) -> DialFailure {
    let timed_out = matches!(io.kind(), io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock);
    if timed_out && !tls {
        return DialFailure::transient(format!(
            "{addr}: no greeting from the server within {HANDSHAKE_TIMEOUT:?}: does it use TLS? (then {})",
            names.words.tls_on
        ));
    }
    if !tls || io.kind() != io::ErrorKind::InvalidData {
        return DialFailure::transient(format!("{addr}: {io}"));
    }
    let Some(tls_error) = rustls_error(io) else {
        return DialFailure::transient(format!("{addr}: TLS: {io}"));
    };
    // Every TLS verdict is lasting: the same certificates meet the same way next time.
    DialFailure::lasting(match tls_cause(tls_error) {
        TlsCause::TheirsNotForName => format!(
            "{addr}: TLS: the server's certificate is not valid for {host:?}: it must list that host as a \
             subjectAltName (docs/tls.md)"
        ),
        TlsCause::TheirsNotFromOurCa => {
            format!("{addr}: TLS: the server's certificate is not signed by the CA in {}", names.ca)
        }
        TlsCause::TheirsExpired => format!("{addr}: TLS: the server's certificate has expired"),
        TlsCause::NotTls => {
            format!("{addr}: TLS: the server does not speak TLS (a plain server: {})", names.words.tls_off)
        }
        _ => format!("{addr}: TLS: {tls_error}"),
    })
}
