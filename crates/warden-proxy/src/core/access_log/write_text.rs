//! Numbers, start times and addresses written straight into a line, without `fmt`: its
//! machinery (a `Formatter` per value, padding handled per call) cost a log line more than
//! all of its text. Each writer gives the bytes `Display` or `format!("{n:0W}")` gives.

use super::format::TimePart;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// `n` in decimal.
pub fn push_u64(out: &mut String, n: u64) {
    // Most of a line's numbers (a duration, a status, small sizes) have at most three digits:
    // pushed one by one, without a library copy.
    if n < 1000 {
        if n >= 100 {
            out.push(char::from(b'0' + (n / 100) as u8));
        }
        if n >= 10 {
            out.push(char::from(b'0' + (n / 10 % 10) as u8));
        }
        out.push(char::from(b'0' + (n % 10) as u8));
        return;
    }
    out.push_str(itoa::Buffer::new().format(n));
}

/// Two digits of every number below 100, so a date's fields need no division loop.
const TWO_DIGITS: &str = "0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// `n` with at least `width` digits, zeros in front (`format!("{n:0width$}")`).
pub fn push_padded(out: &mut String, n: u64, width: usize) {
    if width == 2 && n < 100 {
        let at = n as usize * 2;
        out.push_str(TWO_DIGITS.get(at..at + 2).unwrap_or("00"));
        return;
    }
    let mut buf = itoa::Buffer::new();
    let digits = buf.format(n);
    for _ in digits.len()..width {
        out.push('0');
    }
    out.push_str(digits);
}

/// The first `n` (at most 9) digits of `nanos` as nine digits (`%3f` of a time).
pub fn push_fraction(out: &mut String, nanos: u32, n: u8) {
    let n = u32::from(n.min(9));
    // A `SystemTime`'s nanoseconds are below 10^9; nine 9s is what a larger value's first
    // digits would never be, but it keeps the width.
    let nanos = nanos.min(999_999_999);
    if n == 3 {
        // Milliseconds, START_TIME's default: a digit and two from the table.
        let ms = nanos / 1_000_000;
        out.push(char::from(b'0' + (ms / 100) as u8));
        push_padded(out, u64::from(ms % 100), 2);
        return;
    }
    let value = nanos / 10u32.pow(9 - n);
    push_padded(out, u64::from(value), n as usize);
}

/// A UTC time (seconds and nanoseconds since the epoch) in `parts`.
pub fn write_time(parts: &[TimePart], secs: u64, nanos: u32, out: &mut String) {
    let (y, mo, d) = civil_from_days(secs / 86_400);
    let s = secs % 86_400;
    for p in parts {
        match p {
            TimePart::Text(t) => out.push_str(t),
            TimePart::Year => push_padded(out, y, 4),
            TimePart::Month => push_padded(out, u64::from(mo), 2),
            TimePart::Day => push_padded(out, u64::from(d), 2),
            TimePart::Hour => push_padded(out, s / 3600, 2),
            TimePart::Minute => push_padded(out, s / 60 % 60, 2),
            TimePart::Second => push_padded(out, s % 60, 2),
            TimePart::Epoch => push_u64(out, secs),
            TimePart::Offset => out.push_str("+0000"),
            TimePart::Fraction(n) => push_fraction(out, nanos, *n),
        }
    }
}

