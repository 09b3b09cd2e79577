//! Test certificates made by the test (never checked in): a CA and certificates it signs, as
//! PEM files in a temp folder removed on drop.

use crate::TempDir;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, SanType,
};
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

/// A CA and the folder its files go in.
pub struct Pki {
    pub dir: TempDir,
    ca: CertifiedIssuer<'static, KeyPair>,
    pub ca_path: PathBuf,
}

/// What a leaf certificate is for.
#[derive(Debug, Clone, Default)]
pub struct Leaf {
    pub common_name: String,
    /// DNS names (`localhost`, `a.example.com`).
    pub dns: Vec<String>,
    /// URI SANs (`spiffe://cluster.local/ns/default/sa/client`).
    pub uris: Vec<String>,
    /// Also the `127.0.0.1` IP SAN.
    pub loopback_ip: bool,
    /// Validity relative to now: (starts, ends) in seconds; default (-60, +86400).
    pub validity: Option<(i64, i64)>,
}

fn at(offset: i64) -> time::OffsetDateTime {
    let now = SystemTime::now();
    let t = if offset >= 0 {
        now + Duration::from_secs(offset as u64)
    } else {
        now - Duration::from_secs(offset.unsigned_abs())
    };
    t.into()
}

impl Pki {
    /// A CA named `name`, its certificate written to `<name>-ca.crt`.
    pub fn new(name: &str) -> Pki {
        let dir = TempDir::new(&format!("pki-{name}")).expect("temp dir");
        let mut p = CertificateParams::new(Vec::<String>::new()).expect("params");
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name
            .push(DnType::CommonName, format!("{name} test CA"));
        p.not_before = at(-3600);
        p.not_after = at(86400 * 30);
        let ca = CertifiedIssuer::self_signed(p, KeyPair::generate().expect("key")).expect("ca");
        let ca_path = dir
            .write(&format!("{name}-ca.crt"), &ca.pem())
            .expect("write ca");
        Pki { dir, ca, ca_path }
    }

    /// Sign `leaf`; writes `<file>.crt` and `<file>.key` and returns their paths.
    pub fn issue(&self, file: &str, leaf: &Leaf) -> (PathBuf, PathBuf) {
        let (cert, key) = self.issue_pem(leaf);
        (
            self.dir
                .write(&format!("{file}.crt"), &cert)
                .expect("write"),
            self.dir.write(&format!("{file}.key"), &key).expect("write"),
        )
    }

    /// Sign `leaf`; the PEM texts of the certificate and its key.
    pub fn issue_pem(&self, leaf: &Leaf) -> (String, String) {
        let mut p = CertificateParams::new(leaf.dns.clone()).expect("params");
        for u in &leaf.uris {
            p.subject_alt_names
                .push(SanType::URI(u.clone().try_into().expect("uri")));
        }
        if leaf.loopback_ip {
            p.subject_alt_names
                .push(SanType::IpAddress([127, 0, 0, 1].into()));
        }
        p.distinguished_name
            .push(DnType::CommonName, leaf.common_name.clone());
        p.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let (from, to) = leaf.validity.unwrap_or((-60, 86400));
        p.not_before = at(from);
        p.not_after = at(to);
        let key = KeyPair::generate().expect("key");
        let cert = p.signed_by(&key, &self.ca).expect("sign");
        (cert.pem(), key.serialize_pem())
    }

    pub fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }
}
