//! Who the peer of a mutual TLS connection is, from its leaf certificate: the subject, the
//! SANs, and for a SPIFFE identity (`spiffe://<trust-domain>/ns/<ns>/sa/<sa>`) Istio's
//! principal (the URI without `spiffe://`) and namespace, which AuthorizationPolicy
//! `principals`/`namespaces` match.

use rustls::pki_types::CertificateDer;
use x509_parser::extensions::GeneralName;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerIdentity {
    /// RFC 4514 form, e.g. `CN=client, O=example`.
    pub subject: String,
    pub uri_sans: Vec<String>,
    pub dns_sans: Vec<String>,
    /// `cluster.local/ns/default/sa/client` for `spiffe://cluster.local/ns/default/sa/client`.
    pub principal: Option<String>,
    pub namespace: Option<String>,
}

impl PeerIdentity {
    /// `None` when the certificate does not parse (rustls verified it already, so in practice
    /// only for certificates rustls accepted without verifying).
    pub fn from_leaf(der: &CertificateDer<'_>) -> Option<PeerIdentity> {
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let mut id = PeerIdentity {
            subject: cert.subject().to_string(),
            ..PeerIdentity::default()
        };
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    GeneralName::URI(u) => id.uri_sans.push((*u).to_owned()),
                    GeneralName::DNSName(d) => id.dns_sans.push((*d).to_owned()),
                    _ => {}
                }
            }
        }
        if let Some(p) = id.uri_sans.iter().find_map(|u| u.strip_prefix("spiffe://")) {
            id.namespace = spiffe_namespace(p).map(str::to_owned);
            id.principal = Some(p.to_owned());
        }
        Some(id)
    }

    /// Whether any SAN (URI or DNS) equals one of `allowed` (Istio's `subjectAltNames`).
    pub fn has_san_in(&self, allowed: &[String]) -> bool {
        self.uri_sans
            .iter()
            .chain(&self.dns_sans)
            .any(|s| allowed.iter().any(|a| a == s))
    }
}

/// The `<ns>` of `<td>/ns/<ns>/sa/<sa>`.
pub fn spiffe_namespace(principal: &str) -> Option<&str> {
    let mut parts = principal.split('/');
    let _trust_domain = parts.next()?;
    (parts.next()? == "ns").then_some(())?;
    parts.next().filter(|ns| !ns.is_empty())
}

/// `spiffe://<td>/ns/<ns>/sa/<sa>`.
pub fn spiffe_uri(trust_domain: &str, namespace: &str, service_account: &str) -> String {
    format!("spiffe://{trust_domain}/ns/{namespace}/sa/{service_account}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_of_a_principal() {
        assert_eq!(
            spiffe_namespace("cluster.local/ns/default/sa/client"),
            Some("default")
        );
        assert_eq!(spiffe_namespace("cluster.local/sa/x"), None);
        assert_eq!(
            spiffe_uri("td", "ns1", "sa1"),
            "spiffe://td/ns/ns1/sa/sa1".to_string()
        );
    }
}
