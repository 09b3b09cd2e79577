//! The fast path's request-head parser on arbitrary bytes: never panics, and what it calls a
//! fast request is consistent with the bytes it was read from.
#![no_main]

use libfuzzer_sys::fuzz_target;
use warden_http1::request_head::{header_slots, parse, visible_str, Parsed};

fuzz_target!(|data: &[u8]| {
    let mut slots = header_slots();
    if let Parsed::Fast(request) = parse(data, &mut slots) {
        assert!(request.len <= data.len());
        assert!(request.target.starts_with('/'));
        match request.query {
            Some(query) => assert_eq!(request.target, format!("{}?{query}", request.path)),
            None => assert_eq!(request.target, request.path),
        }
        // The target must make the same `Uri` path and query the fast path split it into.
        let uri: http::Uri = request
            .target
            .parse()
            .expect("a fast target is a valid URI");
        assert_eq!(uri.path(), request.path);
        assert_eq!(uri.query(), request.query);
        for header in request.headers {
            let _ = visible_str(header.value);
        }
    }
});
