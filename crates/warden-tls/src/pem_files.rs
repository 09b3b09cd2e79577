//! Certificates, keys and CA bundles read from PEM files. Every error names the file and what is
//! wrong with it (missing, unreadable, no PEM block, not X.509, expired, not yet valid, a key
//! that does not match its certificate), so `warden check` and a failed reload can say so.

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use rustls::RootCertStore;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum CertError {
    #[error("{path}: file not found")]
    Missing { path: PathBuf },
    #[error("{path}: cannot read: {detail}")]
    Unreadable { path: PathBuf, detail: String },
    #[error("{path}: no PEM certificate in it")]
    NoCertificate { path: PathBuf },
    #[error("{path}: no PEM private key in it (PKCS#8, PKCS#1 or SEC1)")]
    NoKey { path: PathBuf },
    #[error("{path}: certificate {index} is not valid X.509: {detail}")]
    Malformed {
        path: PathBuf,
        index: usize,
        detail: String,
    },
    #[error("{path}: certificate {subject} expired at {not_after} (unix time)")]
    Expired {
        path: PathBuf,
        subject: String,
        not_after: i64,
    },
    #[error("{path}: certificate {subject} is not valid before {not_before} (unix time)")]
    NotYetValid {
        path: PathBuf,
        subject: String,
        not_before: i64,
    },
    #[error("{key}: private key does not match the certificate in {cert}")]
    KeyMismatch { cert: PathBuf, key: PathBuf },
    #[error("{path}: private key not usable: {detail}")]
    BadKey { path: PathBuf, detail: String },
}

fn read(path: &Path) -> Result<Vec<u8>, CertError> {
    std::fs::read(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => CertError::Missing {
            path: path.to_path_buf(),
        },
        _ => CertError::Unreadable {
            path: path.to_path_buf(),
            detail: e.to_string(),
        },
    })
}

fn unix(now: SystemTime) -> i64 {
    match now.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    }
}

/// A certificate chain (leaf first), each certificate parsed and inside its validity at `now`.
pub fn read_chain(path: &Path, now: SystemTime) -> Result<Vec<CertificateDer<'static>>, CertError> {
    let bytes = read(path)?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<_, _>>()
        .map_err(|e| CertError::Malformed {
            path: path.to_path_buf(),
            index: 0,
            detail: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(CertError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    for (index, der) in certs.iter().enumerate() {
        check_validity(path, index, der, now)?;
    }
    Ok(certs)
}

fn check_validity(
    path: &Path,
    index: usize,
    der: &CertificateDer<'_>,
    now: SystemTime,
) -> Result<(), CertError> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| CertError::Malformed {
        path: path.to_path_buf(),
        index,
        detail: e.to_string(),
    })?;
    let now = unix(now);
    let validity = cert.validity();
    let subject = || cert.subject().to_string();
    if validity.not_after.timestamp() < now {
        return Err(CertError::Expired {
            path: path.to_path_buf(),
            subject: subject(),
            not_after: validity.not_after.timestamp(),
        });
    }
    if validity.not_before.timestamp() > now {
        return Err(CertError::NotYetValid {
            path: path.to_path_buf(),
            subject: subject(),
            not_before: validity.not_before.timestamp(),
        });
    }
    Ok(())
}

pub fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, CertError> {
    let bytes = read(path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => CertError::NoKey {
            path: path.to_path_buf(),
        },
        other => CertError::BadKey {
            path: path.to_path_buf(),
            detail: other.to_string(),
        },
    })
}

/// A CA bundle as trust anchors.
pub fn read_roots(path: &Path, now: SystemTime) -> Result<Arc<RootCertStore>, CertError> {
    let certs = read_chain(path, now)?;
    let mut roots = RootCertStore::empty();
    for (index, der) in certs.into_iter().enumerate() {
        roots.add(der).map_err(|e| CertError::Malformed {
            path: path.to_path_buf(),
            index,
            detail: e.to_string(),
        })?;
    }
    Ok(Arc::new(roots))
}

/// A certificate chain and its private key, checked to belong together.
pub fn certified_key(
    cert: &Path,
    key: &Path,
    provider: &CryptoProvider,
    now: SystemTime,
) -> Result<Arc<CertifiedKey>, CertError> {
    let chain = read_chain(cert, now)?;
    let der = read_key(key)?;
    CertifiedKey::from_der(chain, der, provider)
        .map(Arc::new)
        .map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => CertError::KeyMismatch {
                cert: cert.to_path_buf(),
                key: key.to_path_buf(),
            },
            other => CertError::BadKey {
                path: key.to_path_buf(),
                detail: other.to_string(),
            },
        })
}
