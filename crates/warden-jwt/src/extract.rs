//! Where tokens are found (Envoy's `jwt_authn` extractor): each rule's `fromHeaders` (a prefix
//! is searched for in the value, and the token starts at the next base64url character),
//! `fromParams` (query parameters, percent-decoded, first value) and `fromCookies`; a rule with
//! none of them reads `Authorization: Bearer <token>` and the `access_token` parameter. A
//! location shared by rules remembers every issuer that uses it: a token found there whose
//! issuer is not one of them is "Jwt issuer is not configured".

use http::header::{HeaderName, AUTHORIZATION, COOKIE};
use http::HeaderMap;
use percent_encoding::percent_decode_str;

/// Where a token was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    Header { name: HeaderName, prefix: String },
    Param(String),
    Cookie(String),
}

/// Where a request's headers are read from: its map, or the proxy's header lines as read
/// (a fast-path request that nothing else needs a map for keeps them).
pub trait RequestHeaders<'a> {
    /// Every value of the header `name`, in order.
    fn values(&self, name: &HeaderName) -> impl Iterator<Item = &'a [u8]>;
}

impl<'a> RequestHeaders<'a> for &'a HeaderMap {
    fn values(&self, name: &HeaderName) -> impl Iterator<Item = &'a [u8]> {
        self.get_all(name).iter().map(http::HeaderValue::as_bytes)
    }
}

/// A token and where it was (borrowed from a header; a parameter's or cookie's is decoded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found<'a> {
    pub token: std::borrow::Cow<'a, [u8]>,
    /// Index into [`Extractor::locations`].
    pub location: usize,
}

/// A place and the issuers (by rule index) that read tokens there.
#[derive(Debug, Clone)]
pub struct Location {
    pub place: Place,
    pub rules: Vec<usize>,
}

#[derive(Debug, Clone, Default)]
pub struct Extractor {
    /// Headers, then parameters, then cookies, each sorted as Envoy's maps are.
    pub locations: Vec<Location>,
}

/// One rule's places, as configured.
#[derive(Debug, Clone, Default)]
pub struct RulePlaces {
    pub headers: Vec<(HeaderName, String)>,
    pub params: Vec<String>,
    pub cookies: Vec<String>,
}

impl RulePlaces {
    /// The places a rule reads: its own, or Envoy's defaults when it names none.
    pub fn places(&self) -> Vec<Place> {
        if self.headers.is_empty() && self.params.is_empty() && self.cookies.is_empty() {
            return vec![
                Place::Header {
                    name: AUTHORIZATION,
                    prefix: "Bearer ".into(),
                },
                Place::Param("access_token".into()),
            ];
        }
        let headers = self.headers.iter().map(|(n, p)| Place::Header {
            name: n.clone(),
            prefix: p.clone(),
        });
        let params = self.params.iter().cloned().map(Place::Param);
        let cookies = self.cookies.iter().cloned().map(Place::Cookie);
        headers.chain(params).chain(cookies).collect()
    }
}

impl Extractor {
    pub fn new(rules: &[RulePlaces]) -> Extractor {
        let mut locations: Vec<Location> = Vec::new();
        for (i, r) in rules.iter().enumerate() {
            for place in r.places() {
                match locations.iter_mut().find(|l| l.place == place) {
                    Some(l) if l.rules.contains(&i) => {}
                    Some(l) => l.rules.push(i),
                    None => locations.push(Location {
                        place,
                        rules: vec![i],
                    }),
                }
            }
        }
        locations.sort_by_key(|l| sort_key(&l.place));
        Extractor { locations }
    }

    /// Every token of the request, in Envoy's order (headers, parameters, cookies).
    pub fn extract<'a>(
        &self,
        headers: &impl RequestHeaders<'a>,
        query: Option<&str>,
    ) -> smallvec::SmallVec<[Found<'a>; 2]> {
        // Inline: a request carries one token, almost always.
        let mut out = smallvec::SmallVec::new();
        for (i, loc) in self.locations.iter().enumerate() {
            match &loc.place {
                Place::Header { name, prefix } => {
                    // Bytes, not text: a cached token is found without a UTF-8 pass over it
                    // (a token that is not text fails to parse after the cache misses).
                    let prefix = prefix.as_bytes();
                    for v in headers.values(name) {
                        // Envoy looks for the prefix anywhere in the value; it is almost
                        // always at the start, which needs no substring search.
                        let at = if v.starts_with(prefix) {
                            Some(0)
                        } else {
                            v.windows(prefix.len().max(1)).position(|w| w == prefix)
                        };
                        let token = match at {
                            _ if prefix.is_empty() => v,
                            Some(at) => after_prefix(v, at + prefix.len()),
                            None => continue,
                        };
                        out.push(Found {
                            token: token.into(),
                            location: i,
                        });
                    }
                }
                Place::Param(key) => {
                    if let Some(v) = query.and_then(|q| param(q, key)) {
                        out.push(Found {
                            token: v.into_bytes().into(),
                            location: i,
                        });
                    }
                }
                Place::Cookie(key) => {
                    if let Some(v) = cookie(headers, key) {
                        out.push(Found {
                            token: v.into_bytes().into(),
                            location: i,
                        });
                    }
                }
            }
        }
        out
    }
}

