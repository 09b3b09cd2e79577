//! Headers a gateway adds or strips on the way through: hop-by-hop removal, `x-forwarded-for`,
//! `x-forwarded-proto`, `x-request-id`, `x-envoy-external-address`, and what becomes of a
//! request's `x-forwarded-client-cert` (Envoy's `forward_client_cert_details`).

use http::header::Entry;
use http::header::{self, HeaderName};
use http::{HeaderMap, HeaderValue};
use std::io::Write;
use std::net::IpAddr;
use warden_config::proxy_config::ForwardClientCertDetails;
use warden_trace::hex::uuid_v4;

pub static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
pub static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
pub static X_ENVOY_EXTERNAL_ADDRESS: HeaderName =
    HeaderName::from_static("x-envoy-external-address");
pub static X_FORWARDED_CLIENT_CERT: HeaderName = HeaderName::from_static("x-forwarded-client-cert");
/// How many headers the forwarding adds at most (the five above): room a request's map is
/// given up front, so that proxying does not regrow it.
pub const ADDED: usize = 5;
static KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
static PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// Remove connection-specific headers (RFC 9110 §7.6.1), including those named by
/// `Connection`.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // One pass over the few names a message has finds which of the six are there; only those
    // are looked up again. Most upstream responses carry just `connection: keep-alive`.
    let mut present = 0u8;
    for name in headers.keys() {
        present |= hop_by_hop_bit(name.as_str().as_bytes());
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

/// Whether a lowercase header name is one of the hop-by-hop headers [`strip_hop_by_hop`]
/// always removes.
pub fn is_hop_by_hop(name: &[u8]) -> bool {
    hop_by_hop_bit(name) != 0
}

const CONNECTION_BIT: u8 = 1;
const KEEP_ALIVE_BIT: u8 = 2;
const PROXY_CONNECTION_BIT: u8 = 4;
const TRANSFER_ENCODING_BIT: u8 = 8;
const UPGRADE_BIT: u8 = 16;
const TE_BIT: u8 = 32;

/// A lowercase name's bit among the six hop-by-hop headers; 0 for any other name. The one
/// list of them, for header maps and for lines kept as read.
fn hop_by_hop_bit(name: &[u8]) -> u8 {
    match name {
        b"connection" => CONNECTION_BIT,
        b"keep-alive" => KEEP_ALIVE_BIT,
        b"proxy-connection" => PROXY_CONNECTION_BIT,
        b"transfer-encoding" => TRANSFER_ENCODING_BIT,
        b"upgrade" => UPGRADE_BIT,
        b"te" => TE_BIT,
        _ => 0,
    }
}

/// The peer address rendered once per connection, for `x-forwarded-for`.
pub fn ip_header_value(ip: IpAddr) -> HeaderValue {
    HeaderValue::from_str(&ip.to_string()).unwrap_or_else(|_| HeaderValue::from_static("unknown"))
}

/// The forwarding headers of one request, gateway semantics (`use_remote_address: true`):
/// `x-forwarded-for` with the peer appended, `x-forwarded-proto`, `x-request-id` when the
/// request has none, `x-envoy-external-address`.
///
/// Added to the request's map by [`Forwarding::apply`] when something else edits the headers
/// after them (route or cluster header operations, an RLS's headers) or hyper's clients send
/// the request; otherwise the lean upstream encoder writes them straight into the request head
/// ([`Forwarding::keeps_line`], [`Forwarding::encode`]), so the map is not grown and four
/// custom names are not hashed per request. Both ways send the same values.
///
/// Small (56 bytes, nothing to drop): it travels inside the request's upstream future, which is
/// moved into a box on every request.
#[derive(Debug, Clone)]
pub struct Forwarding<'a> {
    /// [`ip_header_value`] of the peer, rendered once per connection.
    peer: &'a HeaderValue,
    /// The trusted client address when it is not the peer (only with trusted hops).
    external: Option<IpAddr>,
    /// With trusted hops, a client's `x-forwarded-proto` is kept; an edge proxy overwrites it.
    keep_proto: bool,
    /// Drawn once: every attempt of a retried request carries the same generated id.
    request_id: [u8; 16],
    /// Whether the peer is appended to `x-forwarded-for`: not by a sidecar's outbound side,
    /// whose peer is its own app (Envoy's `use_remote_address: false`).
    append_peer: bool,
    /// Whether `x-envoy-external-address` is set: at the edge only (a gateway).
    edge: bool,
    /// The downstream connection is TLS: `x-forwarded-proto: https`.
    https: bool,
    /// What becomes of the request's `x-forwarded-client-cert`.
    xfcc: XfccStep,
    /// This hop's element for [`XfccStep::Set`] / [`XfccStep::Append`], built once per
    /// connection at its handshake (`warden_tls::xfcc`).
    xfcc_element: Option<&'a HeaderValue>,
    /// The trace context sent upstream (tracing configured): its lines replace the request's.
    trace: Option<(
        &'a crate::core::traces::RequestTrace,
        warden_trace::Propagation,
    )>,
}

