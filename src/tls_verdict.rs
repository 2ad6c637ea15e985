//! What a failed TLS handshake says about the two sides, as a cause an operator can
//! act on. One reading of rustls's errors for every side that words them: the client
//! (src/client/io/dial.rs), the peer dialer and acceptor (src/cluster/explain.rs) and
//! the client port (src/server/handshake_log.rs), each in its own words.

use std::io;

use rustls::{AlertDescription as Alert, CertificateError as C};

/// The cause of a failed TLS handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsCause {
    /// The other side's certificate is not signed by a CA this side trusts.
    TheirsNotFromOurCa,
    /// The other side's certificate does not list the name this side dialed.
    TheirsNotForName,
    /// The other side's certificate has expired.
    TheirsExpired,
    /// The other side presented no certificate where one is required (mutual TLS).
    TheirsMissing,
    /// The other side refused this side's certificate: its CA did not sign it.
    OursNotFromTheirCa,
    /// The other side refused this side's certificate as expired or not valid yet.
    OursExpired,
    /// The other side refused this side's certificate for another reason (a name it
    /// does not list, a usage it lacks: the alert says which).
    OursRefused,
    /// The other side does not speak TLS: bytes that are no TLS record arrived.
    NotTls,
    /// Anything else: the rustls error itself is the best description.
    Other,
}

/// The rustls error inside an I/O error of a TLS connection, if it is one.
pub fn rustls_error(e: &io::Error) -> Option<&rustls::Error> {
    e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>())
}

/// Reads `e` (the same certificates meet the same way next time: every cause but
/// `Other` is a lasting mistake of configuration).
pub fn tls_cause(e: &rustls::Error) -> TlsCause {
    match e {
        rustls::Error::InvalidCertificate(cert) => match cert {
            C::UnknownIssuer | C::BadSignature => TlsCause::TheirsNotFromOurCa,
            C::NotValidForName | C::NotValidForNameContext { .. } => TlsCause::TheirsNotForName,
            C::Expired | C::ExpiredContext { .. } => TlsCause::TheirsExpired,
            _ => TlsCause::Other,
        },
        rustls::Error::NoCertificatesPresented => TlsCause::TheirsMissing,
        // The alerts rustls sends for the certificate errors above (its mapping of
        // `CertificateError` to `AlertDescription`).
        // DecryptError: a CA of the same name as theirs signed ours, with another key
        // (the recipe of docs/tls.md run twice makes two such CAs).
        rustls::Error::AlertReceived(Alert::UnknownCA | Alert::DecryptError) => TlsCause::OursNotFromTheirCa,
        rustls::Error::AlertReceived(Alert::CertificateExpired) => TlsCause::OursExpired,
        rustls::Error::AlertReceived(
            Alert::BadCertificate | Alert::UnsupportedCertificate | Alert::CertificateUnknown,
        ) => TlsCause::OursRefused,
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => TlsCause::NotTls,
        _ => TlsCause::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificate_errors_and_their_alerts_read_as_the_same_mistake_from_each_side() {
        let pairs = [
            (C::UnknownIssuer, TlsCause::TheirsNotFromOurCa, TlsCause::OursNotFromTheirCa),
            (C::BadSignature, TlsCause::TheirsNotFromOurCa, TlsCause::OursNotFromTheirCa),
            (C::Expired, TlsCause::TheirsExpired, TlsCause::OursExpired),
            (C::NotValidForName, TlsCause::TheirsNotForName, TlsCause::OursRefused),
        ];
        for (cert, here, there) in pairs {
            let alert = Alert::from(cert.clone());
            assert_eq!(tls_cause(&rustls::Error::InvalidCertificate(cert)), here);
            assert_eq!(tls_cause(&rustls::Error::AlertReceived(alert)), there);
        }
        let wrapped = io::Error::new(io::ErrorKind::InvalidData, rustls::Error::NoCertificatesPresented);
        assert_eq!(rustls_error(&wrapped).map(tls_cause), Some(TlsCause::TheirsMissing));
    }
}
