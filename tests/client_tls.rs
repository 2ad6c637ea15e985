//! The client over TLS against the real server, with a throw-away CA from rcgen.

mod common;

use std::time::Duration;

use common::{Server, ServerProcess, TOKEN};
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use ticketing::client::{AcquireError, Client, ReleaseOutcome};

struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    /// A CA and a server certificate for `localhost` and 127.0.0.1 signed by it.
    fn new() -> Pki {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = KeyPair::generate().unwrap();
        let params = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        std::fs::write(dir.path().join("cert.pem"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("key.pem"), key.serialize_pem()).unwrap();
        // A second, unrelated CA: a client trusting only it must refuse the server.
        let other_key = KeyPair::generate().unwrap();
        let mut other = CertificateParams::new(Vec::<String>::new()).unwrap();
        other.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let other = other.self_signed(&other_key).unwrap();
        std::fs::write(dir.path().join("other-ca.pem"), other.pem()).unwrap();
        Pki { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_str().unwrap().to_owned()
    }
}

fn tls_server(pki: &Pki) -> ServerProcess {
    Server::new().tls(&pki.path("cert.pem"), &pki.path("key.pem")).start()
}

fn tls_client(addr: &str, ca: &str) -> Client {
    Client::builder()
        .addrs([addr])
        .auth_token(TOKEN)
        .owner("tls-owner")
        .tls_ca_file(ca)
        .request_timeout(Duration::from_secs(3))
        .build()
        .unwrap()
}

#[test]
fn locks_over_tls_by_name_and_by_ip() {
    let pki = Pki::new();
    let server = tls_server(&pki);
    let port = server.addr.port();
    for addr in [format!("localhost:{port}"), server.addr.to_string()] {
        let client = tls_client(&addr, &pki.path("ca.pem"));
        let lock = client.acquire("tls-key", Duration::from_secs(5), Duration::from_secs(2)).unwrap();
        let holder = client.query("tls-key").unwrap().unwrap();
        assert_eq!(holder.token, lock.token());
        assert!(client.status().unwrap().contains("role=standalone"));
        assert_eq!(lock.release(), Ok(ReleaseOutcome::Released));
    }
}

#[test]
fn many_threads_over_one_tls_client() {
    let pki = Pki::new();
    let server = tls_server(&pki);
    let client = tls_client(&server.addr.to_string(), &pki.path("ca.pem"));
    let threads: Vec<_> = (0..16)
        .map(|t| {
            let client = client.clone();
            std::thread::spawn(move || {
                for i in 0..30 {
                    let key = format!("k{}", (t + i) % 4);
                    let lock = client.acquire(&key, Duration::from_secs(5), Duration::from_secs(10)).unwrap();
                    lock.release().unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
}

#[test]
fn an_untrusted_server_is_never_sent_a_request() {
    let pki = Pki::new();
    let server = tls_server(&pki);
    let client = tls_client(&server.addr.to_string(), &pki.path("other-ca.pem"));
    let err = client.acquire("k", Duration::from_secs(5), Duration::ZERO).unwrap_err();
    assert!(matches!(err, AcquireError::Unavailable { .. }), "{err:?}");
    // A plain-text client cannot talk to the TLS port either.
    let plain = server.client("plain");
    let err = plain.acquire("k", Duration::from_secs(5), Duration::ZERO).unwrap_err();
    assert!(matches!(err, AcquireError::Unavailable { .. }), "{err:?}");
}

#[test]
fn a_bad_ca_file_is_a_build_error() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    let build = |ca: &std::path::Path| {
        Client::builder()
            .addrs(["localhost:5225"])
            .auth_token(TOKEN)
            .tls_ca_file(ca)
            .build()
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    assert!(build(&empty).contains("no PEM certificate"));
    assert!(build(&dir.path().join("missing.pem")).contains("cannot read"));
}

/// The message of the acquire error a C ABI client of `addr` meets (`binding` NULL:
/// `ticketing_client_new`; else `ticketing_client_new_for`), trusting `ca` if given.
fn c_abi_acquire_error(addr: &str, ca: Option<&str>, binding: Option<&str>) -> String {
    use std::ffi::{CStr, CString};
    use std::ptr;
    use ticketing::capi::*;
    let addr = CString::new(addr).unwrap();
    let addrs = [addr.as_ptr()];
    let ca = ca.map(|c| CString::new(c).unwrap());
    let ca_ptr = ca.as_ref().map_or(ptr::null(), |c| c.as_ptr());
    let (mut client, mut error) = (ptr::null_mut(), ptr::null_mut());
    let owner = c"c-tls";
    let rc = unsafe {
        match binding {
            None => ticketing_client_new(
                addrs.as_ptr(),
                1,
                TOKEN.as_ptr(),
                TOKEN.len(),
                owner.as_ptr(),
                ca_ptr,
                &mut client,
                &mut error,
            ),
            Some(binding) => {
                let binding = CString::new(binding).unwrap();
                ticketing_client_new_for(
                    binding.as_ptr(),
                    addrs.as_ptr(),
                    1,
                    TOKEN.as_ptr(),
                    TOKEN.len(),
                    owner.as_ptr(),
                    ca_ptr,
                    &mut client,
                    &mut error,
                )
            }
        }
    };
    assert_eq!(rc, 0, "the client is made");
    let mut lock = ptr::null_mut();
    let rc = unsafe {
        ticketing_acquire(client, c"tls:seat".as_ptr(), 30 * TICKETING_NS_PER_S, 0, &mut lock, &mut error)
    };
    assert_ne!(rc, 0, "no lock over the wrong transport");
    let message = unsafe { CStr::from_ptr(ticketing_error_message(error)) }.to_str().unwrap().to_owned();
    unsafe {
        ticketing_error_free(error);
        ticketing_client_free(client);
    }
    message
}

/// A TLS mistake names the fix in each caller's own terms: the builder's method for the
/// Rust library, `tls_ca_file` for C, the `tls_ca=` keyword for the Python package
/// (through `ticketing_client_new_for`), the variable for the CLI
/// (`tls_mistakes_are_named`, tests/cli_messages.rs) — and no library names the CLI's.
#[test]
fn each_library_names_its_own_tls_setting() {
    let pki = Pki::new();
    let tls = tls_server(&pki);
    let plain = Server::new().start();
    let (tls_addr, plain_addr) = (tls.addr.to_string(), plain.addr.to_string());
    let ca = pki.path("ca.pem");

    let rust = |addr: &str, ca: Option<&str>| {
        let mut builder = Client::builder().addrs([addr]).auth_token(TOKEN).owner("rust-tls");
        if let Some(ca) = ca {
            builder = builder.tls_ca_file(ca);
        }
        builder
            .build()
            .unwrap()
            .acquire("tls:seat", Duration::from_secs(30), Duration::ZERO)
            .unwrap_err()
            .to_string()
    };
    let cases = [
        (
            "Rust",
            rust(&tls_addr, None),
            "give ClientBuilder::tls_ca_file the CA bundle that signed its certificate",
        ),
        ("Rust", rust(&plain_addr, Some(&ca)), "build the client without ClientBuilder::tls_ca_file"),
        (
            "C",
            c_abi_acquire_error(&tls_addr, None, None),
            "pass ticketing_client_new, as tls_ca_file, the CA bundle",
        ),
        (
            "C",
            c_abi_acquire_error(&plain_addr, Some(&ca), None),
            "pass ticketing_client_new a NULL tls_ca_file",
        ),
        (
            "Python",
            c_abi_acquire_error(&tls_addr, None, Some("python")),
            "pass ticketing.Client the CA bundle as tls_ca=",
        ),
        ("Python", c_abi_acquire_error(&plain_addr, Some(&ca), Some("python")), "leave out tls_ca="),
    ];
    for (language, message, fix) in cases {
        assert!(message.contains(fix), "{language}: {message}");
        assert!(!message.contains("TICKETING_"), "{language} names the CLI's variable: {message}");
    }
}
