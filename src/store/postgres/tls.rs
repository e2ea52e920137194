//! TLS for the PostgreSQL store: rustls (ring), with libpq's `sslmode` meanings
//! (`docs/storage-postgres.md`, "TLS"): `prefer` and `require` encrypt without checking the
//! certificate, `verify-ca` checks the chain against `sslrootcert`, `verify-full` also checks that
//! the certificate names the host. A client certificate comes from `sslcert`/`sslkey`.

use super::config::{SslMode, TlsSettings};
use crate::error::{Error, Result};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::path::Path;
use std::sync::Arc;
use tokio_postgres_rustls::MakeRustlsConnect;

/// The connector for these settings (also for `disable`, where the client never uses it).
pub(super) fn connector(t: &TlsSettings) -> Result<MakeRustlsConnect> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::invalid("url", format!("cannot set up TLS: {e}")))?;
    let verifier: Arc<dyn ServerCertVerifier> = match t.mode {
        SslMode::Disable | SslMode::Prefer | SslMode::Require => Arc::new(Unchecked { provider: provider.clone() }),
        SslMode::VerifyCa | SslMode::VerifyFull => {
            let path = t.root_cert.as_deref().expect("the URL check requires sslrootcert for verify-ca and verify-full");
            let mut roots = RootCertStore::empty();
            for cert in certs(path, "sslrootcert")? {
                roots.add(cert).map_err(|e| Error::invalid("url", format!("sslrootcert {}: not a CA certificate: {e}", path.display())))?;
            }
            let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .map_err(|e| Error::invalid("url", format!("sslrootcert {}: {e}", path.display())))?;
            if t.mode == SslMode::VerifyFull {
                webpki
            } else {
                Arc::new(ChainOnly { inner: webpki })
            }
        }
    };
    let builder = builder.dangerous().with_custom_certificate_verifier(verifier);
    let config = match (&t.client_cert, &t.client_key) {
        (Some(cert), Some(key)) => {
            let chain = certs(cert, "sslcert")?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| Error::invalid("url", format!("sslkey {}: cannot read a PEM private key: {e}", key.display())))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| Error::invalid("url", format!("sslcert/sslkey: the key does not fit the certificate: {e}")))?
        }
        _ => builder.with_no_client_auth(),
    };
    Ok(MakeRustlsConnect::new(config))
}

fn certs(path: &Path, param: &str) -> Result<Vec<CertificateDer<'static>>> {
    let read = CertificateDer::pem_file_iter(path)
        .map_err(|e| Error::invalid("url", format!("{param} {}: cannot read a PEM file: {e}", path.display())))?;
    let certs: Vec<_> = read
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| Error::invalid("url", format!("{param} {}: not a PEM certificate file: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(Error::invalid("url", format!("{param} {}: holds no certificate", path.display())));
    }
    Ok(certs)
}

/// `prefer` and `require`: the connection is encrypted and the handshake's signatures are
/// checked, but not who signed the certificate (libpq's meaning: protection from eavesdroppers,
/// not from an active impostor).
#[derive(Debug)]
struct Unchecked {
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain must lead to a CA of `sslrootcert`; the host name is not checked.
#[derive(Debug)]
struct ChainOnly {
    inner: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self.inner.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(CertificateError::NotValidForName))
            | Err(rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext { .. })) => {
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
