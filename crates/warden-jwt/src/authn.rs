//! The jwt_authn filter's decision as Istio configures Envoy for a workload's merged
//! RequestAuthentication rules (`convertToEnvoyJwtConfig`: each rule a provider, "any provider
//! or allow missing"): a request without a token passes with no principal; every token found
//! must verify against a rule of its issuer that reads it where it was found (tried in turn, the
//! first that accepts wins; when none does, the first rule's reason is the answer); the first
//! token that fails decides the 401/403. Accepted tokens give the identity, the headers their
//! rules output, and are removed from the request unless `forwardOriginalToken`.

use crate::audience::Audiences;
use crate::cache::TokenCache;
use crate::clock::Clock;
use crate::extract::{Extractor, Place, RequestHeaders, RulePlaces};
use crate::identity::{claim_text, Verified};
use crate::jwks::Jwks;
use crate::stats::Stats;
use crate::status::Status;
use crate::token::{Jwt, DEFAULT_CLOCK_SKEW_SECS};
use arc_swap::ArcSwapOption;
use http::header::HeaderName;
use http::HeaderValue;
use std::sync::Arc;
use std::time::Duration;

/// Verified tokens kept per rule (Envoy keeps 100 per provider; a gateway sees more users).
pub const CACHE_PER_RULE: usize = 4096;

/// Where a rule's keys come from.
#[derive(Debug)]
pub enum Keys {
    /// `jwks`: parsed at load; an unusable set refuses every token of the issuer with its
    /// status (Envoy: "Jwks doesn't have any valid public key").
    Inline(Result<Arc<Jwks>, Status>),
    /// `jwksUri`: fetched and refreshed outside the request path.
    Remote(Arc<RemoteKeys>),
}

/// A jwksUri's current keys: the last good set (`None` until one is fetched: tokens of the
/// issuer then fail with "Jwks remote fetch is failed").
#[derive(Debug)]
pub struct RemoteKeys {
    pub uri: String,
    pub timeout: Duration,
    pub keys: ArcSwapOption<Jwks>,
}

impl RemoteKeys {
    pub fn new(uri: String, timeout: Duration) -> RemoteKeys {
        RemoteKeys {
            uri,
            timeout,
            keys: ArcSwapOption::empty(),
        }
    }
}

/// One `jwtRules[]` entry, compiled.
#[derive(Debug)]
pub struct Rule {
    pub issuer: String,
    audiences: Audiences,
    pub keys: Keys,
    pub forward: bool,
    pub payload_header: Option<HeaderName>,
    pub claim_headers: Vec<(Vec<String>, HeaderName)>,
    pub places: Vec<Place>,
    cache: TokenCache,
}

impl Rule {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        issuer: String,
        audiences: &[String],
        keys: Keys,
        places: &RulePlaces,
        forward: bool,
        payload_header: Option<HeaderName>,
        claim_headers: Vec<(String, HeaderName)>,
        cache_size: usize,
    ) -> Rule {
        Rule {
            issuer,
            audiences: Audiences::new(audiences),
            keys,
            forward,
            payload_header,
            claim_headers: claim_headers
                .into_iter()
                .map(|(c, h)| (c.split('.').map(str::to_owned).collect(), h))
                .collect(),
            places: places.places(),
            cache: TokenCache::new(cache_size),
        }
    }

    /// The current key set's id (0 for an unusable inline set or none fetched yet).
    fn keys_id(&self) -> u64 {
        match &self.keys {
            Keys::Inline(Ok(jwks)) => jwks.id,
            Keys::Inline(Err(_)) => 0,
            Keys::Remote(remote) => remote.keys.load().as_ref().map_or(0, |j| j.id),
        }
    }

    fn check_keys(&self, jwt: &Jwt) -> Result<(), Status> {
        match &self.keys {
            Keys::Inline(Ok(jwks)) => jwks.verify(jwt),
            Keys::Inline(Err(status)) => Err(*status),
            Keys::Remote(remote) => match &*remote.keys.load() {
                Some(jwks) => jwks.verify(jwt),
                None => Err(Status::JwksFetchFail),
            },
        }
    }
}

