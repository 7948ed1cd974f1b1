//! HTTPS on the API listener (docs/api.md section 16): the certificate chain and
//! key of `--tls-cert` and `--tls-key`, and the rustls configuration that serves
//! them.
//!
//! The pair is read at start-up and again at every reload; the configuration asks
//! [`Certificates`] for the pair at each handshake, so a reload that installs a new
//! pair changes what the next connection gets without touching those open. A pair
//! that does not read, or whose key is not the certificate's, is never installed.
//! rustls with ring only: TLS 1.2 and 1.3, no OpenSSL.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;
use rustls::crypto::ring::default_provider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// ALPN's names of the protocols served, HTTP/2 first: the browsers' six
/// connections to a host cap their streams under HTTP/1.1, not under HTTP/2.
const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// A pair that cannot be used: stq refuses to start, or a reload keeps the pair in
/// use and fails.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the certificate chain {path}: {reason}")]
    Certificate { path: String, reason: String },
    #[error("cannot read the private key {path}: {reason}")]
    Key { path: String, reason: String },
    #[error("the private key {key} does not belong to the certificate {certificate}: {reason}")]
    Mismatch {
        certificate: String,
        key: String,
        reason: String,
    },
}

/// The files of `--tls-cert` and `--tls-key`, and the pair read from them last.
pub struct Certificates {
    certificate: PathBuf,
    key: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
}

impl fmt::Debug for Certificates {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("Certificates")
            .field("certificate", &self.certificate)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// A pair read and checked, not yet installed.
pub struct Pair(Arc<CertifiedKey>);

impl Certificates {
    /// Reads the pair of `certificate` and `key`, or says why it cannot be used.
    pub fn load(certificate: &Path, key: &Path) -> Result<Arc<Certificates>, TlsError> {
        let pair = read_pair(certificate, key)?;
        Ok(Arc::new(Certificates {
            certificate: certificate.to_owned(),
            key: key.to_owned(),
            current: RwLock::new(pair),
        }))
    }

    /// The pair in the files now, for [`Certificates::install`]; a reload reads it
    /// before it changes anything.
    pub fn read(&self) -> Result<Pair, TlsError> {
        read_pair(&self.certificate, &self.key).map(Pair)
    }

    /// Serves `pair` from the next handshake on.
    pub fn install(&self, pair: Pair) {
        *self.current.write() = pair.0;
    }

    /// The listener's configuration: TLS 1.3 and 1.2, HTTP/2 and HTTP/1.1 by ALPN,
    /// the certificate of the pair installed last.
    pub fn server_config(self: &Arc<Certificates>) -> ServerConfig {
        let mut config = ServerConfig::builder_with_provider(Arc::new(default_provider()))
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .expect("ring's provider supports TLS 1.2 and 1.3")
            .with_no_client_auth()
            .with_cert_resolver(Arc::clone(self) as Arc<dyn ResolvesServerCert>);
        config.alpn_protocols = ALPN.iter().map(|name| name.to_vec()).collect();
        config
    }
}

impl ResolvesServerCert for Certificates {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.current.read()))
    }
}

/// The chain of `certificate` and the key of `key`, checked to belong together.
fn read_pair(certificate: &Path, key: &Path) -> Result<Arc<CertifiedKey>, TlsError> {
    let certificate_error = |reason: String| TlsError::Certificate {
        path: certificate.display().to_string(),
        reason,
    };
    let chain = CertificateDer::pem_file_iter(certificate)
        .map_err(|error| certificate_error(error.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| certificate_error(error.to_string()))?;
    if chain.is_empty() {
        return Err(certificate_error("no PEM certificate in it".into()));
    }
    // PKCS#8, PKCS#1 or SEC1, whichever the file holds.
    let private = PrivateKeyDer::from_pem_file(key).map_err(|error| TlsError::Key {
        path: key.display().to_string(),
        reason: error.to_string(),
    })?;
    let signing = (default_provider().key_provider)
        .load_private_key(private)
        .map_err(|error| TlsError::Key {
            path: key.display().to_string(),
            reason: error.to_string(),
        })?;
    let pair = CertifiedKey::new(chain, signing);
    match pair.keys_match() {
        // ring's keys all know their public half; an unknown is not a mismatch.
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
            Ok(Arc::new(pair))
        }
        Err(error) => Err(TlsError::Mismatch {
            certificate: certificate.display().to_string(),
            key: key.display().to_string(),
            reason: error.to_string(),
        }),
    }
}
