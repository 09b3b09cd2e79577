//! The envoyproxy/ratelimit config model: one domain and its descriptor tree.

use std::fmt;

/// One config file: a domain and its descriptor tree (reference YAML format).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RlsConfig {
    pub domain: String,
    pub descriptors: Vec<DescriptorConfig>,
}

/// One `descriptors[]` entry.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DescriptorConfig {
    pub key: String,
    /// `None` when absent or empty (a "default key"); may contain `*` wildcards.
    pub value: Option<String>,
    pub rate_limit: Option<RateLimitConfig>,
    pub shadow_mode: bool,
    pub quota_mode: bool,
    pub detailed_metric: bool,
    pub value_to_metric: bool,
    pub share_threshold: bool,
    /// Arbitrary map, kept as JSON.
    pub metadata: Option<serde_json::Value>,
    /// warden extension: escalating bans for clients that go over `rate_limit`
    /// ([`super::BanConfig`]).
    pub ban: Option<super::BanConfig>,
    pub descriptors: Vec<DescriptorConfig>,
}

/// A descriptor's `rate_limit` block.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RateLimitConfig {
    /// `None` only when `unlimited`.
    pub unit: Option<Unit>,
    pub requests_per_unit: u32,
    /// `unit_multiplier`: the window is `unit × multiplier` (`None` = absent = 1; the parser
    /// refuses an explicit 0 as the reference's unit-multiplier change does).
    pub unit_multiplier: Option<u32>,
    pub unlimited: bool,
    pub name: Option<String>,
    pub replaces: Vec<String>,
    /// warden extension: the windowing algorithm; `None` = the server default.
    pub algorithm: Option<Algorithm>,
}

/// Rate limit unit; `divider()` is the reference's `UnitToDivider`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
}

impl Unit {
    /// Parses the reference's case-insensitive unit names.
    pub fn parse(text: &str) -> Option<Unit> {
        Some(match text.to_ascii_uppercase().as_str() {
            "SECOND" => Unit::Second,
            "MINUTE" => Unit::Minute,
            "HOUR" => Unit::Hour,
            "DAY" => Unit::Day,
            "WEEK" => Unit::Week,
            "MONTH" => Unit::Month,
            "YEAR" => Unit::Year,
            _ => return None,
        })
    }

    /// Window length in seconds (months are 30 days, years 365 days, as in the reference).
    pub fn divider(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 604_800,
            Unit::Month => 2_592_000,
            Unit::Year => 31_536_000,
        }
    }

    /// The window of `unit_multiplier` units in seconds (the reference's
    /// `UnitToDividerWithMultiplier`: 0 is taken as 1 there too, as a safeguard).
    pub fn window(self, multiplier: u32) -> u64 {
        self.divider().saturating_mul(u64::from(multiplier.max(1)))
    }

    /// Upper-case name, as `/rlconfig` prints it.
    pub fn upper(self) -> &'static str {
        match self {
            Unit::Second => "SECOND",
            Unit::Minute => "MINUTE",
            Unit::Hour => "HOUR",
            Unit::Day => "DAY",
            Unit::Week => "WEEK",
            Unit::Month => "MONTH",
            Unit::Year => "YEAR",
        }
    }

    /// Lower-case name, as users write it in YAML.
    pub fn lower(self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
    }

    /// `envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit` number.
    pub fn proto(self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    /// From `envoy.type.v3.RateLimitUnit` (request overrides; it has no WEEK).
    pub fn from_override(number: i32) -> Option<Unit> {
        Some(match number {
            1 => Unit::Second,
            2 => Unit::Minute,
            3 => Unit::Hour,
            4 => Unit::Day,
            5 => Unit::Month,
            6 => Unit::Year,
            _ => return None,
        })
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.upper())
    }
}

/// warden extension: how a limit counts requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Algorithm {
    /// The reference's epoch-aligned fixed window (allows up to 2x at a window edge).
    #[default]
    FixedWindow,
    /// Sliding window estimate: the previous window's count weighted by its remaining overlap,
    /// plus the current window's count. No 2x burst at edges.
    SlidingWindow,
}

impl Algorithm {
    pub fn parse(text: &str) -> Option<Algorithm> {
        match text.to_ascii_lowercase().replace('-', "_").as_str() {
            "fixed_window" | "fixed" => Some(Algorithm::FixedWindow),
            "sliding_window" | "sliding" => Some(Algorithm::SlidingWindow),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingWindow => "sliding_window",
        }
    }
}
