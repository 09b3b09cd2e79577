//! The BPF programs' counters (the `wd_counters` ARRAY map), named in slot order, and how
//! they read in `warden accel status` and on the admin `/stats/prometheus`.

use std::fmt::Write as _;

/// One slot of `wd_counters`; the order is the C enum's in bpf/accel.bpf.c.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    Inserted,
    InsertFailed,
    Redirected,
    RedirectedBytes,
    RedirectMisses,
    CaptureOutbound,
    CaptureInbound,
    OriginalDst,
    UlpPassed,
    UlpSockets,
    PeerName,
    Spliced,
    SplicedBytes,
    AfterMiss,
}

impl Counter {
    pub const ALL: [Counter; 14] = [
        Counter::Inserted,
        Counter::InsertFailed,
        Counter::Redirected,
        Counter::RedirectedBytes,
        Counter::RedirectMisses,
        Counter::CaptureOutbound,
        Counter::CaptureInbound,
        Counter::OriginalDst,
        Counter::UlpPassed,
        Counter::UlpSockets,
        Counter::PeerName,
        Counter::Spliced,
        Counter::SplicedBytes,
        Counter::AfterMiss,
    ];

    pub fn slot(self) -> u32 {
        self as u32
    }

    /// The Prometheus name, without the `warden_accel_` prefix.
    pub fn metric(self) -> &'static str {
        match self {
            Counter::Inserted => "sockets_inserted_total",
            Counter::InsertFailed => "socket_insert_failures_total",
            Counter::Redirected => "messages_redirected_total",
            Counter::RedirectedBytes => "redirected_bytes_total",
            Counter::RedirectMisses => "redirect_misses_total",
            Counter::CaptureOutbound => "capture_outbound_rewrites_total",
            Counter::CaptureInbound => "capture_inbound_rewrites_total",
            Counter::OriginalDst => "original_dst_answers_total",
            Counter::UlpPassed => "ulp_messages_passed_total",
            Counter::UlpSockets => "ulp_sockets_total",
            Counter::PeerName => "peer_name_answers_total",
            Counter::Spliced => "messages_spliced_total",
            Counter::SplicedBytes => "spliced_bytes_total",
            Counter::AfterMiss => "messages_after_miss_total",
        }
    }

    pub fn help(self) -> &'static str {
        match self {
            Counter::Inserted => "Established mesh sockets put into the socket map",
            Counter::InsertFailed => "Sockets the kernel refused into the map (e.g. with a ULP)",
            Counter::Redirected => "Messages sk_msg put straight into the peer socket",
            Counter::RedirectedBytes => "Bytes of those messages",
            Counter::RedirectMisses => "Messages whose peer was not in the map (sent over TCP)",
            Counter::CaptureOutbound => "App connect()s rewritten to the sidecar's outbound port",
            Counter::CaptureInbound => {
                "Sidecar connect()s to a meshed pod of this node rewritten to its inbound port"
            }
            Counter::OriginalDst => "SO_ORIGINAL_DST answers given from the capture map",
            Counter::UlpPassed => "Messages of ULP (kTLS) sockets or their peers left to TCP",
            Counter::UlpSockets => "Sockets that set a ULP (kTLS) and were excluded",
            Counter::PeerName => "getpeername() answers naming a captured connection's destination",
            Counter::Spliced => {
                "App messages put straight into the other app's socket, past both sidecars of a spliced TCP relay"
            }
            Counter::SplicedBytes => "Bytes of those messages",
            Counter::AfterMiss => {
                "Messages sent over TCP because an earlier one of the socket missed (keeps their order)"
            }
        }
    }
}

/// One reading of every slot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters(pub [u64; Counter::ALL.len()]);

impl Counters {
    pub fn get(&self, c: Counter) -> u64 {
        self.0[c as usize]
    }

    /// Prometheus text (counters only; the caller adds `# EOF`).
    pub fn prometheus(&self, out: &mut String) {
        for c in Counter::ALL {
            let name = format!("warden_accel_{}", c.metric());
            let base = name.trim_end_matches("_total");
            // Writing to a String cannot fail.
            // The maps are shared by every sidecar using the same bpffs: node-wide counts.
            let _ = writeln!(out, "# HELP {base} {} (node-wide).", c.help());
            let _ = writeln!(out, "# TYPE {base} counter");
            let _ = writeln!(out, "{name} {}", self.get(c));
        }
    }

    /// `name value` lines for `warden accel status`.
    pub fn table(&self) -> String {
        let mut out = String::new();
        for c in Counter::ALL {
            let _ = writeln!(
                out,
                "  {:<34} {}",
                c.metric().trim_end_matches("_total"),
                self.get(c)
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_c_enum_order() {
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(c.slot() as usize, i);
        }
        let src = include_str!("../bpf/accel.bpf.c");
        let start = src.find("C_INSERTED,").expect("enum in the C source");
        let names: Vec<&str> = src[start..]
            .lines()
            .map(|l| l.trim().trim_end_matches(','))
            .take_while(|l| *l != "C_COUNT")
            .collect();
        assert_eq!(names.len(), Counter::ALL.len(), "{names:?}");
    }

    #[test]
    fn prometheus_text_names_every_counter() {
        let mut c = Counters::default();
        c.0[Counter::Redirected as usize] = 7;
        let mut out = String::new();
        c.prometheus(&mut out);
        assert!(
            out.contains("warden_accel_messages_redirected_total 7\n"),
            "{out}"
        );
        assert!(
            out.contains("# TYPE warden_accel_redirect_misses counter\n"),
            "{out}"
        );
        assert_eq!(out.matches("# TYPE").count(), Counter::ALL.len());
    }
}
