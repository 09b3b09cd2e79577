//! JSON Web Key Sets as `jwt_verify_lib` reads them, and the signature check
//! (`verifyJwtWithoutTimeChecking`): a key is a candidate when its `kid` matches the token's
//! (either absent: any) and its `alg` is the token's (absent: any); no candidate is "no key to
//! match kid or alg", candidates that all fail are "verification fails". Keys that do not parse
//! are skipped and reported (a set with none left has no valid key). The cryptography is
//! `jsonwebtoken`'s (aws-lc).

use crate::status::Status;
use crate::token::{Jwt, B64};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::{Map, Value};
use std::sync::atomic::{AtomicU64, Ordering};

/// One usable key.
#[derive(Clone)]
pub struct Key {
    /// Empty when the JWK has none.
    pub kid: String,
    /// The JWK's `alg`, empty when absent.
    pub alg: String,
    pub kind: KeyKind,
    decoding: DecodingKey,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key")
            .field("kid", &self.kid)
            .field("alg", &self.alg)
            .field("kind", &self.kind)
            .finish()
    }
}

/// The key type, with the curve where it decides the algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    Rsa,
    /// `P-256`, `P-384`, `P-521` as ES256/384/512.
    Ec(&'static str),
    Oct,
    Ed25519,
}

/// A parsed key set.
#[derive(Debug, Clone, Default)]
pub struct Jwks {
    /// Unique per parse (from 1): tokens cached as verified by another set are verified again.
    pub id: u64,
    pub keys: Vec<Key>,
    /// Keys left out, by index in `keys` of the document, and why.
    pub skipped: Vec<(usize, Status)>,
}

impl Jwks {
    /// Parse a JWKS document; `Err` when it is not one or no key in it is usable.
    pub fn parse(text: &str) -> Result<Jwks, Status> {
        let doc: Value = serde_json::from_str(text).map_err(|_| Status::JwksParseError)?;
        let Value::Object(doc) = doc else {
            return Err(Status::JwksParseError);
        };
        let keys = match doc.get("keys") {
            None => return Err(Status::JwksNoKeys),
            Some(Value::Array(keys)) => keys,
            Some(_) => return Err(Status::JwksBadKeys),
        };
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let mut out = Jwks {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            ..Jwks::default()
        };
        for (i, k) in keys.iter().enumerate() {
            match k.as_object().ok_or(Status::JwksBadKeys).and_then(parse_key) {
                Ok(key) => out.keys.push(key),
                Err(s) => out.skipped.push((i, s)),
            }
        }
        if out.keys.is_empty() {
            return Err(Status::JwksNoValidKeys);
        }
        Ok(out)
    }

    /// Check the token's signature against these keys.
    pub fn verify(&self, jwt: &Jwt) -> Result<(), Status> {
        let mut matched = false;
        for key in &self.keys {
            if !jwt.kid.is_empty() && !key.kid.is_empty() && key.kid != jwt.kid {
                continue;
            }
            if !key.alg.is_empty() && key.alg != jwt.alg {
                continue;
            }
            matched = true;
            if key.kind == KeyKind::Ed25519 && jwt.alg == "EdDSA" && jwt.signature.len() != 64 {
                return Err(Status::JwtEd25519SignatureWrongLength);
            }
            let Some(alg) = algorithm_for(key.kind, jwt.alg) else {
                continue;
            };
            let sig = URL_SAFE_NO_PAD.encode(&jwt.signature);
            if jsonwebtoken::crypto::verify(&sig, jwt.signed.as_bytes(), &key.decoding, alg)
                .unwrap_or(false)
            {
                return Ok(());
            }
        }
        Err(if matched {
            Status::JwtVerificationFail
        } else {
            Status::JwksKidAlgMismatch
        })
    }
}

/// The algorithm a key of `kind` verifies a token of `alg` with; `None` when that key cannot
/// (another family, another curve, or ES512, which the crypto backend lacks).
fn algorithm_for(kind: KeyKind, alg: &str) -> Option<Algorithm> {
    Some(match (kind, alg) {
        (KeyKind::Rsa, "RS256") => Algorithm::RS256,
        (KeyKind::Rsa, "RS384") => Algorithm::RS384,
        (KeyKind::Rsa, "RS512") => Algorithm::RS512,
        (KeyKind::Rsa, "PS256") => Algorithm::PS256,
        (KeyKind::Rsa, "PS384") => Algorithm::PS384,
        (KeyKind::Rsa, "PS512") => Algorithm::PS512,
        (KeyKind::Ec("P-256"), "ES256") => Algorithm::ES256,
        (KeyKind::Ec("P-384"), "ES384") => Algorithm::ES384,
        (KeyKind::Oct, "HS256") => Algorithm::HS256,
        (KeyKind::Oct, "HS384") => Algorithm::HS384,
        (KeyKind::Oct, "HS512") => Algorithm::HS512,
        (KeyKind::Ed25519, "EdDSA") => Algorithm::EdDSA,
        _ => return None,
    })
}

