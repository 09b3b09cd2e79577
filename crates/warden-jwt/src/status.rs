//! Envoy's jwt_authn outcomes (`google/jwt_verify_lib`'s `Status`), with the exact strings
//! Envoy answers with, the HTTP status (403 for a disallowed audience, 401 otherwise) and the
//! `www-authenticate` header of its local reply (`jwt_authn/filter.cc`).

/// Why a token was refused, or why a JWKS could not be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    JwtMissed,
    JwtNotYetValid,
    JwtExpired,
    JwtBadFormat,
    JwtHeaderParseErrorBadBase64,
    JwtHeaderParseErrorBadJson,
    JwtHeaderBadAlg,
    JwtHeaderNotImplementedAlg,
    JwtHeaderBadKid,
    JwtPayloadParseErrorBadBase64,
    JwtEd25519SignatureWrongLength,
    JwtPayloadParseErrorBadJson,
    JwtPayloadParseErrorIssNotString,
    JwtPayloadParseErrorSubNotString,
    JwtPayloadParseErrorIatNotInteger,
    JwtPayloadParseErrorIatOutOfRange,
    JwtPayloadParseErrorNbfNotInteger,
    JwtPayloadParseErrorNbfOutOfRange,
    JwtPayloadParseErrorExpNotInteger,
    JwtPayloadParseErrorExpOutOfRange,
    JwtPayloadParseErrorJtiNotString,
    JwtPayloadParseErrorAudNotString,
    JwtSignatureParseErrorBadBase64,
    JwtUnknownIssuer,
    JwtAudienceNotAllowed,
    JwtVerificationFail,
    JwksParseError,
    JwksNoKeys,
    JwksBadKeys,
    JwksNoValidKeys,
    JwksKidAlgMismatch,
    JwksFetchFail,
    JwksMissingKty,
    JwksBadKty,
    JwksNotImplementedKty,
    JwksRsaParseError,
    JwksEcParseError,
    JwksOctBadBase64,
    JwksOkpXBadBase64,
    JwksRsaKeyBadAlg,
    JwksRsaKeyMissingN,
    JwksRsaKeyBadN,
    JwksRsaKeyMissingE,
    JwksRsaKeyBadE,
    JwksEcKeyBadAlg,
    JwksEcKeyBadCrv,
    JwksEcKeyAlgOrCrvUnsupported,
    JwksEcKeyAlgNotCompatibleWithCrv,
    JwksEcKeyMissingX,
    JwksEcKeyBadX,
    JwksEcKeyMissingY,
    JwksEcKeyBadY,
    JwksHmacKeyBadAlg,
    JwksHmacKeyMissingK,
    JwksHmacKeyBadK,
    JwksOkpKeyBadAlg,
    JwksOkpKeyMissingCrv,
    JwksOkpKeyBadCrv,
    JwksOkpKeyCrvUnsupported,
    JwksOkpKeyMissingX,
    JwksOkpKeyBadX,
}

