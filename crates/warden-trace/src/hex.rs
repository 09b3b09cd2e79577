//! Ids as lowercase hex, eight bytes at a time in a `u64`: no table and no branch per digit.
//! Every traced request writes a `traceparent` (24 bytes of ids) and every proxied request an
//! `x-request-id` (16), so this is on the request path; a digit pair looked up per byte cost
//! about three times as much.

/// The sixteen lowercase hex digits of eight bytes, in order.
#[inline]
pub fn digits8(bytes: [u8; 8]) -> [u8; 16] {
    let x = u64::from_be_bytes(bytes);
    let high = ascii(spread(x >> 32)).to_be_bytes();
    let low = ascii(spread(x & 0xffff_ffff)).to_be_bytes();
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&high);
    out[8..].copy_from_slice(&low);
    out
}

/// The 32 digits of sixteen bytes.
#[inline]
pub fn digits16(bytes: [u8; 16]) -> [u8; 32] {
    let (high, low) = split16(bytes);
    let mut out = [0u8; 32];
    out[..16].copy_from_slice(&digits8(high));
    out[16..].copy_from_slice(&digits8(low));
    out
}

fn split16(bytes: [u8; 16]) -> ([u8; 8], [u8; 8]) {
    let x = u128::from_be_bytes(bytes);
    (((x >> 64) as u64).to_be_bytes(), (x as u64).to_be_bytes())
}

/// `bytes` as lowercase hex into `out` (twice as long; a shorter `out` takes the first bytes'
/// digits).
#[inline]
pub fn write(bytes: &[u8], out: &mut [u8]) {
    let mut chunks = bytes.chunks_exact(8);
    let mut outs = out.chunks_exact_mut(16);
    for (chunk, digits) in (&mut chunks).zip(&mut outs) {
        if let Ok(chunk) = <[u8; 8]>::try_from(chunk) {
            digits.copy_from_slice(&digits8(chunk));
        }
    }
    // What is left of either: byte by byte.
    let done = bytes.len().min(out.len() / 2) / 8 * 8;
    for (pair, b) in out[done * 2..].chunks_exact_mut(2).zip(&bytes[done..]) {
        pair[0] = digit(b >> 4);
        pair[1] = digit(b & 0xf);
    }
}

fn digit(nibble: u8) -> u8 {
    if nibble < 10 {
        b'0' + nibble
    } else {
        b'a' + nibble - 10
    }
}

/// The eight nibbles of `x`'s low 32 bits, one per byte, the most significant first.
#[inline]
fn spread(x: u64) -> u64 {
    let x = (x | x << 16) & 0x0000_ffff_0000_ffff;
    let x = (x | x << 8) & 0x00ff_00ff_00ff_00ff;
    (x | x << 4) & 0x0f0f_0f0f_0f0f_0f0f
}

/// Each byte's nibble (0..=15) as its digit: `0`..`9`, then `a`..`f`. A nibble plus 6 carries
/// into bit 4 exactly when it is 10 or more; no byte overflows into the next.
#[inline]
fn ascii(nibbles: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let letters = ((nibbles + 6 * ONES) >> 4) & ONES;
    nibbles + u64::from(b'0') * ONES + letters * u64::from(b'a' - b'0' - 10)
}

/// An `x-request-id` as Envoy's UUID request-id extension makes one: 128 random bits as a
/// version 4, RFC 4122 variant UUID, hyphenated, lowercase (36 bytes).
pub fn uuid_v4(mut random: [u8; 16]) -> [u8; 36] {
    random[6] = (random[6] & 0x0f) | 0x40;
    random[8] = (random[8] & 0x3f) | 0x80;
    let d = digits16(random);
    let mut out = [b'-'; 36];
    out[..8].copy_from_slice(&d[..8]);
    out[9..13].copy_from_slice(&d[8..12]);
    out[14..18].copy_from_slice(&d[12..16]);
    out[19..23].copy_from_slice(&d[16..20]);
    out[24..].copy_from_slice(&d[20..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by_format(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn digits_are_formats_lowercase_hex() {
        let mut rng = fastrand::Rng::with_seed(7);
        let mut cases: Vec<[u8; 16]> = vec![[0; 16], [0xff; 16], *b"0123456789abcdef"];
        cases.push(std::array::from_fn(|i| (i * 17) as u8));
        cases.extend((0..1000).map(|_| rng.u128(..).to_le_bytes()));
        for bytes in cases {
            let want = by_format(&bytes);
            assert_eq!(digits16(bytes).as_slice(), want.as_bytes());
            let eight: [u8; 8] = bytes[..8].try_into().unwrap();
            assert_eq!(digits8(eight).as_slice(), &want.as_bytes()[..16]);
            for len in [0, 1, 3, 8, 9, 15, 16] {
                let mut out = vec![0u8; len * 2];
                write(&bytes[..len], &mut out);
                assert_eq!(out, &want.as_bytes()[..len * 2], "{len} bytes");
            }
            // A shorter output takes the first bytes' digits.
            let mut out = [0u8; 16];
            write(&bytes, &mut out);
            assert_eq!(out.as_slice(), &want.as_bytes()[..16]);
        }
    }

    #[test]
    fn request_ids_are_version_4_uuids() {
        for (random, want) in [
            ([0u8; 16], "00000000-0000-4000-8000-000000000000"),
            ([0xff; 16], "ffffffff-ffff-4fff-bfff-ffffffffffff"),
            (
                *b"\x01\x23\x45\x67\x89\xab\xcd\xef\xfe\xdc\xba\x98\x76\x54\x32\x10",
                "01234567-89ab-4def-bedc-ba9876543210",
            ),
        ] {
            assert_eq!(std::str::from_utf8(&uuid_v4(random)).unwrap(), want);
        }
    }
}
