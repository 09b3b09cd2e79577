//! Protobuf-JSON building blocks shared by the Envoy filter configs: wrapped integers written
//! as numbers or strings, durations (`60s`), fractional percents, header options, statuses.

use serde::de::{self, Deserializer};
use serde::Deserialize;
use std::time::Duration;

/// An unsigned integer written as a number or, as protobuf JSON allows, a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Uint(pub u64);

impl<'de> Deserialize<'de> for Uint {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d).map_err(|_| {
            de::Error::custom("expected a non-negative integer (number or numeric string)")
        })? {
            Raw::N(n) => Ok(Uint(n)),
            Raw::S(s) => s
                .trim()
                .parse()
                .map(Uint)
                .map_err(|_| de::Error::custom(format!("{s:?} is not a non-negative integer"))),
        }
    }
}

/// A protobuf Duration: `"60s"`, `"0.25s"`, `"250ms"`, or `{seconds, nanos}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProtoDuration(pub Duration);

impl<'de> Deserialize<'de> for ProtoDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            S(String),
            O {
                #[serde(default)]
                seconds: Option<Uint>,
                #[serde(default)]
                nanos: Option<u32>,
            },
        }
        match Raw::deserialize(d)
            .map_err(|_| de::Error::custom("expected a duration such as \"60s\""))?
        {
            Raw::S(s) => warden_config::parse_duration(&s)
                .map(ProtoDuration)
                .map_err(de::Error::custom),
            Raw::O { seconds, nanos } => Ok(ProtoDuration(
                Duration::from_secs(seconds.map_or(0, |s| s.0))
                    + Duration::from_nanos(u64::from(nanos.unwrap_or(0))),
            )),
        }
    }
}

/// `envoy.type.v3.FractionalPercent`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct FractionalPercent {
    #[serde(default)]
    pub numerator: Option<Uint>,
    /// `HUNDRED` (default), `TEN_THOUSAND`, `MILLION`.
    #[serde(default)]
    pub denominator: Option<String>,
}

impl FractionalPercent {
    pub fn ratio(&self) -> Result<(u64, u64), String> {
        let den = match self.denominator.as_deref().unwrap_or("HUNDRED") {
            "HUNDRED" => 100,
            "TEN_THOUSAND" => 10_000,
            "MILLION" => 1_000_000,
            other => {
                return Err(format!(
                    "denominator {other:?} is not HUNDRED, TEN_THOUSAND or MILLION"
                ))
            }
        };
        Ok((self.numerator.map_or(0, |n| n.0).min(den), den))
    }
}

/// `envoy.config.core.v3.RuntimeFractionalPercent`; warden has no runtime, so the default applies.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct RuntimeFractionalPercent {
    #[serde(default, alias = "runtimeKey")]
    pub runtime_key: Option<String>,
    #[serde(alias = "defaultValue")]
    pub default_value: FractionalPercent,
}

/// `envoy.config.core.v3.HeaderValueOption`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct HeaderValueOption {
    pub header: HeaderValue,
    #[serde(default)]
    pub append: Option<bool>,
    #[serde(default, alias = "appendAction")]
    pub append_action: Option<String>,
    #[serde(default, alias = "keepEmptyValue")]
    pub keep_empty_value: Option<bool>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct HeaderValue {
    pub key: String,
    #[serde(default)]
    pub value: String,
}

/// `envoy.type.v3.HttpStatus`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct HttpStatus {
    pub code: Uint,
}

/// A status as Envoy applies it: absent or below 400 means 429.
pub fn limited_status(status: Option<&HttpStatus>) -> http::StatusCode {
    status
        .and_then(|s| u16::try_from(s.code.0).ok())
        .filter(|c| *c >= 400)
        .and_then(|c| http::StatusCode::from_u16(c).ok())
        .unwrap_or(http::StatusCode::TOO_MANY_REQUESTS)
}

/// Turn header options into name/value pairs, reporting invalid ones against `field`.
pub fn header_pairs(
    options: &[HeaderValueOption],
    field: &str,
) -> Result<Vec<(http::HeaderName, http::HeaderValue)>, (String, String)> {
    options
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let name = http::HeaderName::from_bytes(o.header.key.to_ascii_lowercase().as_bytes())
                .map_err(|_| {
                (
                    format!("{field}[{i}].header.key"),
                    format!("{:?} is not a valid header name", o.header.key),
                )
            })?;
            let value = http::HeaderValue::from_str(&o.header.value).map_err(|_| {
                (
                    format!("{field}[{i}].header.value"),
                    "not a valid header value".to_string(),
                )
            })?;
            Ok((name, value))
        })
        .collect()
}