impl Status {
    /// Envoy's text for this status: the body of its 401/403.
    pub fn message(self) -> &'static str {
        use Status::*;
        match self {
            JwtMissed => "Jwt is missing",
            JwtNotYetValid => "Jwt not yet valid",
            JwtExpired => "Jwt is expired",
            JwtBadFormat => {
                "Jwt is not in the form of Header.Payload.Signature with two dots and 3 sections"
            }
            JwtHeaderParseErrorBadBase64 => "Jwt header is an invalid Base64url encoded",
            JwtHeaderParseErrorBadJson => "Jwt header is an invalid JSON",
            JwtHeaderBadAlg => "Jwt header [alg] field is required and must be a string",
            JwtHeaderNotImplementedAlg => "Jwt header [alg] is not supported",
            JwtHeaderBadKid => "Jwt header [kid] field is not a string",
            JwtPayloadParseErrorBadBase64 => "Jwt payload is an invalid Base64url encoded",
            JwtEd25519SignatureWrongLength => "Jwt ED25519 signature is wrong length",
            JwtPayloadParseErrorBadJson => "Jwt payload is an invalid JSON",
            JwtPayloadParseErrorIssNotString => "Jwt payload [iss] field is not a string",
            JwtPayloadParseErrorSubNotString => "Jwt payload [sub] field is not a string",
            JwtPayloadParseErrorIatNotInteger => "Jwt payload [iat] field is not an integer",
            JwtPayloadParseErrorIatOutOfRange => {
                "Jwt payload [iat] field is not a positive 64 bit integer"
            }
            JwtPayloadParseErrorNbfNotInteger => "Jwt payload [nbf] field is not an integer",
            JwtPayloadParseErrorNbfOutOfRange => {
                "Jwt payload [nbf] field is not a positive 64 bit integer"
            }
            JwtPayloadParseErrorExpNotInteger => "Jwt payload [exp] field is not an integer",
            JwtPayloadParseErrorExpOutOfRange => {
                "Jwt payload [exp] field is not a positive 64 bit integer"
            }
            JwtPayloadParseErrorJtiNotString => "Jwt payload [jti] field is not a string",
            JwtPayloadParseErrorAudNotString => {
                "Jwt payload [aud] field is not a string or string list"
            }
            JwtSignatureParseErrorBadBase64 => "Jwt signature is an invalid Base64url encoded",
            JwtUnknownIssuer => "Jwt issuer is not configured",
            JwtAudienceNotAllowed => "Audiences in Jwt are not allowed",
            JwtVerificationFail => "Jwt verification fails",
            JwksParseError => "Jwks is an invalid JSON",
            JwksNoKeys => "Jwks does not have [keys] field",
            JwksBadKeys => "[keys] in Jwks is not an array",
            JwksNoValidKeys => "Jwks doesn't have any valid public key",
            JwksKidAlgMismatch => "Jwks doesn't have key to match kid or alg from Jwt",
            JwksFetchFail => "Jwks remote fetch is failed",
            JwksMissingKty => "[kty] is missing in [keys]",
            JwksBadKty => "[kty] is bad in [keys]",
            JwksNotImplementedKty => "[kty] is not supported in [keys]",
            JwksRsaParseError => "Jwks RSA [n] or [e] field is missing or has a parse error",
            JwksEcParseError => "Jwks EC [x] and [y] fields have a parse error.",
            JwksOctBadBase64 => "Jwks Oct key is an invalid Base64",
            JwksOkpXBadBase64 => "Jwks OKP [x] field is an invalid Base64.",
            JwksRsaKeyBadAlg => "[alg] is not started with [RS] or [PS] for an RSA key",
            JwksRsaKeyMissingN => "[n] field is missing for a RSA key",
            JwksRsaKeyBadN => "[n] field is not string for a RSA key",
            JwksRsaKeyMissingE => "[e] field is missing for a RSA key",
            JwksRsaKeyBadE => "[e] field is not string for a RSA key",
            JwksEcKeyBadAlg => "[alg] is not started with [ES] for an EC key",
            JwksEcKeyBadCrv => "[crv] field is not string for an EC key",
            JwksEcKeyAlgOrCrvUnsupported => "[crv] or [alg] field is not supported for an EC key",
            JwksEcKeyAlgNotCompatibleWithCrv => {
                "[crv] field specified is not compatible with [alg] for an EC key"
            }
            JwksEcKeyMissingX => "[x] field is missing for an EC key",
            JwksEcKeyBadX => "[x] field is not string for an EC key",
            JwksEcKeyMissingY => "[y] field is missing for an EC key",
            JwksEcKeyBadY => "[y] field is not string for an EC key",
            JwksHmacKeyBadAlg => "[alg] does not start with [HS] for an HMAC key",
            JwksHmacKeyMissingK => "[k] field is missing for an HMAC key",
            JwksHmacKeyBadK => "[k] field is not string for an HMAC key",
            JwksOkpKeyBadAlg => "[alg] is not [EdDSA] for an OKP key",
            JwksOkpKeyMissingCrv => "[crv] field is missing for an OKP key",
            JwksOkpKeyBadCrv => "[crv] field is not string for an OKP key",
            JwksOkpKeyCrvUnsupported => "[crv] field is not supported for an OKP key",
            JwksOkpKeyMissingX => "[x] field is missing for an OKP key",
            JwksOkpKeyBadX => "[x] field is not string for an OKP key",
        }
    }

    /// The status code of Envoy's local reply: 403 for an audience the rule does not allow,
    /// 401 for everything else.
    pub fn http_status(self) -> u16 {
        if self == Status::JwtAudienceNotAllowed {
            403
        } else {
            401
        }
    }

    /// Envoy's `www-authenticate` value: the realm is the request's original URI
    /// (`scheme://host/path`, at most 256 bytes), and every failure but a missing token adds
    /// `error="invalid_token"`.
    pub fn www_authenticate(self, realm: &str) -> String {
        let mut v = format!("Bearer realm=\"{realm}\"");
        if self != Status::JwtMissed {
            v.push_str(", error=\"invalid_token\"");
        }
        v
    }

    /// Envoy's response code details: `jwt_authn_access_denied{<message, spaces as _>}`.
    pub fn rc_details(self) -> String {
        let m: String = self
            .message()
            .chars()
            .map(|c| if c.is_whitespace() { '_' } else { c })
            .collect();
        format!("jwt_authn_access_denied{{{m}}}")
    }

    /// A short label for metrics: the failure's family.
    pub fn reason(self) -> &'static str {
        use Status::*;
        match self {
            JwtMissed => "missing",
            JwtExpired => "expired",
            JwtNotYetValid => "not_yet_valid",
            JwtUnknownIssuer => "unknown_issuer",
            JwtAudienceNotAllowed => "audience_not_allowed",
            JwtVerificationFail | JwtEd25519SignatureWrongLength => "bad_signature",
            JwksKidAlgMismatch => "no_matching_key",
            JwksFetchFail => "jwks_fetch_failed",
            JwksParseError | JwksNoKeys | JwksBadKeys | JwksNoValidKeys => "no_valid_keys",
            JwtHeaderNotImplementedAlg | JwtHeaderBadAlg => "bad_alg",
            _ => "malformed",
        }
    }
}

