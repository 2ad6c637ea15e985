//! A configuration error (the variable and what is wrong), and the parsers every
//! setting shares: an address, a bounded whole number.

use std::net::SocketAddr;

/// A configuration error: which variable, and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub var: &'static str,
    pub message: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.var, self.message)
    }
}

impl std::error::Error for ConfigError {}

pub fn err(var: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError { var, message: message.into() }
}

pub fn resolve(var: &'static str, text: &str) -> Result<SocketAddr, ConfigError> {
    match crate::resolve::resolve(text) {
        Ok(addrs) => {
            addrs.into_iter().next().ok_or_else(|| err(var, format!("{text:?} resolves to no address")))
        }
        Err(e) => Err(err(var, format!("{text:?} is not host:port ({e})"))),
    }
}

pub fn number(
    get: &dyn Fn(&str) -> Option<String>,
    var: &'static str,
    default: u64,
    min: u64,
    max: u64,
) -> Result<u64, ConfigError> {
    let Some(text) = get(var) else {
        return Ok(default);
    };
    match text.trim().parse::<u64>() {
        Ok(v) if (min..=max).contains(&v) => Ok(v),
        _ => Err(err(var, format!("{text:?} is not a whole number in {min}..={max}"))),
    }
}

/// A client address: `host:port`, short enough for a `str8`, with a port that leaves
/// room for the peer port (+1000); the same check as every address a node stores.
pub fn check_addr(var: &'static str, addr: &str) -> Result<(), ConfigError> {
    crate::proto::addr::check_client_addr(addr).map_err(|e| err(var, e.0))
}