/// What a request's `x-forwarded-client-cert` becomes, decided by
/// [`Forwarding::client_cert`] as Envoy's `mutateXfccRequestHeader` decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum XfccStep {
    /// Sent on as the client sent it (or not at all).
    Keep,
    /// Never sent on.
    Remove,
    /// Replaced by this hop's element.
    Set,
    /// This hop's element appended after the client's, `,` between.
    Append,
}

/// Which forwarding headers the request brought, as [`Forwarding::keeps_line`] saw them.
#[derive(Debug, Default)]
pub struct SeenForwarding {
    xff: bool,
    proto: bool,
    request_id: bool,
    xfcc: bool,
}

impl<'a> Forwarding<'a> {
    /// `peer_value` is [`ip_header_value`] of `peer`; `client` the trusted client address.
    pub fn new(
        peer: IpAddr,
        peer_value: &'a HeaderValue,
        client: IpAddr,
        num_trusted_proxies: u32,
    ) -> Self {
        Forwarding {
            peer: peer_value,
            external: (client != peer).then_some(client),
            keep_proto: num_trusted_proxies > 0,
            request_id: fastrand::u128(..).to_le_bytes(),
            append_peer: true,
            edge: true,
            https: false,
            // Envoy's default (`forward_client_cert_details` unset) is SANITIZE.
            xfcc: XfccStep::Remove,
            xfcc_element: None,
            trace: None,
        }
    }

    /// Send `trace`'s context upstream in `propagation`'s format, in place of the request's.
    pub fn with_trace(
        mut self,
        trace: &'a crate::core::traces::RequestTrace,
        propagation: warden_trace::Propagation,
    ) -> Self {
        self.trace = Some((trace, propagation));
        self
    }

    /// The `x-request-id` a request without one gets: this one (the access log's).
    pub fn with_request_id(mut self, random: [u8; 16]) -> Self {
        self.request_id = random;
        self
    }

    /// What becomes of the request's `x-forwarded-client-cert` under `mode` (Envoy's
    /// `forward_client_cert_details` of the same name), `mutual` when the client presented a
    /// certificate on this connection, `element` this hop's (for APPEND_FORWARD and
    /// SANITIZE_SET). Without a client certificate only ALWAYS_FORWARD_ONLY keeps a client's
    /// header: anything else would let a client speak for a certificate it does not hold.
    pub fn client_cert(
        mut self,
        mode: ForwardClientCertDetails,
        mutual: bool,
        element: Option<&'a HeaderValue>,
    ) -> Self {
        use ForwardClientCertDetails as M;
        self.xfcc = match mode {
            M::AlwaysForwardOnly => XfccStep::Keep,
            _ if !mutual => XfccStep::Remove,
            M::Sanitize | M::Undefined => XfccStep::Remove,
            M::ForwardOnly => XfccStep::Keep,
            // The element is built for every certificate that parses (rustls verified it) and
            // fits a header value. Without one the client's header goes too: the next hop
            // takes the last element for the direct peer's, which a client must not write.
            M::AppendForward if element.is_some() => XfccStep::Append,
            M::SanitizeSet if element.is_some() => XfccStep::Set,
            M::AppendForward | M::SanitizeSet => XfccStep::Remove,
        };
        self.xfcc_element = element;
        self
    }

