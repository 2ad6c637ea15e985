//! TLS for the server's ports: rustls with the ring provider only (aws-lc is never built).

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::config::{ConfigError, TlsFiles};

/// The ring crypto provider, shared by every TLS configuration of the process.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Loads the certificate chain and key named by `files` into a server configuration.
/// Errors name the variable whose file is at fault.
pub fn server_config(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>, ConfigError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|iter| iter.collect())
        .map_err(|e| ConfigError {
            var: "TICKETING_TLS_CERT",
            message: format!("{}: {e}", files.cert.display()),
        })?;
    if certs.is_empty() {
        return Err(ConfigError {
            var: "TICKETING_TLS_CERT",
            message: format!("{} holds no PEM certificate", files.cert.display()),
        });
    }
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| ConfigError {
        var: "TICKETING_TLS_KEY",
        message: format!("{}: {e}", files.key.display()),
    })?;
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("the ring provider supports the default protocol versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| ConfigError {
            var: "TICKETING_TLS_KEY",
            message: format!("does not fit the certificate: {e}"),
        })?;
    Ok(Arc::new(config))
}
