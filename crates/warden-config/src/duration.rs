//! Protobuf-JSON / Go style durations as written in Istio resources: `5s`, `250ms`, `1.5s`, `1m30s`.

use std::time::Duration;

/// Parse a duration such as `5s`, `250ms`, `1.5s`, `2m`, `1h30m`, `100us`, `0s`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err("empty duration".into());
    }
    if s == "0" {
        // Go's time.ParseDuration accepts a bare zero (envoyproxy/ratelimit settings use it).
        return Ok(Duration::ZERO);
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("duration {text:?} lacks a unit (ns, us, ms, s, m, h)"))?;
        if num_len == 0 {
            return Err(format!("invalid duration {text:?}"));
        }
        let value: f64 = rest[..num_len]
            .parse()
            .map_err(|_| format!("invalid number in duration {text:?}"))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            other => return Err(format!("unknown unit {other:?} in duration {text:?}")),
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    // A number of digits long enough is beyond any Duration (or infinite as an f64).
    Duration::try_from_secs_f64(total).map_err(|_| format!("duration {text:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_istio_durations() {
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert!(parse_duration("5").is_err());
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("").is_err());
    }

    /// Found by fuzz/config_load: a 400-digit number of seconds panicked converting to Duration.
    #[test]
    fn an_enormous_duration_is_an_error_not_a_panic() {
        let text = format!("{}s", "9".repeat(400));
        assert!(parse_duration(&text).unwrap_err().contains("too large"));
        assert!(parse_duration("99999999999999999999999h").is_err());
    }
}
