//! The `x-forwarded-client-cert` element one proxy hop adds for the client certificate of a
//! connection, in Envoy's format (HTTP connection manager `set_current_client_cert_details`):
//! `By=<URI SAN of this proxy's certificate>` (one per URI SAN), `Hash=<hex SHA-256 of the
//! client certificate's DER>`, then the details asked for in Envoy's order: `Cert="<URL-encoded
//! PEM>"`, `Chain="<URL-encoded PEM of the chain>"`, `Subject="<RFC 2253>"`, `URI=<each URI
//! SAN>` (an empty `URI=` without one), `DNS=<each DNS SAN>`; pairs joined by `;`.
//!
//! Built once per connection (at the handshake), so that requests only copy it.

use rustls::pki_types::CertificateDer;
use std::fmt::Write;
use std::path::Path;
use std::time::SystemTime;
use x509_parser::x509::X509Name;

/// Which client certificate details an element carries besides `By` and `Hash`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CertDetails {
    pub cert: bool,
    pub chain: bool,
    pub subject: bool,
    pub uri: bool,
    pub dns: bool,
}

impl CertDetails {
    /// What Istio sets on a gateway (SANITIZE_SET / APPEND_FORWARD): Subject, Cert, URI, DNS.
    pub const GATEWAY: CertDetails = CertDetails {
        cert: true,
        chain: false,
        subject: true,
        uri: true,
        dns: true,
    };
    /// What Istio sets on a sidecar's inbound listener (its ProxyHeaders defaults):
    /// Subject, URI, DNS.
    pub const SIDECAR_INBOUND: CertDetails = CertDetails {
        cert: false,
        chain: false,
        subject: true,
        uri: true,
        dns: true,
    };
}

/// The URI SANs of the leaf certificate in the PEM file `cert` (a proxy's own: `By=`); empty
/// when it has none or does not read (the server config reading it reported that already).
pub fn local_uri_sans(cert: &Path) -> Vec<String> {
    crate::pem_files::read_chain(cert, SystemTime::now())
        .ok()
        .and_then(|chain| chain.first().and_then(crate::PeerIdentity::from_leaf))
        .map(|id| id.uri_sans)
        .unwrap_or_default()
}

/// The element for a client that presented `chain` (leaf first); `by` are this proxy's URI
/// SANs. `None` without a certificate or when the leaf does not parse.
pub fn element(
    by: &[String],
    chain: &[CertificateDer<'_>],
    details: CertDetails,
) -> Option<String> {
    let leaf = chain.first()?;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf).ok()?;
    let mut pairs: Vec<String> = by.iter().map(|uri| format!("By={uri}")).collect();
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, leaf);
    let mut hash = String::with_capacity(5 + 64);
    hash.push_str("Hash=");
    for byte in digest.as_ref() {
        let _ = write!(hash, "{byte:02x}");
    }
    pairs.push(hash);
    if details.cert {
        pairs.push(format!(
            "Cert=\"{}\"",
            url_encode(&pem(std::slice::from_ref(leaf)))
        ));
    }
    if details.chain {
        pairs.push(format!("Chain=\"{}\"", url_encode(&pem(chain))));
    }
    if details.subject {
        // Present even when the subject is empty, as Envoy does.
        pairs.push(format!("Subject=\"{}\"", rfc2253(cert.subject())));
    }
    let (mut uris, mut dns) = (Vec::new(), Vec::new());
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                x509_parser::extensions::GeneralName::URI(u) => uris.push(*u),
                x509_parser::extensions::GeneralName::DNSName(d) => dns.push(*d),
                _ => {}
            }
        }
    }
    if details.uri {
        if uris.is_empty() {
            pairs.push("URI=".into());
        }
        pairs.extend(uris.iter().map(|u| format!("URI={u}")));
    }
    if details.dns {
        pairs.extend(dns.iter().map(|d| format!("DNS={d}")));
    }
    Some(pairs.join(";"))
}

/// PEM as OpenSSL writes certificates: 64 base64 characters a line.
fn pem(chain: &[CertificateDer<'_>]) -> String {
    use base64::Engine;
    let mut out = String::new();
    for der in chain {
        let b64 = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
        out.push_str("-----BEGIN CERTIFICATE-----\n");
        for line in b64.as_bytes().chunks(64) {
            // base64 output is ASCII.
            out.push_str(std::str::from_utf8(line).unwrap_or_default());
            out.push('\n');
        }
        out.push_str("-----END CERTIFICATE-----\n");
    }
    out
}

/// Percent-encoding of everything but RFC 3986's unreserved characters (what Envoy's
/// `urlEncodeQueryParameter` leaves as is), so that `,;="` cannot appear in a `Cert=`.
fn url_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3 / 2);
    for &b in text.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A distinguished name as OpenSSL's `XN_FLAG_RFC2253` prints it (Envoy's subject format):
/// the last RDN first, `,` between RDNs, `+` inside one, short attribute names, RFC 2253
/// escapes, bytes outside ASCII as `\XX`.
pub fn rfc2253(name: &X509Name<'_>) -> String {
    let mut out = String::new();
    let rdns: Vec<_> = name.iter().collect();
    for (i, rdn) in rdns.iter().rev().enumerate() {
        if i > 0 {
            out.push(',');
        }
        for (j, attr) in rdn.iter().enumerate() {
            if j > 0 {
                out.push('+');
            }
            let oid = attr.attr_type().to_id_string();
            out.push_str(short_name(&oid).unwrap_or(&oid));
            out.push('=');
            match attr.as_str() {
                Ok(value) => escape_value(value, &mut out),
                // Not a string type: RFC 2253's `#` and the hex of the DER value.
                Err(_) => {
                    out.push('#');
                    for b in attr.attr_value().data {
                        let _ = write!(out, "{b:02X}");
                    }
                }
            }
        }
    }
    out
}

