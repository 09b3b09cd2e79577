//! Headers a gateway adds or strips on the way through: hop-by-hop removal, `x-forwarded-for`,
//! `x-forwarded-proto`, `x-request-id`, `x-envoy-external-address`.

use http::header::Entry;
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
    // One pass over the few names a message has finds which of the six are there; only those
    // are looked up again. Most upstream responses carry just `connection: keep-alive`.
    let mut present = 0u8;
    for name in headers.keys() {
        present |= hop_by_hop_bit(name);
    }
    if present == 0 {
        return;
    }
    if present & CONNECTION_BIT != 0 {
        if let Entry::Occupied(entry) = headers.entry(header::CONNECTION) {
            let (_, mut values) = entry.remove_entry_mult();
            // Owned values (a reference count each), so the names they list can be removed;
            // collecting the rest allocates only when there are several `Connection` headers.
            let first = values.next();
            let rest: Vec<HeaderValue> = values.collect();
            for value in first.iter().chain(&rest) {
                for name in value.as_bytes().split(|&b| b == b',') {
                    let name = name.trim_ascii();
                    // Names only: `&str` lookups parse on the stack, nothing is allocated.
                    if let Ok(name) = std::str::from_utf8(name) {
                        if !name.is_empty() {
                            headers.remove(name);
                        }
                    }
                }
            }
        }
    }
    for (bit, name) in [
        (KEEP_ALIVE_BIT, &KEEP_ALIVE),
        (PROXY_CONNECTION_BIT, &PROXY_CONNECTION),
        (TRANSFER_ENCODING_BIT, &header::TRANSFER_ENCODING),
        (UPGRADE_BIT, &header::UPGRADE),
        (TE_BIT, &header::TE),
    ] {
        if present & bit != 0 {
            headers.remove(name);
        }
    }
}

const CONNECTION_BIT: u8 = 1;
const KEEP_ALIVE_BIT: u8 = 2;
const PROXY_CONNECTION_BIT: u8 = 4;
const TRANSFER_ENCODING_BIT: u8 = 8;
const UPGRADE_BIT: u8 = 16;
const TE_BIT: u8 = 32;

fn hop_by_hop_bit(name: &HeaderName) -> u8 {
    if name == header::CONNECTION {
        CONNECTION_BIT
    } else if name == header::TRANSFER_ENCODING {
        TRANSFER_ENCODING_BIT
    } else if name == header::UPGRADE {
        UPGRADE_BIT
    } else if name == header::TE {
        TE_BIT
    } else if name == KEEP_ALIVE {
        KEEP_ALIVE_BIT
    } else if name == PROXY_CONNECTION {
        PROXY_CONNECTION_BIT
    } else {
        0
    }
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
    fn strips_what_every_connection_header_lists() {
        let mut h = HeaderMap::new();
        h.append(header::CONNECTION, HeaderValue::from_static("close"));
        h.append(
            header::CONNECTION,
            HeaderValue::from_static(" X-One ,x-two,,"),
        );
        h.insert("x-one", HeaderValue::from_static("1"));
        h.insert("x-two", HeaderValue::from_static("2"));
        h.insert(header::TE, HeaderValue::from_static("trailers"));
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        h.insert("proxy-connection", HeaderValue::from_static("keep-alive"));
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        h.insert("x-kept", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.keys().collect::<Vec<_>>(), ["x-kept"]);
    }

    #[test]
    fn request_ids_differ() {
        assert_ne!(new_request_id(), new_request_id());
    }
}