    /// The headers as the proxy on `side` of a connection adds them: a gateway adds all of
    /// them; a sidecar's inbound side appends the caller to `x-forwarded-for`; its outbound
    /// side only sets `x-forwarded-proto` and `x-request-id`.
    pub fn on_side(mut self, side: crate::core::destination::Side) -> Self {
        use crate::core::destination::Side;
        self.edge = side == Side::Gateway;
        self.append_peer = side != Side::Outbound;
        self
    }

    /// The request came over TLS (`x-forwarded-proto: https`).
    pub fn over_tls(mut self, tls: bool) -> Self {
        self.https = tls;
        self
    }

    fn proto(&self) -> &'static str {
        if self.https {
            "https"
        } else {
            "http"
        }
    }

    /// Add the headers to `headers`.
    pub fn apply(&self, headers: &mut HeaderMap) {
        if let Some((trace, propagation)) = self.trace {
            trace.inject(propagation, headers);
        }
        if self.append_peer {
            self.append_xff(headers);
        }
        if !self.keep_proto || !headers.contains_key(&X_FORWARDED_PROTO) {
            headers.insert(
                X_FORWARDED_PROTO.clone(),
                HeaderValue::from_static(self.proto()),
            );
        }
        self.apply_xfcc(headers);
        headers.entry(X_REQUEST_ID.clone()).or_insert_with(|| {
            HeaderValue::from_bytes(&uuid_v4(self.request_id))
                .unwrap_or_else(|_| HeaderValue::from_static("0"))
        });
        if !self.edge {
            return;
        }
        let external = match self.external {
            None => Some(self.peer.clone()),
            Some(client) => HeaderValue::from_str(&client.to_string()).ok(),
        };
        if let Some(external) = external {
            headers.insert(X_ENVOY_EXTERNAL_ADDRESS.clone(), external);
        }
    }

    fn apply_xfcc(&self, headers: &mut HeaderMap) {
        match (self.xfcc, self.xfcc_element) {
            (XfccStep::Keep, _) => {}
            (XfccStep::Set, Some(element)) => {
                headers.insert(X_FORWARDED_CLIENT_CERT.clone(), element.clone());
            }
            (XfccStep::Append, Some(element)) => {
                let mut joined = Vec::new();
                for value in headers.get_all(&X_FORWARDED_CLIENT_CERT) {
                    if !value.is_empty() {
                        joined.extend_from_slice(value.as_bytes());
                        joined.push(b',');
                    }
                }
                let value = if joined.is_empty() {
                    Some(element.clone())
                } else {
                    joined.extend_from_slice(element.as_bytes());
                    HeaderValue::from_bytes(&joined).ok()
                };
                match value {
                    Some(v) => {
                        headers.insert(X_FORWARDED_CLIENT_CERT.clone(), v);
                    }
                    None => {
                        headers.remove(&X_FORWARDED_CLIENT_CERT);
                    }
                }
            }
            // A plaintext request that carries none: one lookup, nothing allocated.
            (XfccStep::Remove | XfccStep::Set | XfccStep::Append, _) => {
                headers.remove(&X_FORWARDED_CLIENT_CERT);
            }
        }
    }

    fn append_xff(&self, headers: &mut HeaderMap) {
        if let Some(xff) = xff_with_peer(headers, self.peer) {
            headers.insert(X_FORWARDED_FOR.clone(), xff);
        }
    }

    /// Whether the encoder writes one of the request's own lines as it is; the ones it leaves
    /// out are replaced by [`Self::encode`].
    /// `name` is lowercase, as a map holds it.
    pub fn keeps_line(&self, name: &[u8], seen: &mut SeenForwarding) -> bool {
        if let Some((_, propagation)) = self.trace {
            if crate::core::traces::replaces_line(propagation, name) {
                return false;
            }
        }
        if name == X_FORWARDED_FOR.as_str().as_bytes() {
            seen.xff = true;
            !self.append_peer
        } else if name == X_FORWARDED_PROTO.as_str().as_bytes() {
            seen.proto = true;
            self.keep_proto
        } else if name == X_REQUEST_ID.as_str().as_bytes() {
            seen.request_id = true;
            true
        } else if name == X_FORWARDED_CLIENT_CERT.as_str().as_bytes() {
            seen.xfcc = true;
            self.xfcc == XfccStep::Keep
        } else {
            !self.edge || name != X_ENVOY_EXTERNAL_ADDRESS.as_str().as_bytes()
        }
    }

    /// Write the header lines [`Self::apply`] would have added or replaced, after the
    /// request's own lines were written through [`Self::keeps_line`]; `xff` and `xfcc` are the
    /// values of the request's own `x-forwarded-for` and `x-forwarded-client-cert` lines
    /// (read only when they are needed).
    pub fn encode<'x, 'y>(
        &self,
        out: &mut Vec<u8>,
        xff: impl Iterator<Item = &'x [u8]>,
        xfcc: impl Iterator<Item = &'y [u8]>,
        seen: &SeenForwarding,
    ) {
        if self.append_peer {
            out.extend_from_slice(b"x-forwarded-for: ");
            if seen.xff {
                for value in xff {
                    if !value.is_empty() {
                        out.extend_from_slice(value);
                        out.extend_from_slice(b", ");
                    }
                }
            }
            out.extend_from_slice(self.peer.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        if !(self.keep_proto && seen.proto) {
            out.extend_from_slice(b"x-forwarded-proto: ");
            out.extend_from_slice(self.proto().as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        if let (XfccStep::Set | XfccStep::Append, Some(element)) = (self.xfcc, self.xfcc_element) {
            out.extend_from_slice(b"x-forwarded-client-cert: ");
            if self.xfcc == XfccStep::Append && seen.xfcc {
                for value in xfcc {
                    if !value.is_empty() {
                        out.extend_from_slice(value);
                        out.push(b',');
                    }
                }
            }
            out.extend_from_slice(element.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        if let Some((trace, propagation)) = self.trace {
            trace.encode(propagation, out);
        }
        if !seen.request_id {
            // The line made whole, then one copy into the head.
            const NAME: &[u8; 14] = b"x-request-id: ";
            let mut line = [0u8; 14 + 36 + 2];
            line[..14].copy_from_slice(NAME);
            line[14..50].copy_from_slice(&uuid_v4(self.request_id));
            line[50..].copy_from_slice(b"\r\n");
            out.extend_from_slice(&line);
        }
        if !self.edge {
            return;
        }
        out.extend_from_slice(b"x-envoy-external-address: ");
        match self.external {
            None => out.extend_from_slice(self.peer.as_bytes()),
            // Writing into a Vec cannot fail.
            Some(client) => {
                let _ = write!(out, "{client}");
            }
        }
        out.extend_from_slice(b"\r\n");
    }
}

/// The request's `x-forwarded-for` with `peer` appended, as one header (several XFF headers
/// form one list): what a gateway or a sidecar's inbound side sends upstream.
pub fn xff_with_peer(headers: &HeaderMap, peer: &HeaderValue) -> Option<HeaderValue> {
    let mut incoming = headers
        .get_all(&X_FORWARDED_FOR)
        .iter()
        .filter(|v| !v.is_empty());
    match (incoming.next(), incoming.next()) {
        (None, _) => Some(peer.clone()),
        (Some(first), rest) => {
            let mut v = Vec::with_capacity(first.len() + 2 + peer.len());
            v.extend_from_slice(first.as_bytes());
            for more in rest.into_iter().chain(incoming) {
                v.extend_from_slice(b", ");
                v.extend_from_slice(more.as_bytes());
            }
            v.extend_from_slice(b", ");
            v.extend_from_slice(peer.as_bytes());
            HeaderValue::from_bytes(&v).ok()
        }
    }
}

/// The `x-request-id` [`Forwarding::with_request_id`] writes for `random`.
pub fn request_id_string(random: [u8; 16]) -> String {
    let mut out = String::with_capacity(36);
    push_request_id(random, &mut out);
    out
}

/// [`request_id_string`] appended to `out`.
pub fn push_request_id(random: [u8; 16], out: &mut String) {
    // Digits and hyphens: always UTF-8.
    if let Ok(text) = std::str::from_utf8(&uuid_v4(random)) {
        out.push_str(text);
    }
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
        Forwarding::new(peer, &ip_header_value(peer), peer, 0).apply(&mut h);
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
        Forwarding::new(peer, &ip_header_value(peer), client, 1).apply(&mut h);
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
        Forwarding::new(peer, &ip_header_value(peer), peer, 0).apply(&mut h);
        assert_eq!(h.get_all(&X_FORWARDED_FOR).iter().count(), 1);
        assert_eq!(h[&X_FORWARDED_FOR], "1.1.1.1, 2.2.2.2, 3.3.3.3, 10.0.0.9");
    }

    const MODES: [ForwardClientCertDetails; 5] = [
        ForwardClientCertDetails::Sanitize,
        ForwardClientCertDetails::ForwardOnly,
        ForwardClientCertDetails::AppendForward,
        ForwardClientCertDetails::SanitizeSet,
        ForwardClientCertDetails::AlwaysForwardOnly,
    ];

    #[test]
    fn xfcc_per_mode_as_envoy() {
        use ForwardClientCertDetails as M;
        let peer: IpAddr = "10.0.0.9".parse().unwrap();
        let peer_value = ip_header_value(peer);
        let element = HeaderValue::from_static("By=b;Hash=h;URI=u");
        let xfcc = |mode, mutual, sent: &[&'static str]| {
            let mut h = HeaderMap::new();
            for v in sent {
                h.append(&X_FORWARDED_CLIENT_CERT, HeaderValue::from_static(v));
            }
            Forwarding::new(peer, &peer_value, peer, 0)
                .client_cert(mode, mutual, Some(&element))
                .apply(&mut h);
            let values: Vec<String> = h
                .get_all(&X_FORWARDED_CLIENT_CERT)
                .iter()
                .map(|v| v.to_str().unwrap().to_owned())
                .collect();
            values
        };
        let forged: &[&str] = &["By=x;URI=forged"];
        // Without a client certificate only ALWAYS_FORWARD_ONLY lets a client's header by.
        for mode in MODES {
            let kept = mode == M::AlwaysForwardOnly;
            assert_eq!(
                xfcc(mode, false, forged).len(),
                usize::from(kept),
                "{mode:?}"
            );
        }
        assert!(xfcc(M::Sanitize, true, forged).is_empty());
        assert_eq!(xfcc(M::ForwardOnly, true, forged), ["By=x;URI=forged"]);
        assert_eq!(xfcc(M::SanitizeSet, true, forged), ["By=b;Hash=h;URI=u"]);
        assert_eq!(xfcc(M::SanitizeSet, true, &[]), ["By=b;Hash=h;URI=u"]);
        assert_eq!(
            xfcc(M::AppendForward, true, &["a", "b"]),
            ["a,b,By=b;Hash=h;URI=u"]
        );
        assert_eq!(xfcc(M::AppendForward, true, &[]), ["By=b;Hash=h;URI=u"]);
        // No element (a certificate whose details fit no header value): the client's goes too.
        for mode in [M::AppendForward, M::SanitizeSet] {
            let mut h = HeaderMap::new();
            h.insert(&X_FORWARDED_CLIENT_CERT, HeaderValue::from_static("forged"));
            Forwarding::new(peer, &peer_value, peer, 0)
                .client_cert(mode, true, None)
                .apply(&mut h);
            assert!(!h.contains_key(&X_FORWARDED_CLIENT_CERT), "{mode:?}");
        }
        // The default (Envoy's unset: SANITIZE) removes it.
        let mut h = HeaderMap::new();
        h.insert(&X_FORWARDED_CLIENT_CERT, HeaderValue::from_static("forged"));
        Forwarding::new(peer, &peer_value, peer, 0).apply(&mut h);
        assert!(!h.contains_key(&X_FORWARDED_CLIENT_CERT));
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
    fn request_ids_differ_between_requests_not_between_attempts() {
        let peer: IpAddr = "10.0.0.9".parse().unwrap();
        let id = |f: &Forwarding| {
            let mut h = HeaderMap::new();
            f.apply(&mut h);
            h[&X_REQUEST_ID].clone()
        };
        let peer_value = ip_header_value(peer);
        let one = Forwarding::new(peer, &peer_value, peer, 0);
        let other = Forwarding::new(peer, &peer_value, peer, 0);
        assert_ne!(id(&one), id(&other));
        assert_eq!(id(&one), id(&one));
        assert_eq!(id(&one), encoded(&one, &HeaderMap::new())[&X_REQUEST_ID]);
    }

    #[test]
    fn request_ids_are_the_uuid_crates_v4_text() {
        let mut rng = fastrand::Rng::with_seed(41);
        for _ in 0..1000 {
            let random = rng.u128(..).to_le_bytes();
            let want = uuid::Builder::from_random_bytes(random)
                .into_uuid()
                .hyphenated()
                .to_string();
            assert_eq!(request_id_string(random), want);
            let mut h = HeaderMap::new();
            let peer: IpAddr = "10.0.0.9".parse().unwrap();
            let peer_value = ip_header_value(peer);
            let f = Forwarding::new(peer, &peer_value, peer, 0).with_request_id(random);
            f.apply(&mut h);
            assert_eq!(h[&X_REQUEST_ID], want.as_str());
            assert_eq!(encoded(&f, &HeaderMap::new())[&X_REQUEST_ID], want.as_str());
        }
    }

    /// The lines `keeps_line` and `encode` write for `headers`, read back into a map.
    fn encoded(f: &Forwarding, headers: &HeaderMap) -> HeaderMap {
        let mut out = Vec::new();
        let mut seen = SeenForwarding::default();
        for (name, value) in headers {
            if f.keeps_line(name.as_str().as_bytes(), &mut seen) {
                out.extend_from_slice(name.as_str().as_bytes());
                out.extend_from_slice(b": ");
                out.extend_from_slice(value.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
        }
        let xff = headers.get_all(&X_FORWARDED_FOR).iter();
        let xfcc = headers.get_all(&X_FORWARDED_CLIENT_CERT).iter();
        f.encode(
            &mut out,
            xff.map(HeaderValue::as_bytes),
            xfcc.map(HeaderValue::as_bytes),
            &seen,
        );
        let text = String::from_utf8(out).unwrap();
        let mut read = HeaderMap::new();
        for line in text.lines() {
            let (name, value) = line.split_once(": ").unwrap();
            read.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        read
    }

    #[test]
    fn encoding_into_the_head_sends_what_apply_adds() {
        let peer: IpAddr = "10.0.0.9".parse().unwrap();
        let client: IpAddr = "1.2.3.4".parse().unwrap();
        let requests: [&[(&str, &str)]; 7] = [
            &[(
                "x-forwarded-client-cert",
                "By=forged;URI=spiffe://td/ns/x/sa/admin",
            )],
            &[
                ("x-forwarded-client-cert", "Hash=1"),
                ("x-other", "1"),
                ("x-forwarded-client-cert", ""),
                ("x-forwarded-client-cert", "Hash=2"),
            ],
            &[("host", "a")],
            &[
                ("x-forwarded-for", "1.1.1.1"),
                ("x-forwarded-proto", "https"),
            ],
            &[
                ("x-forwarded-for", ""),
                ("x-forwarded-for", "2.2.2.2, 3.3.3.3"),
                ("x-forwarded-for", "4.4.4.4"),
            ],
            &[
                ("x-request-id", "abc"),
                ("x-envoy-external-address", "6.6.6.6"),
            ],
            &[("x-forwarded-for", ""), ("x-other", "1")],
        ];
        for lines in requests {
            let mut headers = HeaderMap::new();
            for (name, value) in lines {
                headers.append(
                    HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    HeaderValue::from_static(value),
                );
            }
            for (client, hops) in [(peer, 0), (client, 1), (peer, 2)] {
                let peer_value = ip_header_value(peer);
                let f = Forwarding::new(peer, &peer_value, client, hops);
                let mut applied = headers.clone();
                f.apply(&mut applied);
                assert_eq!(encoded(&f, &headers), applied, "{lines:?} hops {hops}");
            }
            let peer_value = ip_header_value(peer);
            let element = HeaderValue::from_static("By=spiffe://td/ns/a/sa/b;Hash=00");
            for mode in MODES {
                for mutual in [false, true] {
                    let f = Forwarding::new(peer, &peer_value, peer, 0).client_cert(
                        mode,
                        mutual,
                        Some(&element),
                    );
                    let mut applied = headers.clone();
                    f.apply(&mut applied);
                    assert_eq!(
                        encoded(&f, &headers),
                        applied,
                        "{lines:?} {mode:?} {mutual}"
                    );
                }
            }
        }
    }
}
