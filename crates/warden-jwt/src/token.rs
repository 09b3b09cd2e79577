//! A JWT parsed the way `jwt_verify_lib`'s `Jwt::parseFromString` does it, with its statuses in
//! its order: two dots and three non-empty parts, base64url header and JSON object, `alg` a
//! string among the implemented ones (`none` is not), `kid` a string if present, base64url
//! payload and JSON object, the registered claims' types, base64url signature. No signature or
//! time check here (see `jwks` and [`Jwt::check_time`]).

use crate::status::Status;
use base64::alphabet::URL_SAFE;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine;
use serde_json::{Map, Value};

/// base64url as abseil's `WebSafeBase64Unescape` takes it: padding optional.
pub(crate) const B64: GeneralPurpose = GeneralPurpose::new(
    &URL_SAFE,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

/// The algorithms Envoy implements (`isImplemented`); anything else, `none` included, is
/// refused at parse time.
pub const IMPLEMENTED_ALGS: [&str; 13] = [
    "ES256", "ES384", "ES512", "HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "PS256",
    "PS384", "PS512", "EdDSA",
];

/// A parsed token: what verification and the filters after it read.
#[derive(Debug, Clone, PartialEq)]
pub struct Jwt {
    /// `alg`, one of [`IMPLEMENTED_ALGS`].
    pub alg: &'static str,
    /// `kid`, empty when absent.
    pub kid: String,
    pub iss: String,
    pub sub: String,
    /// `nbf`, `exp`, `iat`: 0 when absent.
    pub nbf: u64,
    pub exp: u64,
    pub iat: u64,
    /// `aud` as a list (a string is a list of one).
    pub audiences: Vec<String>,
    /// The whole payload.
    pub payload: Map<String, Value>,
    /// The payload as sent (base64url), for `outputPayloadToHeader`.
    pub payload_b64: String,
    /// `header.payload` as sent: what the signature covers.
    pub signed: String,
    pub signature: Vec<u8>,
}

/// Envoy's default clock skew for `exp` and `nbf` (`kClockSkewInSecond`).
pub const DEFAULT_CLOCK_SKEW_SECS: u64 = 60;

impl Jwt {
    pub fn parse(token: &str) -> Result<Jwt, Status> {
        if token.bytes().filter(|b| *b == b'.').count() != 2 {
            return Err(Status::JwtBadFormat);
        }
        let parts: Vec<&str> = token.split('.').filter(|p| !p.is_empty()).collect();
        let [header_b64, payload_b64, signature_b64] = parts[..] else {
            return Err(Status::JwtBadFormat);
        };
        let header = B64
            .decode(header_b64)
            .map_err(|_| Status::JwtHeaderParseErrorBadBase64)?;
        let header: Map<String, Value> =
            serde_json::from_slice(&header).map_err(|_| Status::JwtHeaderParseErrorBadJson)?;
        let alg = match header.get("alg") {
            Some(Value::String(a)) => a.as_str(),
            _ => return Err(Status::JwtHeaderBadAlg),
        };
        let alg = IMPLEMENTED_ALGS
            .iter()
            .copied()
            .find(|a| *a == alg)
            .ok_or(Status::JwtHeaderNotImplementedAlg)?;
        let kid = match header.get("kid") {
            None => String::new(),
            Some(Value::String(k)) => k.clone(),
            Some(_) => return Err(Status::JwtHeaderBadKid),
        };
        let payload = B64
            .decode(payload_b64)
            .map_err(|_| Status::JwtPayloadParseErrorBadBase64)?;
        let payload: Map<String, Value> =
            serde_json::from_slice(&payload).map_err(|_| Status::JwtPayloadParseErrorBadJson)?;
        let iss = string_claim(&payload, "iss", Status::JwtPayloadParseErrorIssNotString)?;
        let sub = string_claim(&payload, "sub", Status::JwtPayloadParseErrorSubNotString)?;
        let iat = int_claim(
            &payload,
            "iat",
            Status::JwtPayloadParseErrorIatNotInteger,
            Status::JwtPayloadParseErrorIatOutOfRange,
        )?;
        let nbf = int_claim(
            &payload,
            "nbf",
            Status::JwtPayloadParseErrorNbfNotInteger,
            Status::JwtPayloadParseErrorNbfOutOfRange,
        )?;
        let exp = int_claim(
            &payload,
            "exp",
            Status::JwtPayloadParseErrorExpNotInteger,
            Status::JwtPayloadParseErrorExpOutOfRange,
        )?;
        string_claim(&payload, "jti", Status::JwtPayloadParseErrorJtiNotString)?;
        let audiences = match payload.get("aud") {
            None => Vec::new(),
            Some(Value::String(a)) => vec![a.clone()],
            Some(Value::Array(list)) => list
                .iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or(Status::JwtPayloadParseErrorAudNotString)?,
            Some(_) => return Err(Status::JwtPayloadParseErrorAudNotString),
        };
        let signature = B64
            .decode(signature_b64)
            .map_err(|_| Status::JwtSignatureParseErrorBadBase64)?;
        Ok(Jwt {
            alg,
            kid,
            iss,
            sub,
            nbf,
            exp,
            iat,
            audiences,
            payload,
            payload_b64: payload_b64.to_owned(),
            signed: format!("{header_b64}.{payload_b64}"),
            signature,
        })
    }

    /// `nbf` and `exp` against `now` with `skew` seconds of tolerance
    /// (`Jwt::verifyTimeConstraint`).
    pub fn check_time(&self, now: u64, skew: u64) -> Result<(), Status> {
        if now.saturating_add(skew) < self.nbf {
            return Err(Status::JwtNotYetValid);
        }
        if self.exp != 0 && now > self.exp.saturating_add(skew) {
            return Err(Status::JwtExpired);
        }
        Ok(())
    }
}

fn string_claim(payload: &Map<String, Value>, name: &str, wrong: Status) -> Result<String, Status> {
    match payload.get(name) {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(wrong),
    }
}

/// A numeric claim as protobuf's Struct holds it (a double), taken as a non-negative integer.
fn int_claim(
    payload: &Map<String, Value>,
    name: &str,
    wrong: Status,
    range: Status,
) -> Result<u64, Status> {
    match payload.get(name) {
        None => Ok(0),
        Some(Value::Number(n)) => {
            let f = n.as_f64().ok_or(wrong)?;
            if !(0.0..9.223_372_036_854_776e18).contains(&f) {
                return Err(range);
            }
            Ok(n.as_u64().unwrap_or(f as u64))
        }
        Some(_) => Err(wrong),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;

    fn b64(s: &str) -> String {
        URL_SAFE_NO_PAD.encode(s)
    }

    fn token(header: &str, payload: &str) -> String {
        format!("{}.{}.c2ln", b64(header), b64(payload))
    }

    #[test]
    fn parse_statuses_follow_envoys_order() {
        let h = r#"{"alg":"RS256","kid":"k1"}"#;
        let cases: Vec<(String, Result<(), Status>)> = vec![
            (token(h, r#"{"iss":"i","sub":"s","exp":10}"#), Ok(())),
            ("a.b".into(), Err(Status::JwtBadFormat)),
            ("a.b.c.d".into(), Err(Status::JwtBadFormat)),
            // `alg: none` tokens end with a dot: two parts left.
            (
                format!("{}.{}.", b64(r#"{"alg":"none"}"#), b64("{}")),
                Err(Status::JwtBadFormat),
            ),
            (
                token(r#"{"alg":"none"}"#, "{}"),
                Err(Status::JwtHeaderNotImplementedAlg),
            ),
            (
                token(r#"{"alg":"HS257"}"#, "{}"),
                Err(Status::JwtHeaderNotImplementedAlg),
            ),
            (
                token(r#"{"typ":"JWT"}"#, "{}"),
                Err(Status::JwtHeaderBadAlg),
            ),
            (token(r#"{"alg":1}"#, "{}"), Err(Status::JwtHeaderBadAlg)),
            (
                token(r#"{"alg":"ES256","kid":3}"#, "{}"),
                Err(Status::JwtHeaderBadKid),
            ),
            (
                "!!.e30.c2ln".into(),
                Err(Status::JwtHeaderParseErrorBadBase64),
            ),
            (
                format!("{}.e30.c2ln", b64("[1]")),
                Err(Status::JwtHeaderParseErrorBadJson),
            ),
            (
                format!("{}.!!.c2ln", b64(h)),
                Err(Status::JwtPayloadParseErrorBadBase64),
            ),
            (token(h, "nope"), Err(Status::JwtPayloadParseErrorBadJson)),
            (
                token(h, r#"{"iss":1}"#),
                Err(Status::JwtPayloadParseErrorIssNotString),
            ),
            (
                token(h, r#"{"sub":true}"#),
                Err(Status::JwtPayloadParseErrorSubNotString),
            ),
            (
                token(h, r#"{"exp":"1"}"#),
                Err(Status::JwtPayloadParseErrorExpNotInteger),
            ),
            (
                token(h, r#"{"exp":-1}"#),
                Err(Status::JwtPayloadParseErrorExpOutOfRange),
            ),
            (
                token(h, r#"{"nbf":"x"}"#),
                Err(Status::JwtPayloadParseErrorNbfNotInteger),
            ),
            (
                token(h, r#"{"iat":[]}"#),
                Err(Status::JwtPayloadParseErrorIatNotInteger),
            ),
            (
                token(h, r#"{"jti":2}"#),
                Err(Status::JwtPayloadParseErrorJtiNotString),
            ),
            (
                token(h, r#"{"aud":["a",2]}"#),
                Err(Status::JwtPayloadParseErrorAudNotString),
            ),
            (
                format!("{}.{}.!!", b64(h), b64("{}")),
                Err(Status::JwtSignatureParseErrorBadBase64),
            ),
        ];
        for (t, want) in cases {
            assert_eq!(Jwt::parse(&t).map(|_| ()), want, "{t}");
        }
    }

    #[test]
    fn claims_are_read() {
        let t = token(
            r#"{"alg":"ES256","kid":"k"}"#,
            r#"{"iss":"i","sub":"s","aud":"a","exp":20,"nbf":5,"iat":4}"#,
        );
        let j = Jwt::parse(&t).expect("parses");
        assert_eq!((j.alg, j.kid.as_str()), ("ES256", "k"));
        assert_eq!((j.iss.as_str(), j.sub.as_str()), ("i", "s"));
        assert_eq!((j.exp, j.nbf, j.iat), (20, 5, 4));
        assert_eq!(j.audiences, ["a"]);
        assert_eq!(j.signature, b"sig");
        assert!(j.signed.ends_with(&j.payload_b64));
    }

    #[test]
    fn time_checks_allow_the_skew() {
        let t = token(r#"{"alg":"ES256"}"#, r#"{"exp":1000,"nbf":500}"#);
        let j = Jwt::parse(&t).expect("parses");
        let cases = [
            (439, Err(Status::JwtNotYetValid)),
            (440, Ok(())),
            (1060, Ok(())),
            (1061, Err(Status::JwtExpired)),
        ];
        for (now, want) in cases {
            assert_eq!(j.check_time(now, 60), want, "now {now}");
        }
        let no_exp = Jwt::parse(&token(r#"{"alg":"ES256"}"#, "{}")).expect("parses");
        assert_eq!(no_exp.check_time(u64::MAX / 2, 60), Ok(()));
    }
}
