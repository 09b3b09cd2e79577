//! Plain YAML scalars resolved as Go's `gopkg.in/yaml.v2` (the reference's parser, YAML 1.1
//! flavoured) resolves them (`resolve.go`): `y`/`yes`/`on`/... (three spellings each) are
//! booleans, `~`/`null`/empty are null, `0x1F`, `0o17`, `0b101`, `0123` (octal), `1_000`
//! (underscores dropped) and `+12` are integers, `08` and `1e3` are floats, `2001-12-14` is a
//! timestamp; everything else is a string. Quoted scalars are strings.

/// What yaml.v2 decodes a scalar into when the target is `interface{}`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Resolved {
    Null,
    Bool(bool),
    /// Go `int` (64-bit).
    Int(i64),
    /// Go `uint64`: integers above `i64::MAX`.
    Uint(u64),
    Float(f64),
    Timestamp,
    Str,
}

impl Resolved {
    /// yaml.v2's short tag name, as its messages print it.
    pub fn tag(self) -> &'static str {
        match self {
            Resolved::Null => "null",
            Resolved::Bool(_) => "bool",
            Resolved::Int(_) | Resolved::Uint(_) => "int",
            Resolved::Float(_) => "float",
            Resolved::Timestamp => "timestamp",
            Resolved::Str => "str",
        }
    }
}

/// An untagged plain scalar.
pub fn resolve_plain(s: &str) -> Resolved {
    // yaml.v2 looks a scalar up only when its first character hints at a non-string.
    let hint = match s.as_bytes().first() {
        None => b'N',
        Some(b'+' | b'-') => b'S',
        Some(b'0'..=b'9') => b'D',
        Some(b'y' | b'Y' | b'n' | b'N' | b't' | b'T' | b'f' | b'F' | b'o' | b'O' | b'~') => b'M',
        Some(b'.') => b'.',
        Some(_) => return Resolved::Str,
    };
    match s {
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return Resolved::Bool(true)
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return Resolved::Bool(false)
        }
        "" | "~" | "null" | "Null" | "NULL" => return Resolved::Null,
        ".nan" | ".NaN" | ".NAN" => return Resolved::Float(f64::NAN),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Resolved::Float(f64::INFINITY)
        }
        "-.inf" | "-.Inf" | "-.INF" => return Resolved::Float(f64::NEG_INFINITY),
        _ => {}
    }
    match hint {
        b'.' => parse_float(s).map_or(Resolved::Str, Resolved::Float),
        b'D' | b'S' => {
            if is_timestamp(s) {
                return Resolved::Timestamp;
            }
            let plain = s.replace('_', "");
            if let Some(i) = go_parse_int(&plain) {
                return Resolved::Int(i);
            }
            if let Some(u) = go_parse_uint(&plain) {
                return Resolved::Uint(u);
            }
            if yaml_style_float(&plain) {
                if let Some(f) = parse_float(&plain) {
                    return Resolved::Float(f);
                }
            }
            Resolved::Str
        }
        _ => Resolved::Str,
    }
}

/// Go's `strconv.ParseFloat`: an overflow is an error, not an infinity.
fn parse_float(s: &str) -> Option<f64> {
    s.parse::<f64>().ok().filter(|f| f.is_finite())
}

/// `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`
fn yaml_style_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = usize::from(matches!(b.first(), Some(b'+' | b'-')));
    let digits = |i: &mut usize| {
        let start = *i;
        while b.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i - start
    };
    if b.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            digits(&mut i);
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// Go's `strconv.ParseUint(s, 0, 64)` without underscores: `0x`/`0o`/`0b` prefixes (either
/// case, at least one digit after), a leading `0` for octal.
pub fn go_parse_uint(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    let (radix, digits) = match b {
        [] => return None,
        [b'0', p, rest @ ..] if !rest.is_empty() && matches!(p, b'b' | b'B') => (2, rest),
        [b'0', p, rest @ ..] if !rest.is_empty() && matches!(p, b'o' | b'O') => (8, rest),
        [b'0', p, rest @ ..] if !rest.is_empty() && matches!(p, b'x' | b'X') => (16, rest),
        [b'0', rest @ ..] => (8, rest),
        _ => (10, b),
    };
    let mut n: u64 = 0;
    for &c in digits {
        let d = (c as char).to_digit(radix)?;
        n = n.checked_mul(u64::from(radix))?.checked_add(u64::from(d))?;
    }
    Some(n)
}

/// Go's `strconv.ParseInt(s, 0, 64)`.
pub fn go_parse_int(s: &str) -> Option<i64> {
    let (neg, rest) = match s.as_bytes().first() {
        Some(b'+') => (false, &s[1..]),
        Some(b'-') => (true, &s[1..]),
        _ => (false, s),
    };
    let u = go_parse_uint(rest)?;
    if neg {
        0i64.checked_sub_unsigned(u)
    } else {
        i64::try_from(u).ok()
    }
}

