//! Istio's names for TLS protocol versions and cipher suites, as rustls values.
//!
//! rustls speaks TLS 1.2 and 1.3 only, so `TLSV1_0`/`TLSV1_1` are errors rather than a silent
//! narrowing. `cipherSuites` takes Envoy's (OpenSSL) names or the IANA ones; as in Envoy it
//! restricts the TLS 1.2 suites, and TLS 1.3 suites stay all enabled unless the list names some.

use rustls::{SupportedCipherSuite, SupportedProtocolVersion};

/// `minProtocolVersion`/`maxProtocolVersion`; `None` (or `TLS_AUTO`) is the default: 1.2 to 1.3.
pub fn versions(
    min: Option<&str>,
    max: Option<&str>,
) -> Result<Vec<&'static SupportedProtocolVersion>, String> {
    let rank = |v: Option<&str>, default: u8| -> Result<u8, String> {
        match v.map(str::to_ascii_uppercase).as_deref() {
            None | Some("TLS_AUTO") => Ok(default),
            Some("TLSV1_2") => Ok(2),
            Some("TLSV1_3") => Ok(3),
            Some("TLSV1_0" | "TLSV1_1") => Err(format!(
                "{}: rustls speaks TLS 1.2 and 1.3 only; use TLSV1_2 or TLSV1_3",
                v.unwrap_or_default()
            )),
            Some(_) => Err(format!(
                "unknown TLS version {:?} (TLS_AUTO, TLSV1_2, TLSV1_3)",
                v.unwrap_or_default()
            )),
        }
    };
    let (lo, hi) = (rank(min, 2)?, rank(max, 3)?);
    if lo > hi {
        return Err(format!(
            "minProtocolVersion {} is above maxProtocolVersion {}",
            min.unwrap_or("TLS_AUTO"),
            max.unwrap_or("TLS_AUTO")
        ));
    }
    let mut out = Vec::new();
    if hi >= 3 {
        out.push(&rustls::version::TLS13);
    }
    if lo <= 2 {
        out.push(&rustls::version::TLS12);
    }
    Ok(out)
}

/// OpenSSL (Envoy) names of the TLS 1.2 suites rustls has, with their IANA names.
const OPENSSL_NAMES: &[(&str, &str)] = &[
    (
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    ),
    (
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    ),
    (
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
    (
        "ECDHE-RSA-AES128-GCM-SHA256",
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    ),
    (
        "ECDHE-RSA-AES256-GCM-SHA384",
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    ),
    (
        "ECDHE-RSA-CHACHA20-POLY1305",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
];

/// Envoy names rustls does not implement (CBC, static RSA): an error that says so.
const UNSUPPORTED: &[&str] = &[
    "AES128-GCM-SHA256",
    "AES256-GCM-SHA384",
    "AES128-SHA",
    "AES256-SHA",
    "ECDHE-ECDSA-AES128-SHA",
    "ECDHE-RSA-AES128-SHA",
    "ECDHE-ECDSA-AES256-SHA",
    "ECDHE-RSA-AES256-SHA",
    "DES-CBC3-SHA",
];

fn iana_name(suite: &SupportedCipherSuite) -> String {
    format!("{:?}", suite.suite())
}

/// The suites of `available` that `names` allows (in `available`'s order); an empty list allows
/// all. Each name problem is one error string.
pub fn cipher_suites(
    names: &[String],
    available: &[SupportedCipherSuite],
) -> Result<Vec<SupportedCipherSuite>, Vec<String>> {
    if names.is_empty() {
        return Ok(available.to_vec());
    }
    let mut wanted: Vec<String> = Vec::new();
    let mut errors = Vec::new();
    for name in names {
        let upper = name.trim().to_ascii_uppercase();
        let iana = OPENSSL_NAMES
            .iter()
            .find(|(o, _)| *o == upper)
            .map(|(_, i)| i.to_string())
            .unwrap_or(upper.clone());
        if available.iter().any(|s| iana_name(s) == iana) {
            wanted.push(iana);
        } else if UNSUPPORTED.contains(&upper.as_str()) {
            errors.push(format!(
                "cipher suite {name}: not implemented by rustls (no CBC or static-RSA suites); \
                 use an ECDHE GCM or CHACHA20 suite"
            ));
        } else {
            errors.push(format!(
                "unknown cipher suite {name:?} (known: {})",
                OPENSSL_NAMES
                    .iter()
                    .map(|(o, _)| *o)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let names_tls13 = available
        .iter()
        .any(|s| s.tls13().is_some() && wanted.contains(&iana_name(s)));
    Ok(available
        .iter()
        .filter(|s| wanted.contains(&iana_name(s)) || (s.tls13().is_some() && !names_tls13))
        .copied()
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_follow_istio_names() {
        assert_eq!(versions(None, None).unwrap().len(), 2);
        let only13 = versions(Some("TLSV1_3"), None).unwrap();
        assert_eq!(only13.len(), 1);
        assert_eq!(only13[0].version, rustls::ProtocolVersion::TLSv1_3);
        assert!(versions(Some("TLSV1_1"), None)
            .unwrap_err()
            .contains("1.2 and 1.3"));
        assert!(versions(Some("TLSV1_3"), Some("TLSV1_2")).is_err());
        assert!(versions(Some("TLS9"), None)
            .unwrap_err()
            .contains("unknown"));
    }

    #[test]
    fn cipher_suites_by_envoy_or_iana_name() {
        let all = crate::provider::provider().cipher_suites.clone();
        let picked = cipher_suites(&["ECDHE-RSA-AES128-GCM-SHA256".into()], &all).unwrap();
        // The named 1.2 suite plus every 1.3 suite.
        assert_eq!(picked.iter().filter(|s| s.tls13().is_none()).count(), 1);
        assert!(picked.iter().any(|s| s.tls13().is_some()));
        let iana = cipher_suites(&["TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384".into()], &all);
        assert!(iana.is_ok());
        let errs = cipher_suites(&["AES128-SHA".into(), "BOGUS".into()], &all).unwrap_err();
        assert_eq!(errs.len(), 2);
        assert!(errs[0].contains("not implemented"));
        assert!(errs[1].contains("unknown"));
    }
}
