//! Headers a gateway adds or strips on the way through: hop-by-hop removal, `x-forwarded-for`,
//! `x-forwarded-proto`, `x-request-id`, `x-envoy-external-address`.

use http::header::{self, HeaderName};
use http::{HeaderMap, HeaderValue};
use std::net::IpAddr;

pub static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
pub static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
pub static X_ENVOY_EXTERNAL_ADDRESS: HeaderName =
    HeaderName::from_static("x-envoy-external-address");
static KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
static PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// Remove connection-specific headers (RFC 9110 §7.6.1), including those named by
/// `Connection`.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // One pass over the few names a message has, instead of six hashed lookups on every
    // request and response; the lookups below only run when there is something to remove.
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
    if let Some(conn) = headers.get(header::CONNECTION) {
        let named: Vec<HeaderName> = conn
            .to_str()
            .unwrap_or("")
            .split(',')
            .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
            .collect();
        for n in named {
            headers.remove(n);
        }
        headers.remove(header::CONNECTION);
    }
    for name in [
        &KEEP_ALIVE,
        &PROXY_CONNECTION,
        &header::TRANSFER_ENCODING,
        &header::UPGRADE,
        &header::TE,
    ] {
        if headers.contains_key(name) {
            headers.remove(name);
        }
    }
}

fn is_hop_by_hop(name: &HeaderName) -> bool {
    name == header::CONNECTION
        || name == header::TRANSFER_ENCODING
        || name == header::UPGRADE
        || name == header::TE
        || name == KEEP_ALIVE
        || name == PROXY_CONNECTION
}

/// The peer address rendered once per connection, for `x-forwarded-for`.
pub fn ip_header_value(ip: IpAddr) -> HeaderValue {
    HeaderValue::from_str(&ip.to_string()).unwrap_or_else(|_| HeaderValue::from_static("unknown"))
}

/// Request headers for the upstream, gateway semantics (`use_remote_address: true`).
/// `peer_value` is [`ip_header_value`] of `peer`.
pub fn add_forwarding(
    headers: &mut HeaderMap,
    peer: IpAddr,
    peer_value: &HeaderValue,
    client: IpAddr,
    num_trusted_proxies: u32,
) {
    let mut incoming = headers
        .get_all(&X_FORWARDED_FOR)
        .iter()
        .filter(|v| !v.is_empty());
    let xff = match (incoming.next(), incoming.next()) {
        (None, _) => Some(peer_value.clone()),
        (Some(first), rest) => {
            // Several XFF headers form one list; send one header with the peer appended.
            let mut v = Vec::with_capacity(first.len() + 2 + peer_value.len());
            v.extend_from_slice(first.as_bytes());
            for more in rest.into_iter().chain(incoming) {
                v.extend_from_slice(b", ");
                v.extend_from_slice(more.as_bytes());
            }
            v.extend_from_slice(b", ");
            v.extend_from_slice(peer_value.as_bytes());
            HeaderValue::from_bytes(&v).ok()
        }
    };
    if let Some(xff) = xff {
        headers.insert(X_FORWARDED_FOR.clone(), xff);
    }
    // An edge proxy overwrites what an untrusted client claims.
    if num_trusted_proxies == 0 || !headers.contains_key(&X_FORWARDED_PROTO) {
        headers.insert(X_FORWARDED_PROTO.clone(), HeaderValue::from_static("http"));
    }
    headers
        .entry(X_REQUEST_ID.clone())
        .or_insert_with(new_request_id);
    let external = if client == peer {
        Some(peer_value.clone())
    } else {
        HeaderValue::from_str(&client.to_string()).ok()
    };
    if let Some(v) = external {
        headers.insert(X_ENVOY_EXTERNAL_ADDRESS.clone(), v);
    }
}

/// A random UUID v4, as Envoy generates.
pub fn new_request_id() -> HeaderValue {
    let id = uuid::Builder::from_random_bytes(fastrand::u128(..).to_le_bytes()).into_uuid();
    let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
    let text = id.hyphenated().encode_lower(&mut buf);
    HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static("0"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_peer_to_xff_and_sets_ids() {
        let mut h = HeaderMap::new();
        h.insert(&X_FORWARDED_FOR, HeaderValue::from_static("1.1.1.1"));
        h.insert(&X_FORWARDED_PROTO, HeaderValue::from_static("https"));
        let peer: IpAddr = "10.0.0.9".parse().unwrap();
        add_forwarding(&mut h, peer, &ip_header_value(peer), peer, 0);
        assert_eq!(h[&X_FORWARDED_FOR], "1.1.1.1, 10.0.0.9");
        assert_eq!(h[&X_FORWARDED_PROTO], "http");
        assert_eq!(h[&X_REQUEST_ID].len(), 36);
        assert_eq!(h[&X_ENVOY_EXTERNAL_ADDRESS], "10.0.0.9");
    }

    #[test]
    fn keeps_request_id_and_trusted_proto() {
        let mut h = HeaderMap::new();
        h.insert(&X_REQUEST_ID, HeaderValue::from_static("abc"));
        h.insert(&X_FORWARDED_PROTO, HeaderValue::from_static("https"));
        let peer: IpAddr = "10.0.0.9".parse().unwrap();
        let client: IpAddr = "1.2.3.4".parse().unwrap();
        add_forwarding(&mut h, peer, &ip_header_value(peer), client, 1);
        assert_eq!(h[&X_ENVOY_EXTERNAL_ADDRESS], "1.2.3.4");
        assert_eq!(h[&X_FORWARDED_FOR], "10.0.0.9");
        assert_eq!(h[&X_REQUEST_ID], "abc");
        assert_eq!(h[&X_FORWARDED_PROTO], "https");
    }

    #[test]
    fn several_xff_headers_become_one_list() {
        let mut h = HeaderMap::new();
        h.append(&X_FORWARDED_FOR, HeaderValue::from_static("1.1.1.1"));
        h.append(
            &X_FORWARDED_FOR,
            HeaderValue::from_static("2.2.2.2, 3.3.3.3"),
        );
        let peer: IpAddr = "10.0.0.9".parse().unwrap();
        add_forwarding(&mut h, peer, &ip_header_value(peer), peer, 0);
        assert_eq!(h.get_all(&X_FORWARDED_FOR).iter().count(), 1);
        assert_eq!(h[&X_FORWARDED_FOR], "1.1.1.1, 2.2.2.2, 3.3.3.3, 10.0.0.9");
    }

    #[test]
    fn strips_hop_by_hop_and_connection_listed() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-secret"),
        );
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("x-kept", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("x-kept"));
    }

    #[test]
    fn request_ids_differ() {
        assert_ne!(new_request_id(), new_request_id());
    }
}
