//! Hand-built HTTP/2 frames for abuse probes (rapid reset, GOAWAY codes): what the h2 crate's
//! client will not send, or hides (it reports the write error of a closed connection instead
//! of the GOAWAY that came before it).

use std::io::{self, Read};

/// The client connection preface.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const GOAWAY: u8 = 0x7;
pub const END_STREAM: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const ACK: u8 = 0x1;
pub const CANCEL: u32 = 0x8;
pub const ENHANCE_YOUR_CALM: u32 = 0xb;

/// One frame on the wire.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.extend_from_slice(&[kind, flags]);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// The preface and an empty SETTINGS frame: what a client sends first.
pub fn client_hello() -> Vec<u8> {
    let mut hello = PREFACE.to_vec();
    hello.extend(frame(SETTINGS, 0, 0, &[]));
    hello
}

pub fn settings_ack() -> Vec<u8> {
    frame(SETTINGS, ACK, 0, &[])
}

/// HEADERS for `method` `http://authority path` (END_HEADERS; END_STREAM when `end`), the
/// fields as literals without indexing. `method` is `GET` or `POST`.
pub fn request_headers(
    stream: u32,
    method: &str,
    path: &str,
    authority: &str,
    end: bool,
) -> Vec<u8> {
    // :method GET (2) / POST (3) and :scheme http (6) from the static table.
    let method = if method == "POST" { 0x83 } else { 0x82 };
    let mut block = vec![method, 0x86];
    for (index, value) in [(0x04u8, path), (0x01, authority)] {
        block.push(index);
        // A 7-bit length prefix (longer values need the continuation encoding).
        assert!(value.len() < 127, "field value too long for this encoder");
        block.push(value.len() as u8);
        block.extend_from_slice(value.as_bytes());
    }
    let flags = END_HEADERS | if end { END_STREAM } else { 0 };
    frame(HEADERS, flags, stream, &block)
}

pub fn rst_stream(stream: u32, code: u32) -> Vec<u8> {
    frame(RST_STREAM, 0, stream, &code.to_be_bytes())
}

/// A frame as read: type, flags, stream id, payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

impl Frame {
    /// A GOAWAY's last stream id and error code.
    pub fn goaway(&self) -> Option<(u32, u32)> {
        if self.kind != GOAWAY || self.payload.len() < 8 {
            return None;
        }
        let p = &self.payload;
        let last = u32::from_be_bytes([p[0], p[1], p[2], p[3]]) & 0x7fff_ffff;
        Some((last, u32::from_be_bytes([p[4], p[5], p[6], p[7]])))
    }
}

/// Read one frame (blocking).
pub fn read_frame(r: &mut impl Read) -> io::Result<Frame> {
    let mut head = [0u8; 9];
    r.read_exact(&mut head)?;
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload)?;
    Ok(Frame {
        kind: head[3],
        flags: head[4],
        stream: u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff,
        payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let bytes = [
            request_headers(3, "GET", "/a", "h", true),
            rst_stream(3, CANCEL),
        ]
        .concat();
        let mut r = &bytes[..];
        let h = read_frame(&mut r).unwrap();
        assert_eq!(
            (h.kind, h.flags, h.stream),
            (HEADERS, END_HEADERS | END_STREAM, 3)
        );
        assert_eq!(h.payload, [0x82, 0x86, 0x04, 2, b'/', b'a', 0x01, 1, b'h']);
        let rst = read_frame(&mut r).unwrap();
        assert_eq!(
            (rst.kind, rst.payload),
            (RST_STREAM, CANCEL.to_be_bytes().to_vec())
        );
        let mut g = 5u32.to_be_bytes().to_vec();
        g.extend_from_slice(&ENHANCE_YOUR_CALM.to_be_bytes());
        let goaway = read_frame(&mut &frame(GOAWAY, 0, 0, &g)[..]).unwrap();
        assert_eq!(goaway.goaway(), Some((5, ENHANCE_YOUR_CALM)));
    }
}