/// OpenSSL's short names of the attributes subjects carry; others print as the OID.
fn short_name(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.4" => "SN",
        "2.5.4.5" => "serialNumber",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "street",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "2.5.4.12" => "title",
        "2.5.4.42" => "GN",
        "0.9.2342.19200300.100.1.1" => "UID",
        "0.9.2342.19200300.100.1.25" => "DC",
        "1.2.840.113549.1.9.1" => "emailAddress",
        _ => return None,
    })
}

fn escape_value(value: &str, out: &mut String) {
    let bytes = value.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        let first = i == 0;
        let last = i + 1 == bytes.len();
        match b {
            b',' | b'+' | b'"' | b'\\' | b'<' | b'>' | b';' => {
                out.push('\\');
                out.push(b as char);
            }
            b'#' if first => out.push_str("\\#"),
            b' ' if first || last => out.push_str("\\ "),
            0x80.. | 0..0x20 => {
                let _ = write!(out, "\\{b:02X}");
            }
            _ => out.push(b as char),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(subject: &[(rcgen::DnType, &str)], sans: &[&str]) -> CertificateDer<'static> {
        let mut params = rcgen::CertificateParams::default();
        let mut dn = rcgen::DistinguishedName::new();
        for (t, v) in subject {
            dn.push(t.clone(), *v);
        }
        params.distinguished_name = dn;
        for san in sans {
            params
                .subject_alt_names
                .push(match san.strip_prefix("dns:") {
                    Some(d) => rcgen::SanType::DnsName(d.try_into().unwrap()),
                    None => rcgen::SanType::URI((*san).try_into().unwrap()),
                });
        }
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().clone()
    }

    #[test]
    fn element_in_envoys_order_and_format() {
        let der = cert(
            &[
                (rcgen::DnType::CountryName, "US"),
                (rcgen::DnType::OrganizationName, "Acme, Inc."),
                (rcgen::DnType::CommonName, "client"),
            ],
            &[
                "spiffe://cluster.local/ns/default/sa/client",
                "dns:a.example",
                "dns:b.example",
            ],
        );
        let by = vec!["spiffe://cluster.local/ns/default/sa/server".to_string()];
        let got = element(
            &by,
            std::slice::from_ref(&der),
            CertDetails::SIDECAR_INBOUND,
        )
        .unwrap();
        let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &der);
        let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            got,
            format!(
                "By=spiffe://cluster.local/ns/default/sa/server;Hash={hex};\
                 Subject=\"CN=client,O=Acme\\, Inc.,C=US\";\
                 URI=spiffe://cluster.local/ns/default/sa/client;DNS=a.example;DNS=b.example"
            )
        );
        let gateway = element(&[], std::slice::from_ref(&der), CertDetails::GATEWAY).unwrap();
        assert!(gateway.starts_with(&format!(
            "Hash={hex};Cert=\"-----BEGIN%20CERTIFICATE-----%0A"
        )));
        assert!(gateway.contains("-----END%20CERTIFICATE-----%0A\";Subject=\"CN=client,"));
        let cert_value = gateway
            .split(';')
            .nth(1)
            .unwrap()
            .strip_prefix("Cert=")
            .unwrap();
        assert!(!cert_value.contains(['\n', '+', '/', '=']), "{cert_value}");
    }

    #[test]
    fn uri_is_present_and_empty_without_a_uri_san() {
        let der = cert(&[(rcgen::DnType::CommonName, " #x ")], &["dns:a.example"]);
        let got = element(
            &[],
            std::slice::from_ref(&der),
            CertDetails::SIDECAR_INBOUND,
        )
        .unwrap();
        assert!(
            got.ends_with(";Subject=\"CN=\\ #x\\ \";URI=;DNS=a.example"),
            "{got}"
        );
        assert_eq!(element(&[], &[], CertDetails::GATEWAY), None);
    }

    #[test]
    fn chain_holds_every_certificate_leaf_first() {
        let leaf = cert(&[(rcgen::DnType::CommonName, "leaf")], &[]);
        let other = cert(&[(rcgen::DnType::CommonName, "ca")], &[]);
        let details = CertDetails {
            chain: true,
            ..CertDetails::default()
        };
        let got = element(&[], &[leaf.clone(), other.clone()], details).unwrap();
        let chain = got.split(';').nth(1).unwrap();
        let decoded = chain
            .strip_prefix("Chain=\"")
            .and_then(|c| c.strip_suffix('"'))
            .unwrap()
            .replace("%0A", "\n")
            .replace("%20", " ")
            .replace("%2B", "+")
            .replace("%2F", "/")
            .replace("%3D", "=");
        assert_eq!(decoded, pem(&[leaf, other]));
        assert_eq!(decoded.matches("BEGIN CERTIFICATE").count(), 2);
    }

    #[test]
    fn url_encoding_leaves_only_unreserved_characters() {
        assert_eq!(url_encode("a+b/c=\n -_.~"), "a%2Bb%2Fc%3D%0A%20-_.~");
    }
}
