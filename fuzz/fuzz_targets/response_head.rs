//! An upstream's response head and body on arbitrary bytes: never panics, the ranges it hands
//! back lie inside the head, and the body after it is read without overrunning the buffer.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use warden_http1::response_read::{parse_head, BodyReader, BodyStep, ParsedResponse};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, wire)) = data.split_first() else {
        return;
    };
    let head_request = flags & 1 == 1;
    let Ok(ParsedResponse::Head(head)) = parse_head(wire, head_request) else {
        return;
    };
    assert!(head.len <= wire.len());
    assert!(head.reason.end <= head.len);
    for (name, value) in &head.headers {
        assert!(name.start <= name.end && name.end <= head.len);
        assert!(value.start <= value.end && value.end <= head.len);
    }
    let mut reader = BodyReader::new(head.framing);
    let mut buf = BytesMut::from(&wire[head.len..]);
    let mut body = 0usize;
    // Every step consumes input or ends, so the loop is bounded by the input's length.
    for _ in 0..=wire.len() + 2 {
        match reader.next(&mut buf) {
            Ok(BodyStep::Data(d)) => body += d.len(),
            Ok(BodyStep::NeedMore) => {
                let _ = reader.on_eof();
                break;
            }
            Ok(BodyStep::Done) | Err(_) => break,
        }
    }
    assert!(body <= wire.len() - head.len);
});