/// Every metrics label [`Status::reason`] gives, in a fixed order (counters are pre-made).
pub const REASONS: [&str; 11] = [
    "missing",
    "expired",
    "not_yet_valid",
    "unknown_issuer",
    "audience_not_allowed",
    "bad_signature",
    "no_matching_key",
    "jwks_fetch_failed",
    "no_valid_keys",
    "bad_alg",
    "malformed",
];

/// The request's URI as Envoy builds the realm (`Utility::buildOriginalUri`): scheme, host and
/// path without the query, truncated to 256 bytes.
pub fn realm(scheme: &str, host: &str, path: &str) -> String {
    const MAX: usize = 256;
    let mut uri = format!("{scheme}://{host}{path}");
    if uri.len() > MAX {
        let mut cut = MAX;
        while !uri.is_char_boundary(cut) {
            cut -= 1;
        }
        uri.truncate(cut);
    }
    uri
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_envoys() {
        let cases = [
            (Status::JwtExpired, 401, "Jwt is expired"),
            (Status::JwtVerificationFail, 401, "Jwt verification fails"),
            (
                Status::JwtUnknownIssuer,
                401,
                "Jwt issuer is not configured",
            ),
            (
                Status::JwtAudienceNotAllowed,
                403,
                "Audiences in Jwt are not allowed",
            ),
            (Status::JwtNotYetValid, 401, "Jwt not yet valid"),
            (
                Status::JwksKidAlgMismatch,
                401,
                "Jwks doesn't have key to match kid or alg from Jwt",
            ),
            (
                Status::JwtHeaderNotImplementedAlg,
                401,
                "Jwt header [alg] is not supported",
            ),
        ];
        for (s, code, body) in cases {
            assert_eq!(s.http_status(), code, "{s:?}");
            assert_eq!(s.message(), body, "{s:?}");
        }
    }

    #[test]
    fn www_authenticate_names_the_realm_and_the_error() {
        assert_eq!(
            Status::JwtExpired.www_authenticate("http://example.com/headers"),
            "Bearer realm=\"http://example.com/headers\", error=\"invalid_token\""
        );
        assert_eq!(
            Status::JwtMissed.www_authenticate("http://a/"),
            "Bearer realm=\"http://a/\""
        );
    }

    #[test]
    fn details_and_realm() {
        assert_eq!(
            Status::JwtExpired.rc_details(),
            "jwt_authn_access_denied{Jwt_is_expired}"
        );
        assert_eq!(realm("http", "h:8080", "/p"), "http://h:8080/p");
        assert_eq!(realm("http", "h", &"/x".repeat(300)).len(), 256);
    }

    #[test]
    fn every_reason_is_listed() {
        for s in [
            Status::JwtMissed,
            Status::JwtExpired,
            Status::JwtBadFormat,
            Status::JwksFetchFail,
            Status::JwtHeaderNotImplementedAlg,
            Status::JwksNoValidKeys,
        ] {
            assert!(REASONS.contains(&s.reason()), "{s:?}");
        }
    }
}
