//! The local mesh CA behind `warden ca`: `init` makes a self-signed ECDSA P-256 CA in a folder
//! (`ca.crt`, `ca.key`, `trust-domain`); `issue` signs a short-lived workload certificate whose
//! only SAN is the SPIFFE identity `spiffe://<trust-domain>/ns/<ns>/sa/<sa>`, written as a
//! credentials folder (`tls.crt`, `tls.key`, `ca.crt`) that the proxy reads (`--mesh-credentials`)
//! and reloads when it changes. Users with their own PKI write the same three files instead.

use crate::peer_identity::spiffe_uri;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

pub const CA_CERT: &str = "ca.crt";
pub const CA_KEY: &str = "ca.key";
pub const TRUST_DOMAIN: &str = "trust-domain";
/// The files of a credentials folder (the keys of Istio's Kubernetes TLS Secrets).
pub const TLS_CERT: &str = "tls.crt";
pub const TLS_KEY: &str = "tls.key";

#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("{path}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0} already holds a CA (pass --force to replace it)")]
    Exists(PathBuf),
    #[error("{path}: {detail}")]
    Bad { path: PathBuf, detail: String },
    #[error("cannot make the certificate")]
    Rcgen(#[from] rcgen::Error),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CaError + '_ {
    move |source| CaError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Write `text` to `path`, readable by the owner only when `private`.
fn write(path: &Path, text: &str, private: bool) -> Result<(), CaError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    // Write then rename: a reader (a proxy reloading) never sees half a file.
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(if private { 0o600 } else { 0o644 })
        .open(&tmp)
        .map_err(io(&tmp))?;
    f.write_all(text.as_bytes()).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}

/// Make a CA in `dir` valid for `validity` from `now`.
pub fn init(
    dir: &Path,
    trust_domain: &str,
    validity: Duration,
    now: SystemTime,
    force: bool,
) -> Result<(), CaError> {
    if trust_domain.is_empty() || trust_domain.contains(['/', ' ']) {
        return Err(CaError::Bad {
            path: dir.to_path_buf(),
            detail: format!("invalid trust domain {trust_domain:?}"),
        });
    }
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    if dir.join(CA_KEY).exists() && !force {
        return Err(CaError::Exists(dir.to_path_buf()));
    }
    let mut params = CertificateParams::default();
    params.distinguished_name.push(
        DnType::CommonName,
        format!("warden mesh CA ({trust_domain})"),
    );
    params
        .distinguished_name
        .push(DnType::OrganizationName, trust_domain);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = (now - Duration::from_secs(60)).into();
    params.not_after = (now + validity).into();
    let key = KeyPair::generate()?;
    let key_pem = key.serialize_pem();
    let ca = CertifiedIssuer::self_signed(params, key)?;
    write(&dir.join(CA_KEY), &key_pem, true)?;
    write(&dir.join(CA_CERT), &ca.pem(), false)?;
    write(&dir.join(TRUST_DOMAIN), &format!("{trust_domain}\n"), false)
}

/// A signed workload certificate and what goes with it.
#[derive(Debug, Clone)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
    pub ca_pem: String,
    pub spiffe_id: String,
}

fn read(path: &Path) -> Result<String, CaError> {
    std::fs::read_to_string(path).map_err(io(path))
}

/// Sign a certificate for `namespace`/`service_account`, valid for `ttl` from `now`.
pub fn issue(
    ca_dir: &Path,
    namespace: &str,
    service_account: &str,
    ttl: Duration,
    now: SystemTime,
) -> Result<Issued, CaError> {
    let trust_domain = read(&ca_dir.join(TRUST_DOMAIN))?.trim().to_owned();
    let ca_pem = read(&ca_dir.join(CA_CERT))?;
    let ca_key_path = ca_dir.join(CA_KEY);
    let ca_key = KeyPair::from_pem(&read(&ca_key_path)?).map_err(|e| CaError::Bad {
        path: ca_key_path.clone(),
        detail: e.to_string(),
    })?;
    let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key).map_err(|e| CaError::Bad {
        path: ca_dir.join(CA_CERT),
        detail: e.to_string(),
    })?;
    let spiffe_id = spiffe_uri(&trust_domain, namespace, service_account);
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::OrganizationName, trust_domain.clone());
    params.subject_alt_names = vec![SanType::URI(spiffe_id.clone().try_into()?)];
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.not_before = (now - Duration::from_secs(60)).into();
    params.not_after = (now + ttl).into();
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok(Issued {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        ca_pem,
        spiffe_id,
    })
}

/// Write `issued` as a credentials folder (key first is irrelevant: each file is renamed into
/// place whole; a reader that catches the old certificate with the new key reports a mismatch
/// and keeps its running certificate until the next change).
pub fn write_credentials(dir: &Path, issued: &Issued) -> Result<(), CaError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    write(&dir.join(TLS_KEY), &issued.key_pem, true)?;
    write(&dir.join(TLS_CERT), &issued.cert_pem, false)?;
    write(&dir.join(CA_CERT), &issued.ca_pem, false)
}