/// yaml.v2's `parseTimestamp`: `YYYY-M-D`, optionally followed by `T`/`t`/space and
/// `H:M:S[.fraction]`, a zone (`Z` or `±hh:mm`) only after `T`/`t` and required there.
fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() < 5 || !b[..4].iter().all(u8::is_ascii_digit) || b[4] != b'-' {
        return false;
    }
    let mut i = 5;
    // 1 or 2 digits, within `lo..=hi`.
    let num = |i: &mut usize, lo: u32, hi: u32| -> Option<u32> {
        let start = *i;
        while *i < b.len() && *i - start < 2 && b[*i].is_ascii_digit() {
            *i += 1;
        }
        let text = std::str::from_utf8(&b[start..*i]).ok()?;
        let n: u32 = text.parse().ok()?;
        (lo..=hi).contains(&n).then_some(n)
    };
    let lit = |i: &mut usize, c: u8| -> Option<()> { (b.get(*i) == Some(&c)).then(|| *i += 1) };
    let year: u32 = s[..4].parse().unwrap_or(0);
    let date = (|| {
        let month = num(&mut i, 1, 12)?;
        lit(&mut i, b'-')?;
        let leap =
            year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400));
        let days = match month {
            2 if leap => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        num(&mut i, 1, days)
    })();
    if date.is_none() {
        return false;
    }
    if i == b.len() {
        return true;
    }
    let zoned = match b[i] {
        b'T' | b't' => true,
        b' ' => false,
        _ => return false,
    };
    i += 1;
    let time = (|| {
        num(&mut i, 0, 23)?;
        lit(&mut i, b':')?;
        num(&mut i, 0, 59)?;
        lit(&mut i, b':')?;
        num(&mut i, 0, 59)?;
        if b.get(i) == Some(&b'.') {
            i += 1;
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            (i > start).then_some(())?;
        }
        Some(())
    })();
    if time.is_none() {
        return false;
    }
    if !zoned {
        return i == b.len();
    }
    match b.get(i) {
        Some(b'Z') => i + 1 == b.len(),
        Some(b'+' | b'-') => {
            let zone = &b[i + 1..];
            zone.len() == 5
                && zone[..2].iter().all(u8::is_ascii_digit)
                && zone[2] == b':'
                && zone[3..].iter().all(u8::is_ascii_digit)
        }
        _ => false,
    }
}

/// Go's `%v` of a float64 (`strconv.FormatFloat(f, 'g', -1, 64)`: shortest digits, an exponent
/// below 1e-4 and from 1e6): `0.25`, `123456`, `1e+06`, `1e-05`, `+Inf`, `NaN`.
pub fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..6).contains(&exp) {
        format!("{f}")
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_scalars_resolve_as_yaml_v2() {
        use Resolved::*;
        let rows: &[(&str, Resolved)] = &[
            ("yes", Bool(true)),
            ("Yes", Bool(true)),
            ("YES", Bool(true)),
            ("yES", Str),
            ("y", Bool(true)),
            ("on", Bool(true)),
            ("ON", Bool(true)),
            ("oN", Str),
            ("tRue", Str),
            ("n", Bool(false)),
            ("off", Bool(false)),
            ("No", Bool(false)),
            ("", Null),
            ("~", Null),
            ("NULL", Null),
            ("nil", Str),
            ("0x1F", Int(31)),
            ("0X1F", Int(31)),
            ("0x_1F", Int(31)),
            ("-0x1F", Int(-31)),
            ("+12", Int(12)),
            ("1_000", Int(1000)),
            ("1__0", Int(10)),
            ("0123", Int(83)),
            ("0", Int(0)),
            ("0o17", Int(15)),
            ("0b101", Int(5)),
            ("0x", Str),
            ("08", Float(8.0)),
            ("0999", Float(999.0)),
            ("1e3", Float(1000.0)),
            ("1e400", Str),
            (".5", Float(0.5)),
            ("-.5", Float(-0.5)),
            ("5.", Float(5.0)),
            ("9223372036854775807", Int(i64::MAX)),
            ("9223372036854775808", Uint(9_223_372_036_854_775_808)),
            ("-9223372036854775808", Int(i64::MIN)),
            ("2001-12-14", Timestamp),
            ("2001-12-14t21:59:43.10-05:00", Timestamp),
            ("2001-12-14 21:59:43.10", Timestamp),
            ("2001-02-30", Str),
            ("12:30", Str),
            ("1,000", Str),
            ("10.0.0.1", Str),
            ("+", Str),
            ("<<", Str),
            ("/api/*", Str),
        ];
        for (text, want) in rows {
            let got = resolve_plain(text);
            let same = match (got, *want) {
                (Float(a), Float(b)) => a == b,
                (a, b) => a == b,
            };
            assert!(same, "{text:?}: got {got:?}, want {want:?}");
        }
        assert!(matches!(resolve_plain(".nan"), Float(f) if f.is_nan()));
        assert_eq!(resolve_plain("-.inf"), Float(f64::NEG_INFINITY));
    }

    #[test]
    fn floats_print_as_go_prints_them() {
        assert_eq!(go_float(0.25), "0.25");
        assert_eq!(go_float(8.0), "8");
        assert_eq!(go_float(123456.0), "123456");
        assert_eq!(go_float(1e6), "1e+06");
        assert_eq!(go_float(1234567.0), "1.234567e+06");
        assert_eq!(go_float(0.00001), "1e-05");
        assert_eq!(go_float(f64::INFINITY), "+Inf");
    }
}