/// Changes to the request for the upstream (and for the filters after jwt_authn).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Edits {
    pub remove_headers: smallvec::SmallVec<[HeaderName; 2]>,
    pub add_headers: Vec<(HeaderName, HeaderValue)>,
    pub remove_params: Vec<String>,
}

impl Edits {
    pub fn is_empty(&self) -> bool {
        self.remove_headers.is_empty()
            && self.add_headers.is_empty()
            && self.remove_params.is_empty()
    }
}

/// What the filter does with a request.
#[derive(Debug)]
pub enum Outcome {
    /// Continue: with the identity of the verified token (none without a token), after the
    /// edits.
    Pass {
        identity: Option<Arc<Verified>>,
        edits: Edits,
    },
    /// Answer 401/403 with Envoy's text for this status.
    Deny(Status),
}

/// The compiled rules of one workload.
#[derive(Debug)]
pub struct Authenticator {
    pub rules: Vec<Rule>,
    extractor: Extractor,
    /// Output headers of every rule: removed from every request first, so a client cannot
    /// send its own (Envoy's `sanitizePayloadHeaders`).
    sanitize: Vec<HeaderName>,
    clock: Arc<dyn Clock>,
    skew: u64,
    pub stats: Stats,
}

impl Authenticator {
    pub fn new(rules: Vec<Rule>, clock: Arc<dyn Clock>) -> Authenticator {
        let places: Vec<RulePlaces> = rules
            .iter()
            .map(|r| {
                let mut p = RulePlaces::default();
                for place in &r.places {
                    match place {
                        Place::Header { name, prefix } => {
                            p.headers.push((name.clone(), prefix.clone()))
                        }
                        Place::Param(k) => p.params.push(k.clone()),
                        Place::Cookie(k) => p.cookies.push(k.clone()),
                    }
                }
                p
            })
            .collect();
        let mut sanitize: Vec<HeaderName> = rules
            .iter()
            .flat_map(|r| {
                r.payload_header
                    .iter()
                    .chain(r.claim_headers.iter().map(|(_, h)| h))
                    .cloned()
            })
            .collect();
        sanitize.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        sanitize.dedup();
        Authenticator {
            extractor: Extractor::new(&places),
            rules,
            sanitize,
            clock,
            skew: DEFAULT_CLOCK_SKEW_SECS,
            stats: Stats::default(),
        }
    }

