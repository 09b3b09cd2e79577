//! A request whose client goes away before its answer (Envoy's `DC`): the waiting request's
//! future is dropped (hyper's server on the connection's EOF or the stream's reset, the fast
//! path when its client closes, see `listeners::fast_h1`), and this guard, dropped with it,
//! counts the request in Istio's metrics with code `0` and logs it as Envoy does:
//! `0 DC downstream_remote_disconnect`, with the upstream it was waiting for.

use super::{istio_record, LogFields, Outcome, Shared};
use crate::core::conn::ConnCtx;
use crate::core::local_reply::{ResponseFlag, ResponseFlags};
use std::time::Instant;

/// What a waiting request leaves for its metrics and log line, owned until it is answered.
pub(super) struct Unanswered<'a> {
    shared: &'a Shared,
    conn: &'a ConnCtx,
    start: Instant,
    pub outcome: Outcome,
    pub log: Option<LogFields>,
    answered: bool,
}

impl<'a> Unanswered<'a> {
    pub fn new(
        shared: &'a Shared,
        conn: &'a ConnCtx,
        start: Instant,
        outcome: Outcome,
        log: Option<LogFields>,
    ) -> Self {
        Unanswered {
            shared,
            conn,
            start,
            outcome,
            log,
            answered: false,
        }
    }

    /// The request is answered: its outcome (in place: it is large, and taking it out cost
    /// two copies of it) and log fields go on to `finish`.
    pub fn answered(&mut self) -> (&mut Outcome, Option<LogFields>) {
        self.answered = true;
        (&mut self.outcome, self.log.take())
    }

    #[cold]
    fn disconnected(&mut self) {
        let elapsed = self.start.elapsed();
        let flag = ResponseFlag::DownstreamConnectionTermination;
        istio_record::record_unanswered(
            self.shared,
            self.conn,
            elapsed,
            self.outcome.route.as_deref(),
            self.outcome.istio,
            flag,
        );
        let (Some(access_log), Some(fields)) = (&self.shared.access_log, self.log.take()) else {
            return;
        };
        if !fields.filter.is_none_or(|f| f.admits(0)) {
            return;
        }
        let mut r = fields.record;
        r.duration = elapsed;
        r.status = 0;
        let mut flags = ResponseFlags::default();
        flags.set(flag);
        r.flags = flags;
        r.set_text(crate::core::access_log::Field::Details, flag.details());
        super::upstream_fields(&mut r, &self.outcome);
        access_log.log(r);
    }
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.disconnected();
        }
    }
}
