//! The secrets and TLS files: read from a variable or a file, checked (length, the peer
//! secret differs from the client secret, files readable and not readable by others).

use std::path::PathBuf;

use super::values::{err, ConfigError};
use crate::proto::limits::AUTH_TOKEN_LEN_MIN;

/// PEM files that turn TLS on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: Option<PathBuf>,
}

/// The peer secret must exist in a cluster and must not be the client secret: every
/// lock client holds the client secret, and the peer secret is what makes a node a
/// node (and an operator an operator).
pub fn check_peer_secret(peer: Option<&[u8]>, client: &[u8]) -> Result<(), ConfigError> {
    const VAR: &str = "TICKETING_PEER_AUTH_TOKEN";
    match peer {
        None => Err(err(
            VAR,
            "required in cluster mode (or TICKETING_PEER_AUTH_TOKEN_FILE): the peer and operator \
             secret, different from the client secret",
        )),
        // Equality of two secrets of our own: no timing to protect here.
        Some(peer) if peer == client => Err(err(
            VAR,
            "must differ from TICKETING_AUTH_TOKEN: every lock client holds the client secret, \
             and the peer secret lets its holder act as a node or an operator",
        )),
        Some(_) => Ok(()),
    }
}

/// A secret given inline or as a file (one trailing newline is not part of it). A file
/// that other users may read earns a warning.
pub fn secret(
    get: &dyn Fn(&str) -> Option<String>,
    var: &'static str,
    file_var: &'static str,
    warnings: &mut Vec<String>,
) -> Result<Option<Vec<u8>>, ConfigError> {
    let value = match (get(var), get(file_var)) {
        (Some(_), Some(_)) => return Err(err(var, format!("set either {var} or {file_var}, not both"))),
        (Some(inline), None) => (var, inline.into_bytes()),
        (None, Some(path)) => {
            let mut bytes =
                std::fs::read(&path).map_err(|e| err(file_var, format!("cannot read {path:?}: {e}")))?;
            if let Some(warning) = world_readable(file_var, &path) {
                warnings.push(warning);
            }
            if bytes.ends_with(b"\n") {
                bytes.pop();
                if bytes.ends_with(b"\r") {
                    bytes.pop();
                }
            }
            (file_var, bytes)
        }
        (None, None) => return Ok(None),
    };
    let (source, bytes) = value;
    if bytes.len() < AUTH_TOKEN_LEN_MIN {
        return Err(err(
            source,
            format!("the secret is {} bytes; at least {AUTH_TOKEN_LEN_MIN} are required", bytes.len()),
        ));
    }
    Ok(Some(bytes))
}

/// A warning when `path` may be read by users other than its owner and group.
fn world_readable(var: &str, path: &str) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode();
    (mode & 0o004 != 0).then(|| {
        format!(
            "{var}: {path:?} is readable by every user of this host (mode {:o}); chmod o-r it",
            mode & 0o777
        )
    })
}

pub fn tls_files(get: &dyn Fn(&str) -> Option<String>) -> Result<Option<TlsFiles>, ConfigError> {
    let cert = get("TICKETING_TLS_CERT");
    let key = get("TICKETING_TLS_KEY");
    let ca = get("TICKETING_TLS_CA").map(PathBuf::from);
    let files = match (cert, key) {
        (None, None) if ca.is_some() => {
            return Err(err(
                "TICKETING_TLS_CA",
                "needs TICKETING_TLS_CERT and TICKETING_TLS_KEY: a server with a CA but no certificate \
                 would run without TLS",
            ))
        }
        (None, None) => return Ok(None),
        (Some(_), None) => return Err(err("TICKETING_TLS_KEY", "required when TICKETING_TLS_CERT is set")),
        (None, Some(_)) => return Err(err("TICKETING_TLS_CERT", "required when TICKETING_TLS_KEY is set")),
        (Some(cert), Some(key)) => TlsFiles { cert: cert.into(), key: key.into(), ca },
    };
    for (var, path) in [("TICKETING_TLS_CERT", &files.cert), ("TICKETING_TLS_KEY", &files.key)] {
        if !path.is_file() {
            return Err(err(var, format!("{} is not a readable file", path.display())));
        }
    }
    if let Some(ca) = &files.ca {
        if !ca.is_file() {
            return Err(err("TICKETING_TLS_CA", format!("{} is not a readable file", ca.display())));
        }
    }
    Ok(Some(files))
}
