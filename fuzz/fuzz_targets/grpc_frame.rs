//! gRPC message framing as the RLS server (RateLimitRequest) and the proxy's client
//! (RateLimitResponse) decode it, from DATA frames split where the input says: never panics,
//! and the split does not change the result.
#![no_main]

use bytes::Bytes;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use libfuzzer_sys::fuzz_target;
use warden_ratelimit::grpc_frame::MessageBuf;

fn framed(body: &[u8], piece: usize) -> Option<MessageBuf> {
    let mut buf = MessageBuf::default();
    for chunk in body.chunks(piece) {
        buf.push(Bytes::copy_from_slice(chunk)).ok()?;
    }
    Some(buf)
}

fuzz_target!(|data: &[u8]| {
    let Some((&piece, body)) = data.split_first() else {
        return;
    };
    let (Some(whole), Some(pieces)) = (
        framed(body, body.len().max(1)),
        framed(body, usize::from(piece) + 1),
    ) else {
        return;
    };
    let a = whole.decode::<RateLimitRequest>().ok();
    let b = pieces.decode::<RateLimitRequest>().ok();
    assert_eq!(a, b);
    let _ = whole.decode::<RateLimitResponse>();
});
