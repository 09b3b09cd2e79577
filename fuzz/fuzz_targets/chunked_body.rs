//! The chunked decoder on arbitrary bytes, fed in pieces of a size the input chooses: never
//! panics, and the outcome (body, what is left after it, or the error) does not depend on how
//! the bytes were split into reads.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use warden_http1::response_read::{BodyFraming, BodyReader, BodyStep, ResponseError};

#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Body {
        body: Vec<u8>,
        left: Vec<u8>,
    },
    /// The input ended before the body did.
    Incomplete(Vec<u8>),
    Error(ResponseError),
}

fn decode(wire: &[u8], piece: usize) -> Outcome {
    let mut reader = BodyReader::new(BodyFraming::Chunked);
    let mut buf = BytesMut::new();
    let mut body = Vec::new();
    let mut fed = 0;
    loop {
        match reader.next(&mut buf) {
            Ok(BodyStep::Data(d)) => {
                assert!(!d.is_empty(), "an empty data step could loop forever");
                body.extend_from_slice(&d);
            }
            Ok(BodyStep::Done) => {
                let mut left = buf.to_vec();
                left.extend_from_slice(&wire[fed..]);
                return Outcome::Body { body, left };
            }
            Ok(BodyStep::NeedMore) if fed < wire.len() => {
                let end = (fed + piece).min(wire.len());
                buf.extend_from_slice(&wire[fed..end]);
                fed = end;
            }
            Ok(BodyStep::NeedMore) => {
                assert!(reader.on_eof().is_err());
                return Outcome::Incomplete(body);
            }
            Err(e) => return Outcome::Error(e),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&piece, wire)) = data.split_first() else {
        return;
    };
    let whole = decode(wire, wire.len().max(1));
    let pieces = decode(wire, usize::from(piece % 16) + 1);
    match (&whole, &pieces) {
        // A size line or trailer section cut by a read may only be judged once it is whole, so
        // an error may come with less body; and httparse calls some prefixes of a malformed
        // trailer section invalid while it calls the whole one partial, so one split may end in
        // an error where another ends incomplete. Both fail the response (an incomplete body is
        // an error at EOF); everything else must agree exactly.
        (Outcome::Error(_), Outcome::Error(_))
        | (Outcome::Error(_), Outcome::Incomplete(_))
        | (Outcome::Incomplete(_), Outcome::Error(_)) => {}
        _ => assert_eq!(whole, pieces, "read size changed the outcome"),
    }
    if let Outcome::Body { body, .. } = &whole {
        assert!(body.len() <= wire.len());
    }
});
