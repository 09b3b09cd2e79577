//! A fast request's header lines kept without a map: every line httparse accepted comes back
//! in order, lowercased, and makes the same `HeaderMap` as appending each line would.
#![no_main]

use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use warden_http1::request_head::{header_slots, parse, Parsed};
use warden_http1::request_lines::RequestLines;

fuzz_target!(|data: &[u8]| {
    let mut slots = header_slots();
    let Parsed::Fast(request) = parse(data, &mut slots) else {
        return;
    };
    let lines = RequestLines::new(request.headers).expect("lines of a parsed head fit");
    assert_eq!(lines.iter().count(), request.headers.len());
    let mut expected = HeaderMap::new();
    for ((name, value), header) in lines.iter().zip(request.headers) {
        assert_eq!(name, header.name.to_ascii_lowercase().as_bytes());
        assert_eq!(value, header.value);
        assert!(lines.get(name).is_some());
        expected.append(
            HeaderName::from_bytes(header.name.as_bytes()).expect("httparse admits http's names"),
            HeaderValue::from_bytes(header.value).expect("httparse admits http's values"),
        );
    }
    let mut map = HeaderMap::new();
    lines.read_into(&mut map, 2);
    assert_eq!(map, expected);
});
