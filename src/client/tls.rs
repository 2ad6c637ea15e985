//! TLS on the client side: rustls with the ring provider, servers verified against a
//! PEM CA bundle, the server name being the host part of the configured address.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};

use super::error::BuildError;

/// Builds the client TLS configuration that trusts exactly the certificates in `ca`;
/// errors name `setting`, where the path came from.
pub(crate) fn client_config(ca: &Path, setting: &'static str) -> Result<Arc<ClientConfig>, BuildError> {
    let pem = std::fs::read(ca).map_err(|error| BuildError::File { setting, path: ca.to_owned(), error })?;
    let mut roots = RootCertStore::empty();
    let bad = |e: &dyn std::fmt::Display| BuildError::Tls(format!("{} ({setting}): {e}", ca.display()));
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| bad(&e))?;
        roots.add(cert).map_err(|e| bad(&e))?;
    }
    if roots.is_empty() {
        return Err(bad(&"holds no PEM certificate"));
    }
    let config = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| BuildError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}
