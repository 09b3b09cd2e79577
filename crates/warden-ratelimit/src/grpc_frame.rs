//! gRPC's message framing over HTTP/2 (a 5-byte prefix: compressed flag, big-endian length),
//! for the unary calls of [`grpc_client`](crate::grpc_client) and of the service's
//! ShouldRateLimit handler. Only uncompressed messages: none of the peers offers compression.

use bytes::{BufMut, Bytes, BytesMut};
use http::HeaderName;
use prost::Message;
use tonic::Status;

/// Compressed flag (1 byte) and message length (4 bytes, big-endian) before each message.
const PREFIX: usize = 5;
/// A larger message is refused, as tonic's default decoding limit does.
pub const MAX_MESSAGE: usize = 4 * 1024 * 1024;
pub const NO_MESSAGE: &str = "no gRPC message";
/// The status trailers. Names, not strings: a `&str` key is parsed and validated again on
/// every lookup or insert.
pub const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
pub const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");

/// `message` behind its prefix, in one buffer.
pub fn encode(message: &impl Message) -> Bytes {
    let len = message.encoded_len();
    let mut buf = BytesMut::with_capacity(PREFIX + len);
    buf.put_u8(0);
    buf.put_u32(u32::try_from(len).unwrap_or(u32::MAX));
    // Cannot fail: the buffer was sized by `encoded_len`.
    let _ = message.encode(&mut buf);
    buf.freeze()
}

/// A unary call's body as its DATA frames arrive: usually one, so no copy.
#[derive(Default)]
pub enum MessageBuf {
    #[default]
    Empty,
    One(Bytes),
    Joined(BytesMut),
}

impl MessageBuf {
    pub fn push(&mut self, chunk: Bytes) -> Result<(), Status> {
        *self = match std::mem::take(self) {
            MessageBuf::Empty => MessageBuf::One(chunk),
            MessageBuf::One(first) => {
                let mut joined = BytesMut::with_capacity(first.len() + chunk.len());
                joined.extend_from_slice(&first);
                joined.extend_from_slice(&chunk);
                MessageBuf::Joined(joined)
            }
            MessageBuf::Joined(mut joined) => {
                joined.extend_from_slice(&chunk);
                MessageBuf::Joined(joined)
            }
        };
        if self.bytes().len() > PREFIX + MAX_MESSAGE {
            return Err(Status::resource_exhausted(format!(
                "gRPC message larger than {MAX_MESSAGE} bytes"
            )));
        }
        Ok(())
    }

    fn bytes(&self) -> &[u8] {
        match self {
            MessageBuf::Empty => &[],
            MessageBuf::One(b) => b,
            MessageBuf::Joined(b) => b,
        }
    }

    /// The body's one message.
    pub fn decode<M: Message + Default>(&self) -> Result<M, Status> {
        let Some((prefix, rest)) = self.bytes().split_first_chunk::<PREFIX>() else {
            return Err(Status::internal(NO_MESSAGE));
        };
        if prefix[0] != 0 {
            return Err(Status::internal(
                "compressed gRPC message (no compression was negotiated)",
            ));
        }
        let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
        if rest.len() != len {
            return Err(Status::internal(format!(
                "gRPC message is {} bytes, its prefix says {len}",
                rest.len()
            )));
        }
        M::decode(rest).map_err(|e| Status::internal(format!("invalid gRPC message: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

    #[test]
    fn round_trip_in_any_number_of_pieces() {
        let request = RateLimitRequest {
            domain: "d".into(),
            hits_addend: 3,
            ..Default::default()
        };
        let framed = encode(&request);
        for piece in [1, 2, 5, 1000] {
            let mut buf = MessageBuf::default();
            for chunk in framed.chunks(piece) {
                buf.push(Bytes::copy_from_slice(chunk)).unwrap();
            }
            assert_eq!(
                buf.decode::<RateLimitRequest>().unwrap(),
                request,
                "{piece}"
            );
        }
    }

    #[test]
    fn bad_frames_are_errors() {
        let decode = |bytes: &'static [u8]| {
            let mut buf = MessageBuf::default();
            buf.push(Bytes::from_static(bytes)).unwrap();
            buf.decode::<RateLimitRequest>()
                .unwrap_err()
                .message()
                .to_string()
        };
        assert_eq!(decode(b""), NO_MESSAGE);
        assert!(decode(b"\x01\0\0\0\0").contains("compressed"));
        assert!(decode(b"\0\0\0\0\x09ab").contains("prefix says 9"));
        assert!(decode(b"\0\0\0\0\x02\xff\xff").contains("invalid gRPC message"));
    }
}
