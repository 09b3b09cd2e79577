//! Whether a request's span is sampled, as Envoy decides it for Istio: a caller's sampling
//! decision (the `traceparent` flag, B3's sampled state) is kept (Envoy's OpenTelemetry tracer
//! takes the parent's flag; Zipkin's the B3 state); otherwise `x-client-trace-id` samples it
//! (`client_sampling`, 100% as Istio sets it), `x-envoy-force-trace` from an internal client
//! does, and else a random draw against the sampling percentage (`random_sampling`, which
//! Istio sets from `defaultConfig.tracing.sampling` or Telemetry's
//! `randomSamplingPercentage`, 1% by default).

/// Why a span is (not) sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The caller's decision.
    Parent,
    /// `x-client-trace-id`.
    Client,
    /// `x-envoy-force-trace` from an internal client.
    Forced,
    /// The random draw.
    Random,
}

/// What a request brings to the decision.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SamplingInput {
    /// The caller's decision, when it made one.
    pub parent: Option<bool>,
    /// The request has `x-client-trace-id`.
    pub client_trace_id: bool,
    /// The request has `x-envoy-force-trace` and comes from an internal address.
    pub forced_internal: bool,
}

/// The decision and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub sampled: bool,
    pub reason: Reason,
}

/// The denominator of Envoy's sampling fraction (a percentage with two decimals).
pub const TEN_THOUSAND: u32 = 10_000;

/// A sampling percentage as Envoy's fraction of [`TEN_THOUSAND`] (1% is 100; values outside
/// 0..=100 are clamped; Istio's validation refuses them before this).
pub fn per_ten_thousand(percent: f64) -> u32 {
    if percent.is_nan() {
        return 0;
    }
    (percent.clamp(0.0, 100.0) * 100.0).round() as u32
}

/// The decision; `draw` is a uniform random number (only its value modulo [`TEN_THOUSAND`] is
/// used, as Envoy's runtime feature check does).
pub fn decide(input: SamplingInput, per_ten_thousand: u32, draw: u32) -> Decision {
    let (sampled, reason) = match input {
        SamplingInput {
            parent: Some(sampled),
            ..
        } => (sampled, Reason::Parent),
        SamplingInput {
            client_trace_id: true,
            ..
        } => (true, Reason::Client),
        SamplingInput {
            forced_internal: true,
            ..
        } => (true, Reason::Forced),
        _ => (draw % TEN_THOUSAND < per_ten_thousand, Reason::Random),
    };
    Decision { sampled, reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_wins_then_client_then_forced_then_the_draw() {
        let none = SamplingInput::default();
        let parent = |s| SamplingInput {
            parent: Some(s),
            client_trace_id: true,
            forced_internal: true,
        };
        let client = SamplingInput {
            client_trace_id: true,
            ..none
        };
        let forced = SamplingInput {
            forced_internal: true,
            ..none
        };
        let cases = [
            (parent(false), 10_000, 0, false, Reason::Parent),
            (parent(true), 0, 9_999, true, Reason::Parent),
            (client, 0, 9_999, true, Reason::Client),
            (forced, 0, 9_999, true, Reason::Forced),
            (none, 100, 99, true, Reason::Random),
            (none, 100, 100, false, Reason::Random),
            (none, 100, 10_099, true, Reason::Random),
            (none, 0, 0, false, Reason::Random),
            (none, 10_000, 9_999, true, Reason::Random),
        ];
        for (input, fraction, draw, sampled, reason) in cases {
            assert_eq!(
                decide(input, fraction, draw),
                Decision { sampled, reason },
                "{input:?} {fraction} {draw}"
            );
        }
    }

    #[test]
    fn percentages_become_ten_thousandths() {
        for (percent, want) in [
            (1.0, 100),
            (100.0, 10_000),
            (0.01, 1),
            (0.0, 0),
            (150.0, 10_000),
            (-1.0, 0),
            (f64::NAN, 0),
            (33.335, 3334),
        ] {
            assert_eq!(per_ten_thousand(percent), want, "{percent}");
        }
    }
}
