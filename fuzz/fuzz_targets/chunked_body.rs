//! The chunked decoder on arbitrary bytes, fed in pieces of a size the input chooses: never
//! panics, and the outcome (body, what is left after it, incomplete with the body so far, or
//! the error) is exactly the same as when the bytes come in one read.
#![no_main]

use libfuzzer_sys::fuzz_target;
use warden_http1::response_read::{decode_chunked_in_reads, ChunkedOutcome};

fuzz_target!(|data: &[u8]| {
    let Some((&piece, wire)) = data.split_first() else {
        return;
    };
    let whole = decode_chunked_in_reads(wire, wire.len());
    let pieces = decode_chunked_in_reads(wire, usize::from(piece % 16) + 1);
    assert_eq!(whole, pieces, "read size changed the outcome");
    if let ChunkedOutcome::Body { body, .. } = &whole {
        assert!(body.len() <= wire.len());
    }
});