/// Envoy keeps header places in a map keyed by name + prefix, then parameters, then cookies,
/// each by name.
fn sort_key(place: &Place) -> (u8, String) {
    match place {
        Place::Header { name, prefix } => (0, format!("{}{prefix}", name.as_str())),
        Place::Param(k) => (1, k.clone()),
        Place::Cookie(k) => (2, k.clone()),
    }
}

fn is_token_byte(c: &u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.')
}

/// The value from the first base64url character at or after `at` (the whole value when there
/// is none, as Envoy keeps it).
fn after_prefix(v: &[u8], at: usize) -> &[u8] {
    match v
        .get(at..)
        .and_then(|rest| rest.iter().position(is_token_byte))
    {
        Some(start) => v.get(at + start..).unwrap_or(v),
        None => v,
    }
}

/// The first value of query parameter `key`, percent-decoded.
pub fn param(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (percent_decode_str(k).decode_utf8().ok()? == key)
            .then(|| percent_decode_str(v).decode_utf8_lossy().into_owned())
    })
}

/// The query without parameter `key` (every occurrence); `None` when nothing is left.
pub fn remove_param(query: &str, key: &str) -> Option<String> {
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| {
            let k = pair.split_once('=').map_or(*pair, |(k, _)| k);
            percent_decode_str(k).decode_utf8().ok().as_deref() != Some(key)
        })
        .collect();
    (!kept.is_empty()).then(|| kept.join("&"))
}

/// The first value of cookie `key` in the request's `cookie` headers, quotes removed.
pub fn cookie<'a>(headers: &impl RequestHeaders<'a>, key: &str) -> Option<String> {
    headers.values(&COOKIE).find_map(|h| {
        let h = std::str::from_utf8(h).ok()?;
        h.split(';').find_map(|c| {
            let (k, v) = c.trim().split_once('=')?;
            (k.trim() == key).then(|| {
                let v = v.trim();
                v.strip_prefix('"')
                    .and_then(|v| v.strip_suffix('"'))
                    .unwrap_or(v)
                    .to_owned()
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).expect("name"),
                HeaderValue::from_str(v).expect("value"),
            );
        }
        h
    }

    #[test]
    fn default_places_are_bearer_and_access_token() {
        let x = Extractor::new(&[RulePlaces::default()]);
        type Case<'a> = (&'a [(&'a str, &'a str)], Option<&'a str>, &'a [&'a str]);
        let cases: [Case; 6] = [
            (&[("authorization", "Bearer a.b.c")], None, &["a.b.c"]),
            (&[("authorization", "Basic dXNlcg==")], None, &[]),
            (&[], Some("access_token=x.y.z&q=1"), &["x.y.z"]),
            (&[], Some("q=1"), &[]),
            (
                &[("authorization", "Bearer a.b.c")],
                Some("access_token=d.e.f"),
                &["a.b.c", "d.e.f"],
            ),
            // The token starts at the next base64url character after the prefix.
            (&[("authorization", "Bearer   \"a.b.c")], None, &["a.b.c"]),
        ];
        for (h, q, want) in cases {
            let got: Vec<String> = x
                .extract(&&headers(h), q)
                .into_iter()
                .map(|f| String::from_utf8(f.token.into_owned()).expect("text"))
                .collect();
            assert_eq!(got, want, "{h:?} {q:?}");
        }
    }

    #[test]
    fn configured_places_replace_the_defaults() {
        let rules = [
            RulePlaces {
                headers: vec![(HeaderName::from_static("x-jwt"), String::new())],
                cookies: vec!["session".into()],
                ..RulePlaces::default()
            },
            RulePlaces {
                params: vec!["token".into()],
                ..RulePlaces::default()
            },
        ];
        let x = Extractor::new(&rules);
        let h = headers(&[
            ("authorization", "Bearer not.read.here"),
            ("x-jwt", "h.h.h"),
            ("cookie", "a=1; session=\"c.c.c\""),
        ]);
        let found = x.extract(&&h, Some("token=p%2Ep.p&access_token=no"));
        let got: Vec<(&str, &[usize])> = found
            .iter()
            .map(|f| {
                (
                    std::str::from_utf8(&f.token).expect("text"),
                    &x.locations[f.location].rules[..],
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("h.h.h", &[0][..]),
                ("p.p.p", &[1][..]),
                ("c.c.c", &[0][..])
            ]
        );
    }

    #[test]
    fn shared_places_name_every_rule() {
        let x = Extractor::new(&[RulePlaces::default(), RulePlaces::default()]);
        assert!(x.locations.iter().all(|l| l.rules == [0, 1]));
    }

    #[test]
    fn params_are_removed_exactly() {
        let cases = [
            ("access_token=t&q=1", Some("q=1")),
            ("q=1&access_token=t&r=2&access_token=u", Some("q=1&r=2")),
            ("access_token=t", None),
            ("access_tokens=t", Some("access_tokens=t")),
        ];
        for (q, want) in cases {
            assert_eq!(remove_param(q, "access_token").as_deref(), want, "{q}");
        }
    }
}
