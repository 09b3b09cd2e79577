//! What a `Connection` header's tokens say, shared by the request and response parsers.

/// Whether a `Connection` token names a header to drop (anything but `close`, `keep-alive`
/// and an empty list item), which a proxy must strip along with the hop-by-hop headers.
pub(crate) fn names_a_header(token: &[u8]) -> bool {
    let token = token.trim_ascii();
    !token.is_empty()
        && !token.eq_ignore_ascii_case(b"close")
        && !token.eq_ignore_ascii_case(b"keep-alive")
}
