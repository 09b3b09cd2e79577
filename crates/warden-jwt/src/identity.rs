//! What a verified token leaves for the filters after jwt_authn: the request principal
//! (`iss/sub`, as Istio's `requestPrincipals` match it) and the claims.

use crate::token::Jwt;
use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq)]
pub struct Verified {
    pub jwt: Jwt,
    /// `iss/sub`.
    pub principal: String,
    /// Which key set verified it ([`crate::Jwks::id`]): a cached token is verified again once
    /// its rule's keys change, as a new config would in Envoy.
    pub keys_id: u64,
}

impl Verified {
    pub fn new(jwt: Jwt) -> Verified {
        let principal = format!("{}/{}", jwt.iss, jwt.sub);
        Verified {
            jwt,
            principal,
            keys_id: 0,
        }
    }

    pub fn claims(&self) -> &Map<String, Value> {
        &self.jwt.payload
    }

    /// A claim by path (`["groups"]`, `["nested", "key"]`).
    pub fn claim(&self, path: &[&str]) -> Option<&Value> {
        let (first, rest) = path.split_first()?;
        rest.iter()
            .try_fold(self.jwt.payload.get(*first)?, |v, k| v.get(*k))
    }
}

/// A claim as a header value, as Envoy's `claim_to_headers` writes it: strings as they are,
/// integral numbers without a fraction, other numbers with six decimals (C++'s
/// `std::to_string`), booleans as `true`/`false`; anything else is not written.
pub fn claim_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                return Some(u.to_string());
            }
            let f = n.as_f64()?;
            if f >= 0.0 && f.fract() == 0.0 && f < 1.8e19 {
                Some(format!("{}", f as u64))
            } else {
                Some(format!("{f:.6}"))
            }
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn claims_become_header_text_as_envoy_writes_them() {
        let cases = [
            (json!("alice"), Some("alice")),
            (json!(42), Some("42")),
            (json!(42.0), Some("42")),
            (json!(1.5), Some("1.500000")),
            (json!(-3), Some("-3.000000")),
            (json!(true), Some("true")),
            (json!(["a"]), None),
            (json!({"a": 1}), None),
            (json!(null), None),
        ];
        for (v, want) in cases {
            assert_eq!(claim_text(&v).as_deref(), want, "{v}");
        }
    }
}