/// Days since 1970-01-01 as a proleptic Gregorian (year, month, day): Howard Hinnant's
/// `civil_from_days`, for days on or after the epoch.
pub fn civil_from_days(z: u64) -> (u64, u32, u32) {
    let z = z + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// START_TIME's text up to and after its fraction of a second, kept for the second it was
/// made for: lines of one second share all of it but the fraction (Envoy caches the same).
#[derive(Debug, Default)]
pub struct TimeCache {
    entries: Vec<CachedTime>,
}

#[derive(Debug)]
struct CachedTime {
    /// Which `START_TIME` this is: its parts' address (the format lives as long as the writer
    /// that owns this cache, so addresses are not reused).
    key: usize,
    /// The second `head` and `tail` were written for; `None`: not yet.
    secs: Option<u64>,
    /// Where the one fraction is in the parts; `None` with `cached` false: several (written
    /// whole every time).
    fraction: Option<usize>,
    cached: bool,
    head: String,
    tail: String,
}

impl TimeCache {
    /// `parts` for (`secs`, `nanos`), as [`write_time`] writes them.
    pub fn write(&mut self, parts: &[TimePart], secs: u64, nanos: u32, out: &mut String) {
        let key = parts.as_ptr() as usize;
        let at = match self.entries.iter().position(|e| e.key == key) {
            Some(at) => at,
            None => {
                self.entries.push(CachedTime::new(key, parts));
                self.entries.len() - 1
            }
        };
        let Some(entry) = self.entries.get_mut(at) else {
            return write_time(parts, secs, nanos, out);
        };
        if !entry.cached {
            return write_time(parts, secs, nanos, out);
        }
        let split = entry.fraction.unwrap_or(parts.len());
        let (before, after) = parts.split_at(split);
        if entry.secs != Some(secs) {
            entry.head.clear();
            entry.tail.clear();
            write_time(before, secs, 0, &mut entry.head);
            write_time(after.get(1..).unwrap_or_default(), secs, 0, &mut entry.tail);
            entry.secs = Some(secs);
        }
        out.push_str(&entry.head);
        if let Some(TimePart::Fraction(n)) = after.first() {
            push_fraction(out, nanos, *n);
        }
        out.push_str(&entry.tail);
    }
}

impl CachedTime {
    fn new(key: usize, parts: &[TimePart]) -> Self {
        let mut fractions = parts
            .iter()
            .enumerate()
            .filter(|(_, p)| matches!(p, TimePart::Fraction(_)))
            .map(|(i, _)| i);
        let first = fractions.next();
        CachedTime {
            key,
            secs: None,
            fraction: first,
            cached: fractions.next().is_none(),
            head: String::new(),
            tail: String::new(),
        }
    }
}

/// What a worker keeps from line to line: START_TIME's text of the current second, and
/// addresses' texts (a connection's lines share their peer's and local address, an upstream
/// connection's lines its local one).
#[derive(Debug, Default)]
pub struct LineCaches {
    pub time: TimeCache,
    /// Per operator slot, texts by the address's port (direct-mapped: a worker's connections
    /// differ in their ports); made at first use.
    addrs: Vec<Option<CachedAddr>>,
}

impl LineCaches {
    pub const fn new() -> Self {
        LineCaches {
            time: TimeCache {
                entries: Vec::new(),
            },
            addrs: Vec::new(),
        }
    }
}

/// Which address a cached text is for: each operator has its own slot.
pub const ADDR_SLOTS: usize = 4;
/// Texts kept per slot.
const ADDRS_PER_SLOT: usize = 128;

/// Where `port`'s text is kept in a slot. Linux gives a connection's local port from a run
/// of even ones (p, p+2, ...): by the port itself, a slot's odd places stayed empty and
/// connections evicted each other (3 lines in 10 wrote their upstream address anew).
fn addr_place(port: u16) -> usize {
    usize::from(port >> 1) % ADDRS_PER_SLOT
}

#[derive(Debug)]
struct CachedAddr {
    addr: SocketAddr,
    port: bool,
    text: String,
}

impl LineCaches {
    /// `addr` (with its port or not) as [`push_socket_addr`] or [`push_ip`] writes it, from
    /// `slot`'s text when it is the same address as last time.
    pub fn push_addr(&mut self, slot: usize, addr: SocketAddr, port: bool, out: &mut String) {
        if self.addrs.is_empty() {
            self.addrs.resize_with(ADDR_SLOTS * ADDRS_PER_SLOT, || None);
        }
        let at = slot * ADDRS_PER_SLOT + addr_place(addr.port());
        let entry = match self.addrs.get_mut(at) {
            Some(entry) if slot < ADDR_SLOTS => entry,
            _ => return push_addr_text(out, addr, port),
        };
        if let Some(cached) = entry {
            if cached.addr == addr && cached.port == port {
                out.push_str(&cached.text);
                return;
            }
        }
        let mut text = entry.take().map(|c| c.text).unwrap_or_default();
        text.clear();
        push_addr_text(&mut text, addr, port);
        out.push_str(&text);
        *entry = Some(CachedAddr { addr, port, text });
    }
}

fn push_addr_text(out: &mut String, addr: SocketAddr, port: bool) {
    if port {
        push_socket_addr(out, addr);
    } else {
        push_ip(out, addr.ip());
    }
}

/// `ip` as `Display` writes it.
pub fn push_ip(out: &mut String, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => push_ipv4(out, v4),
        // IPv6's shortest form (RFC 5952) is `Display`'s to get right; rare on this path.
        IpAddr::V6(v6) => {
            use std::fmt::Write;
            let _ = write!(out, "{v6}");
        }
    }
}

