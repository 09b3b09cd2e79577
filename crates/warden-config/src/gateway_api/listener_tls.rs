//! The Istio TLS mode of a listener that terminates TLS: the Gateway API has no client
//! certificate mode on a listener, so Istio reads it from `tls.options`
//! (`gateway.istio.io/tls-terminate-mode: MUTUAL`, istio.io's secure-ingress task); without it
//! the mode is SIMPLE.

use std::collections::BTreeMap;

/// The option Istio's gateway controller reads the termination mode from.
pub const TERMINATE_MODE: &str = "gateway.istio.io/tls-terminate-mode";

/// What `tls.options` of a Terminate listener give: the Istio server mode, and the options
/// that change nothing (each a key and why), for a located warning.
#[derive(Debug, PartialEq)]
pub struct TerminateMode {
    pub mode: &'static str,
    pub ignored: Vec<(String, String)>,
}

/// The mode a Terminate listener with `options` is served with. `Err`: a mode warden cannot
/// serve (Istio's `ISTIO_MUTUAL` on a gateway; warden's Gateway refuses it too).
pub fn terminate_mode(options: &BTreeMap<String, String>) -> Result<TerminateMode, String> {
    let mut ignored = Vec::new();
    let mut mode = "SIMPLE";
    for (key, value) in options {
        if key != TERMINATE_MODE {
            ignored.push((key.clone(), "not an option warden (or Istio) reads".into()));
            continue;
        }
        match value.as_str() {
            "MUTUAL" => mode = "MUTUAL",
            "SIMPLE" => {}
            "ISTIO_MUTUAL" => {
                return Err(format!(
                    "{TERMINATE_MODE}: ISTIO_MUTUAL on a gateway is not supported by warden \
                     (use MUTUAL with a ca.crt in the certificate's folder)"
                ))
            }
            // Istio falls back to SIMPLE for any other value; say so.
            other => ignored.push((
                key.clone(),
                format!("{other:?} is not MUTUAL or SIMPLE; the listener terminates as SIMPLE"),
            )),
        }
    }
    Ok(TerminateMode { mode, ignored })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_terminate_mode_option_as_istio_reads_it() {
        // (options, mode, how many are reported as not used)
        type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, usize);
        let cases: [Case; 5] = [
            (&[], "SIMPLE", 0),
            (&[(TERMINATE_MODE, "MUTUAL")], "MUTUAL", 0),
            (&[(TERMINATE_MODE, "SIMPLE")], "SIMPLE", 0),
            (&[(TERMINATE_MODE, "mutual")], "SIMPLE", 1),
            (
                &[(TERMINATE_MODE, "MUTUAL"), ("example.com/other", "x")],
                "MUTUAL",
                1,
            ),
        ];
        for (given, mode, ignored) in cases {
            let got = terminate_mode(&options(given)).unwrap();
            assert_eq!((got.mode, got.ignored.len()), (mode, ignored), "{given:?}");
        }
        assert!(terminate_mode(&options(&[(TERMINATE_MODE, "ISTIO_MUTUAL")])).is_err());
    }
}