fn field<'a>(
    k: &'a Map<String, Value>,
    name: &str,
    missing: Status,
    bad: Status,
) -> Result<&'a str, Status> {
    match k.get(name) {
        None => Err(missing),
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(bad),
    }
}

fn parse_key(k: &Map<String, Value>) -> Result<Key, Status> {
    let kty = field(k, "kty", Status::JwksMissingKty, Status::JwksBadKty)?;
    let kid = match k.get("kid") {
        Some(Value::String(s)) => s.clone(),
        _ => String::new(),
    };
    let alg = match k.get("alg") {
        Some(Value::String(s)) => s.clone(),
        _ => String::new(),
    };
    let (kind, decoding) = match kty {
        "RSA" => {
            if !alg.is_empty() && !alg.starts_with("RS") && !alg.starts_with("PS") {
                return Err(Status::JwksRsaKeyBadAlg);
            }
            let n = field(k, "n", Status::JwksRsaKeyMissingN, Status::JwksRsaKeyBadN)?;
            let e = field(k, "e", Status::JwksRsaKeyMissingE, Status::JwksRsaKeyBadE)?;
            if B64.decode(n).is_err() || B64.decode(e).is_err() {
                return Err(Status::JwksRsaParseError);
            }
            let key =
                DecodingKey::from_rsa_components(n.trim_end_matches('='), e.trim_end_matches('='))
                    .map_err(|_| Status::JwksRsaParseError)?;
            (KeyKind::Rsa, key)
        }
        "EC" => {
            if !alg.is_empty() && !alg.starts_with("ES") {
                return Err(Status::JwksEcKeyBadAlg);
            }
            let crv = match k.get("crv") {
                None => match alg.as_str() {
                    "ES384" => "P-384",
                    "ES512" => "P-521",
                    _ => "P-256",
                },
                Some(Value::String(c)) => match c.as_str() {
                    "P-256" => "P-256",
                    "P-384" => "P-384",
                    "P-521" => "P-521",
                    _ => return Err(Status::JwksEcKeyAlgOrCrvUnsupported),
                },
                Some(_) => return Err(Status::JwksEcKeyBadCrv),
            };
            let want = match crv {
                "P-384" => "ES384",
                "P-521" => "ES512",
                _ => "ES256",
            };
            if !alg.is_empty() && alg != want {
                return Err(Status::JwksEcKeyAlgNotCompatibleWithCrv);
            }
            let x = field(k, "x", Status::JwksEcKeyMissingX, Status::JwksEcKeyBadX)?;
            let y = field(k, "y", Status::JwksEcKeyMissingY, Status::JwksEcKeyBadY)?;
            let (Ok(xb), Ok(yb)) = (B64.decode(x), B64.decode(y)) else {
                return Err(Status::JwksEcParseError);
            };
            let size = match crv {
                "P-384" => 48,
                "P-521" => 66,
                _ => 32,
            };
            if xb.len() != size || yb.len() != size {
                return Err(Status::JwksEcParseError);
            }
            let key =
                DecodingKey::from_ec_components(x.trim_end_matches('='), y.trim_end_matches('='))
                    .map_err(|_| Status::JwksEcParseError)?;
            (KeyKind::Ec(crv), key)
        }
        "oct" => {
            if !alg.is_empty() && !alg.starts_with("HS") {
                return Err(Status::JwksHmacKeyBadAlg);
            }
            let kk = field(k, "k", Status::JwksHmacKeyMissingK, Status::JwksHmacKeyBadK)?;
            let secret = B64.decode(kk).map_err(|_| Status::JwksOctBadBase64)?;
            if secret.is_empty() {
                return Err(Status::JwksOctBadBase64);
            }
            let key = DecodingKey::from_secret(&secret).map_err(|_| Status::JwksOctBadBase64)?;
            (KeyKind::Oct, key)
        }
        "OKP" => {
            if !alg.is_empty() && alg != "EdDSA" {
                return Err(Status::JwksOkpKeyBadAlg);
            }
            let crv = field(
                k,
                "crv",
                Status::JwksOkpKeyMissingCrv,
                Status::JwksOkpKeyBadCrv,
            )?;
            if crv != "Ed25519" {
                return Err(Status::JwksOkpKeyCrvUnsupported);
            }
            let x = field(k, "x", Status::JwksOkpKeyMissingX, Status::JwksOkpKeyBadX)?;
            let xb = B64.decode(x).map_err(|_| Status::JwksOkpXBadBase64)?;
            if xb.len() != 32 {
                return Err(Status::JwksOkpXBadBase64);
            }
            let key = DecodingKey::from_ed_components(x.trim_end_matches('='))
                .map_err(|_| Status::JwksOkpXBadBase64)?;
            (KeyKind::Ed25519, key)
        }
        "" => return Err(Status::JwksBadKty),
        _ => return Err(Status::JwksNotImplementedKty),
    };
    Ok(Key {
        kid,
        alg,
        kind,
        decoding,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{EncodingKey, Header};

    fn hs_jwks(kid: &str, secret: &[u8]) -> String {
        format!(
            r#"{{"keys":[{{"kty":"oct","kid":"{kid}","alg":"HS256","k":"{}"}}]}}"#,
            URL_SAFE_NO_PAD.encode(secret)
        )
    }

    fn hs_token(kid: Option<&str>, secret: &[u8]) -> Jwt {
        let mut h = Header::new(Algorithm::HS256);
        h.kid = kid.map(str::to_owned);
        let t = jsonwebtoken::encode(
            &h,
            &serde_json::json!({"iss": "i", "sub": "s"}),
            &EncodingKey::from_secret(secret).expect("key"),
        )
        .expect("encodes");
        Jwt::parse(&t).expect("parses")
    }

    #[test]
    fn sets_that_are_not_sets() {
        let cases = [
            ("nope", Status::JwksParseError),
            ("[]", Status::JwksParseError),
            ("{}", Status::JwksNoKeys),
            (r#"{"keys":{}}"#, Status::JwksBadKeys),
            (r#"{"keys":[]}"#, Status::JwksNoValidKeys),
            (r#"{"keys":[{"kty":"XYZ"}]}"#, Status::JwksNoValidKeys),
        ];
        for (text, want) in cases {
            assert_eq!(Jwks::parse(text).map(|_| ()).unwrap_err(), want, "{text}");
        }
    }

    #[test]
    fn bad_keys_are_skipped_and_named() {
        let text = r#"{"keys":[
            {"kty":"RSA","n":"AQAB"},
            {"kty":"EC","crv":"P-256","alg":"ES384","x":"AA","y":"AA"},
            {"kty":"oct","k":"c2VjcmV0"},
            {"kty":"OKP","crv":"X25519","x":"AA"},
            {"n":"x"}
        ]}"#;
        let j = Jwks::parse(text).expect("one key is usable");
        assert_eq!(j.keys.len(), 1);
        assert_eq!(j.keys[0].kind, KeyKind::Oct);
        assert_eq!(
            j.skipped,
            [
                (0, Status::JwksRsaKeyMissingE),
                (1, Status::JwksEcKeyAlgNotCompatibleWithCrv),
                (3, Status::JwksOkpKeyCrvUnsupported),
                (4, Status::JwksMissingKty),
            ]
        );
    }

    #[test]
    fn kid_and_alg_pick_the_candidates() {
        let jwks = Jwks::parse(&hs_jwks("k1", b"right")).expect("parses");
        let cases = [
            (hs_token(Some("k1"), b"right"), Ok(())),
            (hs_token(None, b"right"), Ok(())),
            (
                hs_token(Some("k1"), b"wrong"),
                Err(Status::JwtVerificationFail),
            ),
            (
                hs_token(Some("k2"), b"right"),
                Err(Status::JwksKidAlgMismatch),
            ),
        ];
        for (jwt, want) in cases {
            assert_eq!(jwks.verify(&jwt), want, "{:?}", jwt.kid);
        }
    }

    #[test]
    fn a_key_of_another_family_is_a_candidate_that_fails() {
        // An oct key without alg matches an RS256 token's kid: Envoy counts it, then fails.
        let jwks = Jwks::parse(r#"{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}"#).expect("parses");
        let mut jwt = hs_token(None, b"secret");
        jwt.alg = "RS256";
        assert_eq!(jwks.verify(&jwt), Err(Status::JwtVerificationFail));
    }
}
