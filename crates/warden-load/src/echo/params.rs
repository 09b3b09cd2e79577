//! Query parameters of the echo server, fortio style: `size=N`, `status=CODE`, `delay=DURATION`,
//! `header=Name:Value` (repeatable). `size`, `status` and `delay` take weighted lists:
//! `status=503:5,429:1` answers 503 for 5% of requests, 429 for 1%, the default otherwise.
//! Entries without a weight share what the weighted ones leave equally (`status=503,429` = 50/50).

use http::{HeaderName, HeaderValue, StatusCode};
use std::time::Duration;

/// Largest body `size=` may ask for; keeps a stray query from allocating gigabytes.
pub const MAX_SIZE: usize = 64 << 20;
/// Longest `delay=`; a test that wants longer is better served by its own server.
pub const MAX_DELAY: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ParamError {
    #[error("{param}: {reason}")]
    Invalid { param: &'static str, reason: String },
}

fn invalid(param: &'static str, reason: impl Into<String>) -> ParamError {
    ParamError::Invalid {
        param,
        reason: reason.into(),
    }
}

/// A choice among values with percentages; what remains up to 100% picks the default.
#[derive(Debug, Clone, PartialEq)]
pub struct Weighted<T> {
    /// (value, cumulative percentage up to and including this entry)
    choices: Vec<(T, f64)>,
}

impl<T> Weighted<T> {
    pub fn parse(
        param: &'static str,
        text: &str,
        parse_one: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Self, ParamError> {
        let mut explicit = Vec::new();
        let mut implicit = Vec::new();
        for entry in text.split(',').filter(|e| !e.is_empty()) {
            match entry.rsplit_once(':') {
                Some((value, pct)) => {
                    let pct: f64 = pct
                        .parse()
                        .ok()
                        .filter(|p: &f64| p.is_finite() && *p >= 0.0)
                        .ok_or_else(|| invalid(param, format!("bad percentage in {entry:?}")))?;
                    explicit.push((parse_one(value).map_err(|r| invalid(param, r))?, pct));
                }
                None => implicit.push(parse_one(entry).map_err(|r| invalid(param, r))?),
            }
        }
        let weighted_sum: f64 = explicit.iter().map(|(_, p)| p).sum();
        if weighted_sum > 100.0 + 1e-9 {
            return Err(invalid(
                param,
                format!("percentages add up to {weighted_sum} > 100"),
            ));
        }
        if explicit.is_empty() && implicit.is_empty() {
            return Err(invalid(param, "empty value"));
        }
        let share = if implicit.is_empty() {
            0.0
        } else {
            (100.0 - weighted_sum) / implicit.len() as f64
        };
        let mut cumulative = 0.0;
        let choices = explicit
            .into_iter()
            .chain(implicit.into_iter().map(|v| (v, share)))
            .map(|(v, p)| {
                cumulative += p;
                (v, cumulative)
            })
            .collect();
        Ok(Weighted { choices })
    }

    /// Every value a roll can pick (the default aside).
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.choices.iter().map(|(v, _)| v)
    }

    /// The value for a roll in [0, 100); `None` means "use the default".
    pub fn pick(&self, roll: f64) -> Option<&T> {
        self.choices
            .iter()
            .find(|(_, upto)| roll < *upto)
            .map(|(v, _)| v)
    }
}

/// Parsed echo parameters of one request.
#[derive(Debug, Default)]
pub struct EchoParams {
    pub status: Option<Weighted<StatusCode>>,
    pub size: Option<Weighted<usize>>,
    pub delay: Option<Weighted<Duration>>,
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

/// What one request gets after the weighted choices are rolled.
#[derive(Debug, PartialEq)]
pub struct Resolved {
    pub status: StatusCode,
    pub size: Option<usize>,
    pub delay: Duration,
}

impl EchoParams {
    /// Parse a raw query string (percent-encoded); unknown parameters are ignored, as fortio does.
    pub fn parse(query: &str) -> Result<EchoParams, ParamError> {
        let mut params = EchoParams::default();
        for (key, value) in form_urlencoded::parse(query.as_bytes()) {
            match key.as_ref() {
                "status" => params.status = Some(Weighted::parse("status", &value, parse_status)?),
                "size" => params.size = Some(Weighted::parse("size", &value, parse_size)?),
                "delay" => params.delay = Some(Weighted::parse("delay", &value, parse_delay)?),
                "header" => params.headers.push(parse_header(&value)?),
                _ => {}
            }
        }
        Ok(params)
    }

    /// Whether some roll of `delay` waits at all (`delay=0` never does).
    pub fn may_delay(&self) -> bool {
        self.delay
            .as_ref()
            .is_some_and(|list| list.values().any(|d| !d.is_zero()))
    }

    /// Roll each weighted list independently, as fortio does.
    pub fn resolve(&self, mut roll: impl FnMut() -> f64) -> Resolved {
        Resolved {
            status: pick(&self.status, &mut roll).unwrap_or(StatusCode::OK),
            size: pick(&self.size, &mut roll),
            delay: pick(&self.delay, &mut roll).unwrap_or(Duration::ZERO),
        }
    }
}

fn pick<T: Copy>(list: &Option<Weighted<T>>, roll: &mut impl FnMut() -> f64) -> Option<T> {
    list.as_ref().and_then(|w| w.pick(roll()).copied())
}

fn parse_status(text: &str) -> Result<StatusCode, String> {
    let code: u16 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a status code"))?;
    match StatusCode::from_u16(code) {
        Ok(status) if code >= 200 => Ok(status),
        _ => Err(format!("{code} is not a final status code (200..=999)")),
    }
}

fn parse_size(text: &str) -> Result<usize, String> {
    let size: usize = text
        .parse()
        .map_err(|_| format!("{text:?} is not a byte count"))?;
    if size > MAX_SIZE {
        return Err(format!("{size} exceeds the limit of {MAX_SIZE} bytes"));
    }
    Ok(size)
}

fn parse_delay(text: &str) -> Result<Duration, String> {
    let delay = crate::duration::parse_duration(text)?;
    if delay > MAX_DELAY {
        return Err(format!("{text} exceeds the limit of {MAX_DELAY:?}"));
    }
    Ok(delay)
}

fn parse_header(text: &str) -> Result<(HeaderName, HeaderValue), ParamError> {
    let (name, value) = text
        .split_once(':')
        .ok_or_else(|| invalid("header", format!("{text:?} is not Name:Value")))?;
    let name = HeaderName::try_from(name.trim())
        .map_err(|_| invalid("header", format!("{name:?} is not a header name")))?;
    let value = HeaderValue::try_from(value.trim())
        .map_err(|_| invalid("header", format!("{value:?} is not a header value")))?;
    Ok((name, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weighted_list_picks_by_cumulative_percentage() {
        let w = Weighted::parse("status", "503:5,429:1", parse_status).unwrap();
        assert_eq!(w.pick(0.0), Some(&StatusCode::SERVICE_UNAVAILABLE));
        assert_eq!(w.pick(4.99), Some(&StatusCode::SERVICE_UNAVAILABLE));
        assert_eq!(w.pick(5.5), Some(&StatusCode::TOO_MANY_REQUESTS));
        assert_eq!(w.pick(6.0), None);
        assert_eq!(w.pick(99.9), None);
    }

    #[test]
    fn unweighted_entries_share_the_rest() {
        let w = Weighted::parse("size", "10:50,20,30", parse_size).unwrap();
        assert_eq!(w.pick(49.0), Some(&10));
        assert_eq!(w.pick(74.0), Some(&20));
        assert_eq!(w.pick(99.0), Some(&30));
        let single = Weighted::parse("size", "1024", parse_size).unwrap();
        assert_eq!(single.pick(99.99), Some(&1024));
    }

    #[test]
    fn rejects_bad_values() {
        assert!(EchoParams::parse("status=99").is_err());
        assert!(EchoParams::parse("status=abc").is_err());
        assert!(EchoParams::parse("status=503:80,429:30").is_err());
        assert!(EchoParams::parse("size=-1").is_err());
        assert!(EchoParams::parse("size=999999999999").is_err());
        assert!(EchoParams::parse("delay=10").is_err());
        assert!(EchoParams::parse("delay=2h").is_err());
        assert!(EchoParams::parse("header=novalue").is_err());
        assert!(EchoParams::parse("header=bad%20name:x").is_err());
    }

    #[test]
    fn parses_a_full_query() {
        let p =
            EchoParams::parse("size=1024&status=418&delay=10ms&header=X-A:b&header=X-C:%20d&x=1")
                .unwrap();
        let r = p.resolve(|| 50.0);
        assert_eq!(
            r,
            Resolved {
                status: StatusCode::IM_A_TEAPOT,
                size: Some(1024),
                delay: Duration::from_millis(10)
            }
        );
        assert_eq!(p.headers.len(), 2);
        assert_eq!(p.headers[1].1, "d");
        assert!(p.may_delay());
    }

    #[test]
    fn zero_delays_never_wait() {
        assert!(!EchoParams::parse("size=1").unwrap().may_delay());
        assert!(!EchoParams::parse("delay=0").unwrap().may_delay());
        assert!(!EchoParams::parse("delay=0s:50").unwrap().may_delay());
        assert!(EchoParams::parse("delay=0,1ms").unwrap().may_delay());
    }
}