/// `addr` as `Display` writes it (`a.b.c.d:port`, `[v6%scope]:port`).
pub fn push_socket_addr(out: &mut String, addr: SocketAddr) {
    match addr {
        SocketAddr::V4(v4) => {
            push_ipv4(out, *v4.ip());
            out.push(':');
            push_u64(out, u64::from(v4.port()));
        }
        SocketAddr::V6(v6) => {
            use std::fmt::Write;
            let _ = write!(out, "{v6}");
        }
    }
}

fn push_ipv4(out: &mut String, ip: Ipv4Addr) {
    let [a, b, c, d] = ip.octets();
    // Octets take push_u64's digit-by-digit branch (below 1000).
    out.reserve(15);
    push_u64(out, u64::from(a));
    out.push('.');
    push_u64(out, u64::from(b));
    out.push('.');
    push_u64(out, u64::from(c));
    out.push('.');
    push_u64(out, u64::from(d));
}

/// `bytes` as text, invalid UTF-8 replaced as `String::from_utf8_lossy` replaces it (header
/// values may hold obs-text).
pub fn push_lossy(out: &mut String, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(s) => out.push_str(s),
        Err(_) => out.push_str(&String::from_utf8_lossy(bytes)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv6Addr, SocketAddrV6};

    /// What the writers replace: `fmt` and `to_string`.
    #[test]
    fn integers_write_what_fmt_writes() {
        for n in [
            0,
            1,
            9,
            10,
            99,
            100,
            999,
            1000,
            65_535,
            1_700_000_000,
            u64::MAX,
        ] {
            let mut out = String::new();
            push_u64(&mut out, n);
            assert_eq!(out, n.to_string());
            for width in [0, 1, 2, 3, 4, 9, 21] {
                let mut out = String::new();
                push_padded(&mut out, n, width);
                assert_eq!(out, format!("{n:0width$}"), "{n} width {width}");
            }
        }
    }

    #[test]
    fn fractions_are_the_first_digits_of_nine() {
        let cases = [
            (0, 3, "000"),
            (5_000_000, 3, "005"),
            (123_456_789, 1, "1"),
            (123_456_789, 3, "123"),
            (123_456_789, 6, "123456"),
            (123_456_789, 9, "123456789"),
            (999_999_999, 3, "999"),
            (1_000, 9, "000001000"),
        ];
        for (nanos, n, want) in cases {
            let mut out = String::new();
            push_fraction(&mut out, nanos, n);
            assert_eq!(out, want, "{nanos} {n}");
            let old = format!("{nanos:09}");
            assert_eq!(out, old[..usize::from(n)], "{nanos} {n}");
        }
    }

    #[test]
    fn civil_dates() {
        for (days, want) in [
            (0, (1970, 1, 1)),
            (19_675, (2023, 11, 14)),
            (11_016, (2000, 2, 29)),
            (11_017, (2000, 3, 1)),
            (10_956, (1999, 12, 31)),
            (47_481, (2099, 12, 31)),
            (47_482, (2100, 1, 1)),
            (2_932_896, (9999, 12, 31)),
            (2_932_897, (10000, 1, 1)),
        ] {
            assert_eq!(civil_from_days(days), want, "{days}");
        }
    }

    fn default_parts() -> Vec<TimePart> {
        use TimePart::*;
        vec![
            Year,
            Text("-".into()),
            Month,
            Text("-".into()),
            Day,
            Text("T".into()),
            Hour,
            Text(":".into()),
            Minute,
            Text(":".into()),
            Second,
            Text(".".into()),
            Fraction(3),
            Text("Z".into()),
        ]
    }

    #[test]
    fn times_are_written_as_before() {
        use TimePart::*;
        let cases: [(Vec<TimePart>, u64, u32, &str); 6] = [
            (default_parts(), 0, 0, "1970-01-01T00:00:00.000Z"),
            (
                default_parts(),
                1_700_000_000,
                123_456_789,
                "2023-11-14T22:13:20.123Z",
            ),
            (
                default_parts(),
                951_868_799,
                999_999_999,
                "2000-02-29T23:59:59.999Z",
            ),
            (
                vec![Epoch, Text(".".into()), Fraction(6), Offset],
                1_700_000_000,
                5_000,
                "1700000000.000005+0000",
            ),
            (
                vec![Fraction(1), Text("|".into()), Fraction(9)],
                1,
                987_654_321,
                "9|987654321",
            ),
            (vec![Year], 253_402_300_800, 0, "10000"),
        ];
        for (parts, secs, nanos, want) in cases {
            let mut out = String::new();
            write_time(&parts, secs, nanos, &mut out);
            assert_eq!(out, want);
        }
    }

    #[test]
    fn the_time_cache_writes_what_write_time_writes() {
        use TimePart::*;
        let formats = [
            default_parts(),
            vec![Epoch, Text(" ".into()), Fraction(3)],
            vec![Fraction(2), Text("/".into()), Second],
            vec![Fraction(1), Text("|".into()), Fraction(9)],
            vec![Hour, Text(":".into()), Minute],
        ];
        let mut cache = TimeCache::default();
        // Several formats through one cache, a second repeated, then a later one.
        for (secs, nanos) in [
            (1_700_000_000, 1),
            (1_700_000_000, 999_000_000),
            (1_700_000_001, 0),
            (1_700_000_000, 5),
        ] {
            for parts in &formats {
                let (mut cached, mut whole) = (String::new(), String::new());
                cache.write(parts, secs, nanos, &mut cached);
                write_time(parts, secs, nanos, &mut whole);
                assert_eq!(cached, whole, "{parts:?} {secs} {nanos}");
            }
        }
    }

    #[test]
    fn addresses_write_what_display_writes() {
        let addrs: [SocketAddr; 6] = [
            "127.0.0.1:4000".parse().expect("v4"),
            "0.0.0.0:0".parse().expect("v4"),
            "255.255.255.255:65535".parse().expect("v4"),
            "[::1]:80".parse().expect("v6"),
            "[2001:db8::ff00:42:8329]:8443".parse().expect("v6"),
            SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::LOCALHOST, 9, 0, 3)),
        ];
        for a in addrs {
            let mut out = String::new();
            push_socket_addr(&mut out, a);
            assert_eq!(out, a.to_string());
            let mut out = String::new();
            push_ip(&mut out, a.ip());
            assert_eq!(out, a.ip().to_string());
        }
    }

    #[test]
    fn cached_addresses_are_written_as_display_writes_them() {
        let addrs: [SocketAddr; 4] = [
            "127.0.0.1:4000".parse().expect("v4"),
            "127.0.0.1:4001".parse().expect("v4"),
            "[::1]:80".parse().expect("v6"),
            "10.0.0.1:4000".parse().expect("v4"),
        ];
        let mut caches = LineCaches::default();
        // Ports that share a place in a slot (4000, 4001 and 4256) and ones that do not.
        assert_eq!(addr_place(4000), addr_place(4256));
        let addrs: [SocketAddr; 6] = [
            addrs[0],
            addrs[1],
            addrs[2],
            addrs[3],
            "127.0.0.1:4256".parse().expect("v4"),
            "10.0.0.2:4000".parse().expect("v4"),
        ];
        for slot in [0, 1, 0, ADDR_SLOTS] {
            for a in addrs.iter().chain(addrs.iter().rev()) {
                for port in [true, false, false, true] {
                    let mut out = String::new();
                    caches.push_addr(slot, *a, port, &mut out);
                    let want = if port {
                        a.to_string()
                    } else {
                        a.ip().to_string()
                    };
                    assert_eq!(out, want, "{slot} {a} {port}");
                }
            }
        }
    }

    #[test]
    fn header_bytes_are_text_as_from_utf8_lossy_makes_them() {
        for bytes in [
            &b"curl/8"[..],
            b"",
            b"caf\xc3\xa9",
            b"bad\xff\xfe",
            b"cut\xe2\x82",
        ] {
            let mut out = String::new();
            push_lossy(&mut out, bytes);
            assert_eq!(out, String::from_utf8_lossy(bytes));
        }
    }
}
