//! The one place flowlab makes and loads TLS certificates: a certificate chain and its
//! key read from PEM files, or a self-signed certificate made on request for the names a
//! server is reached by. The server's configuration offers HTTP/2 and HTTP/1.1 (ALPN),
//! TLS 1.3 and 1.2.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine;
use rcgen::PublicKeyData;
pub use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sha2::Digest;

/// Why a certificate could not be had.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {why}")]
    File { path: PathBuf, why: String },
    #[error("a self-signed certificate for {names}: {why}")]
    SelfSigned { names: String, why: String },
    #[error("{cert} and {key}: {why}")]
    Pair {
        cert: PathBuf,
        key: PathBuf,
        why: String,
    },
}

/// Where a server's certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Certificate {
    /// A chain (the server's certificate first) and its private key, PEM.
    Files { cert: PathBuf, key: PathBuf },
    /// Made now, signed by itself, for these DNS names and addresses.
    SelfSigned { names: Vec<String> },
}

/// A certificate in hand: its chain, its key, and (self-signed) the PEM a client trusts.
#[derive(Debug)]
pub struct Identity {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    /// The certificate itself, PEM, for a client to trust (`curl --cacert`).
    pub pem: String,
    /// A self-signed one's public key pin: the SHA-256 of its SubjectPublicKeyInfo,
    /// base64, as Chromium's `--ignore-certificate-errors-spki-list` takes it.
    pub spki_sha256: Option<String>,
}

impl Clone for Identity {
    fn clone(&self) -> Identity {
        Identity {
            chain: self.chain.clone(),
            key: self.key.clone_key(),
            pem: self.pem.clone(),
            spki_sha256: self.spki_sha256.clone(),
        }
    }
}

impl Certificate {
    /// Reads or makes it.
    pub fn load(&self) -> Result<Identity, TlsError> {
        match self {
            Certificate::Files { cert, key } => {
                let file_error = |path: &Path, why: String| TlsError::File {
                    path: path.to_path_buf(),
                    why,
                };
                let pem =
                    std::fs::read_to_string(cert).map_err(|e| file_error(cert, e.to_string()))?;
                let chain = CertificateDer::pem_slice_iter(pem.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| file_error(cert, format!("not a PEM certificate: {e}")))?;
                if chain.is_empty() {
                    return Err(file_error(
                        cert,
                        "holds no certificate (PEM \"CERTIFICATE\")".into(),
                    ));
                }
                let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                    file_error(
                        key,
                        format!("no private key read (PEM, PKCS#8, PKCS#1 or SEC1): {e}"),
                    )
                })?;
                Ok(Identity {
                    chain,
                    key,
                    pem,
                    spki_sha256: None,
                })
            }
            Certificate::SelfSigned { names } => {
                let made = rcgen::generate_simple_self_signed(names.clone()).map_err(|e| {
                    TlsError::SelfSigned {
                        names: names.join(", "),
                        why: e.to_string(),
                    }
                })?;
                let key =
                    PrivateKeyDer::try_from(made.signing_key.serialize_der()).map_err(|e| {
                        TlsError::SelfSigned {
                            names: names.join(", "),
                            why: e.to_string(),
                        }
                    })?;
                let spki = sha2::Sha256::digest(made.signing_key.subject_public_key_info());
                Ok(Identity {
                    pem: made.cert.pem(),
                    chain: vec![made.cert.der().clone()],
                    key,
                    spki_sha256: Some(base64::engine::general_purpose::STANDARD.encode(spki)),
                })
            }
        }
    }
}

impl Identity {
    /// A server's configuration with this identity, offering `alpn` (e.g. `h2`,
    /// `http/1.1`) in that order of preference.
    pub fn server_config(
        self,
        alpn: &[&[u8]],
        what: &Certificate,
    ) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .and_then(|b| {
                b.with_no_client_auth()
                    .with_single_cert(self.chain, self.key)
            })
            .map_err(|e| {
                let why = match e {
                    rustls::Error::InconsistentKeys(_) => {
                        "the key is not the certificate's (their public keys differ)".to_string()
                    }
                    other => other.to_string(),
                };
                match what {
                    Certificate::Files { cert, key } => TlsError::Pair {
                        cert: cert.clone(),
                        key: key.clone(),
                        why,
                    },
                    Certificate::SelfSigned { names } => TlsError::SelfSigned {
                        names: names.join(", "),
                        why,
                    },
                }
            })?;
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(Arc::new(config))
    }
}

/// The names a self-signed certificate of this machine's is made for: `localhost`, the
/// loopback addresses, the host's name, and `extra` (the address a server listens on).
pub fn self_signed_names(extra: &[String]) -> Vec<String> {
    let mut names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    if let Ok(host) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        let host = host.trim();
        if !host.is_empty() {
            names.push(host.to_string());
        }
    }
    for n in extra {
        if !names.contains(n) {
            names.push(n.clone());
        }
    }
    names
}

/// A client's verifier that takes any certificate as the server's, but still checks
/// the handshake's signatures with its key: `flowlab rpm --insecure`, and QUIC's perf
/// client (a measurement server's certificate is mostly self-signed).
#[derive(Debug)]
pub struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl AnyCertificate {
    pub fn new(provider: Arc<rustls::crypto::CryptoProvider>) -> AnyCertificate {
        AnyCertificate(provider)
    }
}

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
