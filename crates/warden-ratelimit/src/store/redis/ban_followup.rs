//! What a ban op needs once the round trip that read its state (`GET`) and counted it
//! (`INCRBY`) has answered: the decisions of [`crate::ban::schedule`], applied to what Redis
//! said. Most calls need nothing more; see [`super::ban_script`] for the commands.

use crate::ban::schedule::{self, BanCheck, BanState};

/// The step after the first round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FollowUp {
    /// Open and within the limit (or a call of zero hits): done.
    Done,
    /// Banned when read: refused, and its count taken back (a banned call is not counted).
    Uncount { remaining_ms: u64, strikes: u32 },
    /// Open and over the limit: an offence, for the atomic script to record (another service
    /// may have recorded the same offence since the read; the script then reports its ban).
    Offend,
}

/// The step for a call of `hits` that found `stored` and took the counter to `after`.
pub(super) fn follow_up(
    stored: BanState,
    forget_after_ms: u64,
    now_ms: u64,
    limit: u32,
    hits: u64,
    after: u64,
) -> FollowUp {
    match schedule::check(stored, forget_after_ms, now_ms) {
        BanCheck::Banned {
            remaining_ms,
            strikes,
        } => FollowUp::Uncount {
            remaining_ms,
            strikes,
        },
        BanCheck::Open { .. } if hits > 0 && after > u64::from(limit) => FollowUp::Offend,
        BanCheck::Open { .. } => FollowUp::Done,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_000_000;
    const FORGET: u64 = 3_600_000;

    #[test]
    fn table() {
        let never = BanState::default();
        let banned = BanState {
            until_ms: NOW + 5_000,
            strikes: 2,
        };
        let ended = BanState {
            until_ms: NOW - 1,
            strikes: 2,
        };
        let rows = [
            // (stored, hits, after, want)
            (never, 1, 1, FollowUp::Done),
            (never, 1, 300, FollowUp::Done),
            (never, 1, 301, FollowUp::Offend),
            // a zero-hit call (a read) offends no one
            (never, 0, 400, FollowUp::Done),
            (
                banned,
                1,
                1,
                FollowUp::Uncount {
                    remaining_ms: 5_000,
                    strikes: 2,
                },
            ),
            // banned whatever the count
            (
                banned,
                3,
                900,
                FollowUp::Uncount {
                    remaining_ms: 5_000,
                    strikes: 2,
                },
            ),
            (ended, 1, 12, FollowUp::Done),
            (ended, 1, 301, FollowUp::Offend),
        ];
        for (stored, hits, after, want) in rows {
            assert_eq!(
                follow_up(stored, FORGET, NOW, 300, hits, after),
                want,
                "{stored:?} hits {hits} after {after}"
            );
        }
    }
}
