//! RequestAuthentication: what Istio's validation webhook refuses (`validateJwtRule`): an
//! issuer, non-empty audiences, header and parameter names, claim-to-header pairs, a jwksUri
//! that is an http(s) URL, a timeout that parses, and selector xor targetRefs. The JWKS itself
//! is checked by `warden-jwt`, which parses it.

use super::{spec, Report};
use crate::document::Doc;
use crate::kinds::request_authentication::RequestAuthentication;

pub(super) fn check(doc: &Doc<RequestAuthentication>, report: &mut Report) {
    let s = &doc.spec;
    let has_refs = s.target_ref.is_some() || !s.target_refs.is_empty();
    if has_refs && s.selector.is_some() {
        report.error(
            doc,
            &spec().key("selector"),
            "selector and targetRefs are mutually exclusive",
        );
    }
    for (i, rule) in s.jwt_rules.iter().enumerate() {
        let at = spec().key("jwtRules").index(i);
        if rule.issuer.is_empty() {
            report.error(doc, &at.key("issuer"), "issuer must be set");
        }
        for (j, aud) in rule.audiences.iter().enumerate() {
            if aud.is_empty() {
                report.error(
                    doc,
                    &at.key("audiences").index(j),
                    "audience must be non-empty string",
                );
            }
        }
        if let Some(uri) = &rule.jwks_uri {
            if let Err(why) = check_jwks_uri(uri) {
                report.error(doc, &at.key("jwksUri"), why);
            }
        }
        for (j, h) in rule.from_headers.iter().enumerate() {
            if h.name.is_empty() {
                report.error(
                    doc,
                    &at.key("fromHeaders").index(j).key("name"),
                    "location header name must be non-empty string",
                );
            }
        }
        for (j, p) in rule.from_params.iter().enumerate() {
            if p.is_empty() {
                report.error(
                    doc,
                    &at.key("fromParams").index(j),
                    "location query must be non-empty string",
                );
            }
        }
        for (j, c) in rule.output_claim_to_headers.iter().enumerate() {
            let here = at.key("outputClaimToHeaders").index(j);
            if c.claim.is_empty() || c.header.is_empty() {
                report.error(
                    doc,
                    &here,
                    "outputClaimToHeaders header and claim value must be non-empty string",
                );
            } else if http::HeaderName::from_bytes(c.header.as_bytes()).is_err() {
                report.error(
                    doc,
                    &here.key("header"),
                    format!("invalid HTTP header name {:?}", c.header),
                );
            }
        }
        if let Some(h) = &rule.output_payload_to_header {
            if http::HeaderName::from_bytes(h.as_bytes()).is_err() {
                report.error(
                    doc,
                    &at.key("outputPayloadToHeader"),
                    format!("invalid HTTP header name {h:?}"),
                );
            }
        }
        if rule.fetch_timeout().is_none() {
            report.error(
                doc,
                &at.key("timeout"),
                format!(
                    "invalid duration {:?}",
                    rule.timeout.as_deref().unwrap_or_default()
                ),
            );
        }
    }
}

/// A jwksUri is an `http://` or `https://` URL with a host (Istio's `ParseJwksURI`).
pub fn check_jwks_uri(uri: &str) -> Result<(), String> {
    let parsed: http::Uri = uri
        .parse()
        .map_err(|e| format!("jwksUri {uri:?} is not a URL: {e}"))?;
    match parsed.scheme_str() {
        Some("http") | Some("https") => {}
        _ => return Err(format!("jwksUri {uri:?}: scheme must be http or https")),
    }
    if parsed.host().is_none_or(str::is_empty) {
        return Err(format!("jwksUri {uri:?} has no host"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_jwks_uri;

    #[test]
    fn jwks_uris_are_http_urls_with_a_host() {
        let cases = [
            ("https://example.com/.well-known/jwks.json", true),
            ("http://127.0.0.1:8080/jwks", true),
            ("ftp://example.com/jwks", false),
            ("example.com/jwks", false),
            ("https:///jwks", false),
            ("not a url", false),
        ];
        for (uri, ok) in cases {
            assert_eq!(check_jwks_uri(uri).is_ok(), ok, "{uri}");
        }
    }
}
