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

/// The dialing side's configuration for the peer port: peers' certificates are
/// verified against `TICKETING_TLS_CA`, which is therefore required in a cluster.
pub fn client_config(files: &TlsFiles) -> Result<Arc<rustls::ClientConfig>, ConfigError> {
    let Some(ca) = &files.ca else {
        return Err(ConfigError {
            var: "TICKETING_TLS_CA",
            message: "required to verify peers when TLS is on in a cluster".into(),
        });
    };
    let mut roots = rustls::RootCertStore::empty();
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(ca)
        .and_then(|iter| iter.collect())
        .map_err(|e| ConfigError {
            var: "TICKETING_TLS_CA",
            message: format!("{}: {e}", ca.display()),
        })?;
    for cert in certs {
        roots.add(cert).map_err(|e| ConfigError {
            var: "TICKETING_TLS_CA",
            message: format!("{}: {e}", ca.display()),
        })?;
    }
    if roots.is_empty() {
        return Err(ConfigError {
            var: "TICKETING_TLS_CA",
            message: format!("{} holds no PEM certificate", ca.display()),
        });
    }
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("the ring provider supports the default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}
