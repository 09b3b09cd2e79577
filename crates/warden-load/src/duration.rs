//! Durations as `warden load` flags and `warden echo`'s `delay` parameter take them: Go's
//! `time.ParseDuration` syntax (what fortio, vegeta and hey users type), without a sign:
//! `5s`, `250ms`, `1.5s`, `1m30s`, `100us`, `0`.
//!
//! Kept here rather than borrowed from warden-config: a load generator has no reason to link
//! the mesh config loader for one flag syntax.

use std::time::Duration;

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// Parse `text` (surrounding spaces ignored) into a duration, exactly (integer nanoseconds, no
/// float rounding); fractions finer than a nanosecond are dropped, as Go drops them.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err("empty duration".into());
    }
    // Go accepts a bare zero without a unit.
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut nanos: u128 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let (whole, fraction, after) = split_number(rest)
            .ok_or_else(|| format!("invalid duration {text:?}: expected a number at {rest:?}"))?;
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let unit = &after[..unit_len];
        let scale = unit_nanos(unit).ok_or_else(|| {
            if after.is_empty() {
                format!("duration {text:?} lacks a unit (ns, us, ms, s, m, h)")
            } else if unit.is_empty() {
                format!("invalid duration {text:?}: expected a unit at {after:?}")
            } else {
                format!("unknown unit {unit:?} in duration {text:?} (ns, us, ms, s, m, h)")
            }
        })?;
        let too_large = || format!("duration {text:?} is too large");
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| too_large())?
        };
        nanos = whole
            .checked_mul(scale)
            .and_then(|n| n.checked_add(fraction_nanos(fraction, scale)))
            .and_then(|n| n.checked_add(nanos))
            .ok_or_else(too_large)?;
        rest = &after[unit_len..];
    }
    let secs = u64::try_from(nanos / NANOS_PER_SEC)
        .map_err(|_| format!("duration {text:?} is too large"))?;
    // The remainder is below 1e9, so it fits.
    let sub = (nanos % NANOS_PER_SEC) as u32;
    Ok(Duration::new(secs, sub))
}

/// `digits[.digits]` at the start of `s`: (whole, fraction, rest); at least one digit on either
/// side of the dot, as Go requires (`.5s` and `1.s` are valid, `.s` is not).
fn split_number(s: &str) -> Option<(&str, &str, &str)> {
    let whole_len = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (whole, after) = s.split_at(whole_len);
    let (fraction, after) = match after.strip_prefix('.') {
        Some(f) => {
            let len = f.find(|c: char| !c.is_ascii_digit()).unwrap_or(f.len());
            f.split_at(len)
        }
        None => ("", after),
    };
    (!whole.is_empty() || !fraction.is_empty()).then_some((whole, fraction, after))
}

fn unit_nanos(unit: &str) -> Option<u128> {
    Some(match unit {
        "ns" => 1,
        // Go accepts the micro sign and the Greek mu.
        "us" | "µs" | "μs" => 1_000,
        "ms" => 1_000_000,
        "s" => NANOS_PER_SEC,
        "m" => 60 * NANOS_PER_SEC,
        "h" => 3_600 * NANOS_PER_SEC,
        _ => return None,
    })
}

/// The nanoseconds of `0.<fraction>` of a unit of `scale` nanoseconds (digits past a
/// nanosecond's precision are dropped).
fn fraction_nanos(fraction: &str, scale: u128) -> u128 {
    // 20 digits are finer than a nanosecond of an hour (3.6e12 ns), and keep `value * scale`
    // below u128::MAX.
    let mut value = 0u128;
    let mut denominator = 1u128;
    for digit in fraction.bytes().take(20) {
        value = value * 10 + u128::from(digit - b'0');
        denominator *= 10;
    }
    value * scale / denominator
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        let ms = Duration::from_millis;
        let cases: &[(&str, Duration)] = &[
            ("0", Duration::ZERO),
            ("0s", Duration::ZERO),
            ("5s", Duration::from_secs(5)),
            (" 5s ", Duration::from_secs(5)),
            ("250ms", ms(250)),
            ("1.5s", ms(1500)),
            (".5s", ms(500)),
            ("1.s", Duration::from_secs(1)),
            ("1m30s", Duration::from_secs(90)),
            ("1h30m", Duration::from_secs(5400)),
            ("2h", Duration::from_secs(7200)),
            ("100us", Duration::from_micros(100)),
            ("100µs", Duration::from_micros(100)),
            ("100μs", Duration::from_micros(100)),
            ("7ns", Duration::from_nanos(7)),
            ("1.0000000009s", Duration::new(1, 0)),
            ("0.1ms", Duration::from_micros(100)),
            ("1.25m", Duration::from_secs(75)),
        ];
        for (text, want) in cases {
            assert_eq!(parse_duration(text), Ok(*want), "{text:?}");
        }
    }

    #[test]
    fn malformed_durations_say_what_is_wrong() {
        let cases: &[(&str, &str)] = &[
            ("", "empty"),
            ("5", "lacks a unit"),
            ("1m5", "lacks a unit"),
            ("5x", "unknown unit \"x\""),
            ("5 s", "unknown unit \" s\""),
            ("s", "expected a number"),
            (".s", "expected a number"),
            ("-5s", "expected a number"),
            ("1..5s", "expected a unit at \".5s\""),
        ];
        for (text, want) in cases {
            let err = parse_duration(text).expect_err(text);
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }

    #[test]
    fn enormous_durations_are_errors_not_panics() {
        for text in [
            format!("{}s", "9".repeat(400)),
            "99999999999999999999999h".to_string(),
        ] {
            let err = parse_duration(&text).expect_err(&text);
            assert!(err.contains("too large"), "{err}");
        }
        // A long fraction is cut at a nanosecond's precision.
        let long = format!("1.{}s", "9".repeat(400));
        assert_eq!(parse_duration(&long), Ok(Duration::new(1, 999_999_999)));
        let long = format!("1.{}h", "9".repeat(400));
        assert_eq!(parse_duration(&long), Ok(Duration::new(7199, 999_999_999)));
    }
}
