//! The debug listener's ban endpoints (warden extension, beside the reference's `/rlconfig`):
//! - `GET /bans`: the bans in force, as JSON (`{"bans": [{key, domain, descriptor, rule,
//!   strikes, until, until_unix_ms, remaining_seconds}]}`), soonest to end first;
//! - `DELETE /bans?key=<key>`: lifts one ban and forgets its strikes (404 when there is none);
//! - `GET /bans/authorizationpolicy[?name=&namespace=]`: the banned remote addresses as an
//!   Istio AuthorizationPolicy DENY (YAML).

use super::http::{json, text, HttpCtx, Reply};
use crate::ban::authorization_policy::{self, PolicyTarget};
use http::{Method, Request, StatusCode};
use hyper::body::Incoming;
use percent_encoding::percent_decode_str;

/// The decoded value of `name` in the query string.
fn query_param(req: &Request<Incoming>, name: &str) -> Option<String> {
    req.uri().query()?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let k = percent_decode_str(k).decode_utf8().ok()?;
        (k == name).then(|| {
            percent_decode_str(&v.replace('+', " "))
                .decode_utf8_lossy()
                .into_owned()
        })
    })
}

fn store_error(e: impl std::fmt::Display) -> Reply {
    text(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("cannot read the bans from the store: {e}\n"),
    )
}

pub(crate) async fn handle(req: Request<Incoming>, ctx: &HttpCtx) -> Reply {
    match *req.method() {
        Method::GET => match ctx.limiter.bans().await {
            Ok(mut bans) => {
                bans.sort_by_key(|b| (b.state.until_ms, b.key.clone()));
                let now = ctx.limiter.now_millis();
                let list: Vec<_> = bans.iter().map(|b| b.to_json(now)).collect();
                json(
                    StatusCode::OK,
                    serde_json::json!({ "bans": list }).to_string(),
                )
            }
            Err(e) => store_error(e),
        },
        Method::DELETE => {
            let Some(key) = query_param(&req, "key").filter(|k| !k.is_empty()) else {
                return text(
                    StatusCode::BAD_REQUEST,
                    "DELETE /bans needs ?key=<key> (the key GET /bans lists)\n",
                );
            };
            match ctx.limiter.lift_ban(&key).await {
                Ok(true) => {
                    tracing::warn!(key = %key, "ban lifted on the debug port");
                    text(StatusCode::OK, format!("lifted {key}\n"))
                }
                Ok(false) => text(StatusCode::NOT_FOUND, format!("no ban with key {key}\n")),
                Err(e) => store_error(e),
            }
        }
        _ => text(
            StatusCode::METHOD_NOT_ALLOWED,
            "GET lists the bans, DELETE ?key= lifts one\n",
        ),
    }
}

pub(crate) async fn authorization_policy(req: Request<Incoming>, ctx: &HttpCtx) -> Reply {
    let defaults = PolicyTarget::default();
    let target = PolicyTarget {
        name: query_param(&req, "name").unwrap_or(defaults.name),
        namespace: query_param(&req, "namespace").unwrap_or(defaults.namespace),
    };
    match ctx.limiter.bans().await {
        Ok(bans) => {
            let blocks = authorization_policy::remote_ip_blocks(&bans);
            let mut reply = text(
                StatusCode::OK,
                authorization_policy::render(&target, &blocks),
            );
            reply.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/yaml"),
            );
            reply
        }
        Err(e) => store_error(e),
    }
}
