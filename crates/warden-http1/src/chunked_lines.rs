//! The lines of a chunked body (RFC 9112 §7.1) judged whole: a chunk-size line with its
//! extensions, and each trailer field line.
//!
//! httparse judges a prefix of a line differently from the whole line (it calls some
//! prefixes invalid and the whole line partial, and it judges a trailer section before it is
//! complete), so a decoder that asked it about whatever had arrived decided differently
//! depending on how the bytes were split into reads (found by fuzz/chunked_body). Here nothing
//! is judged before its line feed has arrived, except that a line longer than its limit is
//! refused as soon as the limit is passed — which a longer read would have refused too.

/// What the line at the start of a buffer is, so far.
#[derive(Debug, PartialEq, Eq)]
pub enum Line<T> {
    /// No line feed yet, and still within the limit.
    Partial,
    /// A whole line of `len` bytes (its CRLF included) and what it says.
    Whole { len: usize, value: T },
    /// Malformed, or longer than the limit.
    Invalid,
}

/// The line at the start of `buf` if it has ended: its bytes before the CRLF, its length with
/// the CRLF; `Err(())` when it is longer than `max` bytes before its line feed or its line
/// feed lacks a CR (a bare LF: refused, as hyper and llhttp refuse it).
fn whole_line(buf: &[u8], max: usize) -> Result<Option<(&[u8], usize)>, ()> {
    let searched = &buf[..buf.len().min(max + 1)];
    match searched.iter().position(|&b| b == b'\n') {
        None if buf.len() > max => Err(()),
        None => Ok(None),
        Some(lf) => match buf[..lf].strip_suffix(b"\r") {
            Some(line) => Ok(Some((line, lf + 1))),
            None => Err(()),
        },
    }
}

/// A chunk-size line at the start of `buf`: `1*HEXDIG [BWS] [; extensions] CRLF`, at most
/// `max` bytes before its line feed. Extension bytes are not parsed into names and values
/// (warden drops them) but may hold no control character other than HTAB.
pub fn chunk_size(buf: &[u8], max: usize) -> Line<u64> {
    let (line, len) = match whole_line(buf, max) {
        Ok(Some(whole)) => whole,
        Ok(None) => return Line::Partial,
        Err(()) => return Line::Invalid,
    };
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return Line::Invalid;
    }
    let mut size: u64 = 0;
    for &b in &line[..digits] {
        // A hex digit's value: '0'-'9', 'a'-'f', 'A'-'F'.
        let digit = match b {
            b'0'..=b'9' => b - b'0',
            _ => (b | 0x20) - b'a' + 10,
        };
        size = match size
            .checked_mul(16)
            .and_then(|s| s.checked_add(u64::from(digit)))
        {
            Some(s) => s,
            None => return Line::Invalid,
        };
    }
    let rest = &line[digits..];
    let after_ws = rest
        .iter()
        .take_while(|&&b| b == b' ' || b == b'\t')
        .count();
    let rest = &rest[after_ws..];
    let valid = match rest.split_first() {
        None => true,
        Some((b';', extensions)) => extensions.iter().all(|&b| is_field_byte(b)),
        Some(_) => false,
    };
    if valid {
        Line::Whole { len, value: size }
    } else {
        Line::Invalid
    }
}

/// One line of a trailer section at the start of `buf`, at most `max` bytes before its line
/// feed: `Whole { value: true }` for the empty line that ends the section, `false` for a field
/// line (`token ":" value`, which is checked and dropped).
pub fn trailer_line(buf: &[u8], max: usize) -> Line<bool> {
    let (line, len) = match whole_line(buf, max) {
        Ok(Some(whole)) => whole,
        Ok(None) => return Line::Partial,
        Err(()) => return Line::Invalid,
    };
    if line.is_empty() {
        return Line::Whole { len, value: true };
    }
    let name = line.iter().take_while(|&&b| is_token_byte(b)).count();
    let valid = name > 0
        && line.get(name) == Some(&b':')
        && line[name + 1..].iter().all(|&b| is_field_byte(b));
    if valid {
        Line::Whole { len, value: false }
    } else {
        Line::Invalid
    }
}

/// A `tchar` of RFC 9110 §5.6.2.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A byte a field value (or an extension) may hold: HTAB, SP, VCHAR, obs-text.
fn is_field_byte(b: u8) -> bool {
    b == b'\t' || (b' '..=b'~').contains(&b) || b >= 0x80
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_lines() {
        let whole = |len, value| Line::Whole { len, value };
        assert_eq!(chunk_size(b"5\r\nhello", 64), whole(3, 5));
        assert_eq!(chunk_size(b"1aF\r\n", 64), whole(5, 0x1af));
        assert_eq!(chunk_size(b"0; name=\"v\" \t; x\r\n", 64), whole(18, 0));
        assert_eq!(chunk_size(b"3 \t;ext\r\n", 64), whole(9, 3));
        assert_eq!(chunk_size(b"3  \r\n", 64), whole(5, 3));
        assert_eq!(chunk_size(b"ffffffffffffffff\r\n", 64), whole(18, u64::MAX));
        assert_eq!(chunk_size(b"0000000000000000001\r\n", 64), whole(21, 1));
        for invalid in [
            &b"\r\n"[..],
            b"x\r\n",
            b"5\n",
            b"5\rx\r\n",
            b"-1\r\n",
            b"5 x\r\n",
            b"5;a\x00b\r\n",
            b"5;\x7f\r\n",
            b"10000000000000000\r\n",
        ] {
            assert_eq!(chunk_size(invalid, 64), Line::Invalid, "{invalid:?}");
        }
        // Not judged before the line feed, except for its length.
        assert_eq!(chunk_size(b"zz;\x00", 64), Line::Partial);
        assert_eq!(chunk_size(&[b'1'; 64], 64), Line::Partial);
        assert_eq!(chunk_size(&[b'1'; 65], 64), Line::Invalid);
        let mut at_limit = vec![b'1'; 64];
        at_limit.push(b'\n');
        assert_eq!(chunk_size(&at_limit, 64), Line::Invalid, "bare LF");
    }

    #[test]
    fn trailer_lines() {
        assert_eq!(
            trailer_line(b"\r\nNEXT", 64),
            Line::Whole {
                len: 2,
                value: true
            }
        );
        assert_eq!(
            trailer_line(b"x-t: 1 \t\xff\r\n", 64),
            Line::Whole {
                len: 11,
                value: false
            }
        );
        for invalid in [
            &b": v\r\n"[..],
            b"x y: 1\r\n",
            b"x\r\n",
            b"x: \x01\r\n",
            b"\n",
        ] {
            assert_eq!(trailer_line(invalid, 64), Line::Invalid, "{invalid:?}");
        }
        assert_eq!(trailer_line(b"x: \x01", 64), Line::Partial);
    }
}
