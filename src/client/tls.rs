//! TLS on the client side: rustls with the ring provider, servers verified against a
//! PEM CA bundle, the server name being the host part of the configured address.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};

use super::error::BuildError;

/// Builds the client TLS configuration that trusts exactly the certificates in `ca`.
pub(crate) fn client_config(ca: &Path) -> Result<Arc<ClientConfig>, BuildError> {
    let pem = std::fs::read(ca).map_err(|error| BuildError::File { path: ca.to_owned(), error })?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| BuildError::Tls(format!("{}: {e}", ca.display())))?;
        roots.add(cert).map_err(|e| BuildError::Tls(format!("{}: {e}", ca.display())))?;
    }
    if roots.is_empty() {
        return Err(BuildError::Tls(format!("{} holds no PEM certificate", ca.display())));
    }
    let config = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| BuildError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}