    /// Decide a request from its headers and query string.
    pub fn authenticate<'a>(
        &self,
        headers: impl RequestHeaders<'a>,
        query: Option<&str>,
    ) -> Outcome {
        let mut edits = Edits::default();
        for h in &self.sanitize {
            if headers.values(h).next().is_some() {
                edits.remove_headers.push(h.clone());
            }
        }
        let found = self.extractor.extract(&headers, query);
        if found.is_empty() {
            self.stats
                .no_token
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Outcome::Pass {
                identity: None,
                edits,
            };
        }
        let now = self.clock.now_unix();
        let mut identity = None;
        // Envoy verifies the last token found first; the first one found is the identity.
        for f in found.iter().rev() {
            let location = &self.extractor.locations[f.location];
            match self.verify(&f.token, &location.rules, now) {
                Ok((rule, verified)) => {
                    self.outputs(rule, &verified, &location.place, &mut edits);
                    identity = Some(verified);
                }
                Err(status) => {
                    self.stats.deny(status);
                    return Outcome::Deny(status);
                }
            }
        }
        self.stats
            .allowed
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Outcome::Pass { identity, edits }
    }

    /// One token, found where `rules` read: the rule that accepts it and the verified token.
    fn verify(
        &self,
        token: &[u8],
        rules: &[usize],
        now: u64,
    ) -> Result<(&Rule, Arc<Verified>), Status> {
        for &i in rules {
            let rule = &self.rules[i];
            // The cache is the rule's own and only takes tokens its audiences allowed
            // (`check` below), which do not change while the rule lives: no audience pass.
            if let Some(v) = rule.cache.get(token, now, self.skew) {
                if v.keys_id == rule.keys_id() && v.jwt.check_time(now, self.skew).is_ok() {
                    self.stats
                        .cache_hits
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    return Ok((rule, v));
                }
            }
        }
        // Not text: it fails to parse, with the status Envoy gives a malformed token.
        let jwt = Jwt::parse(&String::from_utf8_lossy(token))?;
        let mut first_failure = None;
        for &i in rules {
            let rule = &self.rules[i];
            if rule.issuer != jwt.iss {
                continue;
            }
            let keys_id = rule.keys_id();
            match self.check(rule, &jwt, now) {
                Ok(()) => {
                    let mut verified = Verified::new(jwt);
                    verified.keys_id = keys_id;
                    let verified = Arc::new(verified);
                    rule.cache.insert(token, verified.clone(), now, self.skew);
                    return Ok((rule, verified));
                }
                Err(status) => {
                    first_failure.get_or_insert(status);
                }
            }
        }
        Err(first_failure.unwrap_or(Status::JwtUnknownIssuer))
    }

    /// Envoy's order after the issuer: time, audience, then the keys.
    fn check(&self, rule: &Rule, jwt: &Jwt, now: u64) -> Result<(), Status> {
        jwt.check_time(now, self.skew)?;
        if !rule.audiences.allow(&jwt.audiences) {
            return Err(Status::JwtAudienceNotAllowed);
        }
        self.stats
            .verifications
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        rule.check_keys(jwt)
    }

    fn outputs(&self, rule: &Rule, v: &Verified, place: &Place, edits: &mut Edits) {
        if let Some(h) = &rule.payload_header {
            if let Ok(value) = HeaderValue::from_str(&v.jwt.payload_b64) {
                edits.add_headers.push((h.clone(), value));
            }
        }
        for (claim, header) in &rule.claim_headers {
            let path: Vec<&str> = claim.iter().map(String::as_str).collect();
            let text = v.claim(&path).and_then(claim_text);
            if let Some(value) = text.and_then(|t| HeaderValue::from_str(&t).ok()) {
                edits.add_headers.push((header.clone(), value));
            }
        }
        if !rule.forward {
            match place {
                Place::Header { name, .. } => {
                    if !edits.remove_headers.contains(name) {
                        edits.remove_headers.push(name.clone());
                    }
                }
                Place::Param(k) => edits.remove_params.push(k.clone()),
                // Envoy leaves cookies in place.
                Place::Cookie(_) => {}
            }
        }
    }

    /// The issuers and where their keys come from, for `warden check`.
    pub fn describe(&self) -> Vec<String> {
        self.rules
            .iter()
            .map(|r| {
                let keys = match &r.keys {
                    Keys::Inline(Ok(j)) => format!("inline jwks ({} keys)", j.keys.len()),
                    Keys::Inline(Err(s)) => format!("inline jwks unusable: {}", s.message()),
                    Keys::Remote(remote) => format!("jwksUri {}", remote.uri),
                };
                format!("{}: {keys}", r.issuer)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;
    use http::HeaderMap;
    use jsonwebtoken::{Algorithm, EncodingKey, Header};
    use serde_json::json;

    const NOW: u64 = 1_800_000_000;
    const ISS: &str = "https://issuer.example";

    fn jwks(kid: &str, secret: &[u8]) -> Keys {
        let text = format!(
            r#"{{"keys":[{{"kty":"oct","kid":"{kid}","k":"{}"}}]}}"#,
            URL_SAFE_NO_PAD.encode(secret)
        );
        Keys::Inline(Jwks::parse(&text).map(Arc::new))
    }

    fn rule(audiences: &[&str], forward: bool) -> Rule {
        let aud: Vec<String> = audiences.iter().map(|s| s.to_string()).collect();
        Rule::new(
            ISS.into(),
            &aud,
            jwks("k1", b"secret"),
            &RulePlaces::default(),
            forward,
            Some(HeaderName::from_static("x-jwt-payload")),
            vec![
                ("sub".into(), HeaderName::from_static("x-jwt-sub")),
                ("org.id".into(), HeaderName::from_static("x-org")),
            ],
            16,
        )
    }

    fn sign(claims: serde_json::Value, kid: &str, secret: &[u8]) -> String {
        let mut h = Header::new(Algorithm::HS256);
        h.kid = Some(kid.into());
        jsonwebtoken::encode(&h, &claims, &EncodingKey::from_secret(secret).expect("key"))
            .expect("signs")
    }

    fn good(claims: serde_json::Value) -> String {
        sign(claims, "k1", b"secret")
    }

    fn bearer(token: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            http::header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {token}")).expect("value"),
        );
        h
    }

    fn authn(rules: Vec<Rule>) -> (Authenticator, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new(NOW));
        (Authenticator::new(rules, clock.clone()), clock)
    }

    fn status(o: &Outcome) -> Result<Option<&str>, Status> {
        match o {
            Outcome::Pass { identity, .. } => Ok(identity.as_ref().map(|v| v.principal.as_str())),
            Outcome::Deny(s) => Err(*s),
        }
    }

    #[test]
    fn tokens_get_envoys_answers() {
        let (a, _) = authn(vec![rule(&["api"], false)]);
        let base = json!({"iss": ISS, "sub": "alice", "aud": "api", "exp": NOW + 600});
        let with = |k: &str, v: serde_json::Value| {
            let mut c = base.clone();
            c[k] = v;
            good(c)
        };
        let none_alg = format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#),
            URL_SAFE_NO_PAD.encode(base.to_string())
        );
        type Case<'a> = (&'a str, String, Result<Option<&'a str>, Status>);
        let cases: Vec<Case> = vec![
            (
                "valid",
                good(base.clone()),
                Ok(Some("https://issuer.example/alice")),
            ),
            (
                "expired",
                with("exp", json!(NOW - 61)),
                Err(Status::JwtExpired),
            ),
            (
                "expired within skew",
                with("exp", json!(NOW - 60)),
                Ok(Some("https://issuer.example/alice")),
            ),
            (
                "not yet valid",
                with("nbf", json!(NOW + 61)),
                Err(Status::JwtNotYetValid),
            ),
            (
                "wrong audience",
                with("aud", json!("other")),
                Err(Status::JwtAudienceNotAllowed),
            ),
            (
                "wrong issuer",
                with("iss", json!("https://evil")),
                Err(Status::JwtUnknownIssuer),
            ),
            (
                "unknown kid",
                sign(base.clone(), "k2", b"secret"),
                Err(Status::JwksKidAlgMismatch),
            ),
            (
                "wrong secret",
                sign(base.clone(), "k1", b"guess"),
                Err(Status::JwtVerificationFail),
            ),
            ("alg none", none_alg, Err(Status::JwtBadFormat)),
            ("garbage", "abc".into(), Err(Status::JwtBadFormat)),
        ];
        for (name, token, want) in cases {
            let got = a.authenticate(&bearer(&token), None);
            assert_eq!(status(&got), want, "{name}");
        }
        assert_eq!(Status::JwtAudienceNotAllowed.http_status(), 403);
        let o = a.authenticate(&HeaderMap::new(), None);
        assert_eq!(status(&o), Ok(None), "no token passes");
    }

    #[test]
    fn a_token_is_tried_against_every_rule_of_its_issuer() {
        let (a, _) = authn(vec![rule(&["one"], false), rule(&["two"], false)]);
        let t = good(json!({"iss": ISS, "sub": "bob", "aud": "two"}));
        assert_eq!(
            status(&a.authenticate(&bearer(&t), None)),
            Ok(Some("https://issuer.example/bob"))
        );
        let t = good(json!({"iss": ISS, "sub": "bob", "aud": "three"}));
        assert_eq!(
            status(&a.authenticate(&bearer(&t), None)),
            Err(Status::JwtAudienceNotAllowed)
        );
    }

    #[test]
    fn outputs_and_token_removal() {
        let (a, _) = authn(vec![rule(&[], false)]);
        let t = good(json!({"iss": ISS, "sub": "carol", "org": {"id": 7}}));
        let mut h = bearer(&t);
        h.insert("x-jwt-sub", HeaderValue::from_static("spoofed"));
        let Outcome::Pass { edits, .. } = a.authenticate(&h, None) else {
            panic!("passes");
        };
        assert!(edits
            .remove_headers
            .contains(&HeaderName::from_static("x-jwt-sub")));
        assert!(edits.remove_headers.contains(&http::header::AUTHORIZATION));
        let added: Vec<(&str, &str)> = edits
            .add_headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.to_str().unwrap_or("")))
            .collect();
        let payload = t.split('.').nth(1).unwrap_or_default();
        assert_eq!(
            added,
            [
                ("x-jwt-payload", payload),
                ("x-jwt-sub", "carol"),
                ("x-org", "7")
            ]
        );
        // From a parameter: the parameter goes; forwarded tokens stay.
        let Outcome::Pass { edits, .. } =
            a.authenticate(&HeaderMap::new(), Some(&format!("access_token={t}&q=1")))
        else {
            panic!("passes");
        };
        assert_eq!(edits.remove_params, ["access_token"]);
        let (a, _) = authn(vec![rule(&[], true)]);
        let Outcome::Pass { edits, .. } = a.authenticate(&bearer(&t), None) else {
            panic!("passes");
        };
        assert!(!edits.remove_headers.contains(&http::header::AUTHORIZATION));
    }

    #[test]
    fn a_reused_token_pays_the_signature_once_and_never_outlives_exp() {
        let (a, clock) = authn(vec![rule(&[], false)]);
        let t = good(json!({"iss": ISS, "sub": "dave", "exp": NOW + 100}));
        for _ in 0..5 {
            assert!(status(&a.authenticate(&bearer(&t), None)).is_ok());
        }
        assert_eq!(Stats::get(&a.stats.verifications), 1);
        assert_eq!(Stats::get(&a.stats.cache_hits), 4);
        clock.set(NOW + 161);
        assert_eq!(
            status(&a.authenticate(&bearer(&t), None)),
            Err(Status::JwtExpired)
        );
        assert_eq!(Stats::get(&a.stats.cache_hits), 4);
    }

    #[test]
    fn every_token_must_be_valid() {
        let (a, _) = authn(vec![rule(&[], false)]);
        let ok = good(json!({"iss": ISS, "sub": "erin"}));
        let bad = sign(json!({"iss": ISS, "sub": "erin"}), "k1", b"guess");
        let o = a.authenticate(&bearer(&ok), Some(&format!("access_token={bad}")));
        assert_eq!(status(&o), Err(Status::JwtVerificationFail));
    }

    #[test]
    fn remote_keys_not_fetched_fail_their_issuer_only() {
        let remote = Arc::new(RemoteKeys::new(
            "https://keys".into(),
            Duration::from_secs(5),
        ));
        let r = Rule::new(
            ISS.into(),
            &[],
            Keys::Remote(remote.clone()),
            &RulePlaces::default(),
            false,
            None,
            Vec::new(),
            16,
        );
        let (a, _) = authn(vec![r]);
        let t = good(json!({"iss": ISS, "sub": "f"}));
        assert_eq!(
            status(&a.authenticate(&bearer(&t), None)),
            Err(Status::JwksFetchFail)
        );
        assert_eq!(status(&a.authenticate(&HeaderMap::new(), None)), Ok(None));
        let text = format!(
            r#"{{"keys":[{{"kty":"oct","kid":"k1","k":"{}"}}]}}"#,
            URL_SAFE_NO_PAD.encode(b"secret")
        );
        remote
            .keys
            .store(Some(Arc::new(Jwks::parse(&text).expect("jwks"))));
        assert!(status(&a.authenticate(&bearer(&t), None)).is_ok());
    }
}
