//! Escalating bans as pure decisions, shared by both limiters: the local one (the proxy's
//! `BanTable`) and the global one (`warden ratelimit`'s memory store and the same logic in its
//! Redis script). A schedule (2 min, then 5, then 10, capped at the last) and one client's
//! stored state go in with the time; out come whether it is banned, how many strikes it still
//! has, and the ban an offence earns. Milliseconds throughout. See `docs/ratelimit-bans.md`.

/// A ban schedule: what a `ban` block (RateLimitPolicy, or an envoyproxy/ratelimit descriptor)
/// configures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BanSchedule {
    /// Ban length for the 1st, 2nd, ... offence; offences past the list get the last one. Not
    /// empty, no zero.
    pub durations_ms: Vec<u64>,
    /// Strikes are forgotten once a client stayed this long past its last ban's end.
    pub forget_after_ms: u64,
}

/// One client's ban state for one rule, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BanState {
    /// End of the current or last ban, in Unix milliseconds (0: never banned).
    pub until_ms: u64,
    /// Offences remembered (each started a ban).
    pub strikes: u32,
}

/// What the state says about a request at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BanCheck {
    /// Refused without counting, for this much longer.
    Banned { remaining_ms: u64, strikes: u32 },
    /// Counted as usual; an offence now would be strike `strikes + 1`.
    Open { strikes: u32 },
}

/// Whether a client with `state` is banned at `now`; strikes are forgotten once the client
/// stayed `forget_after` past its last ban's end.
pub fn check(state: BanState, forget_after_ms: u64, now_ms: u64) -> BanCheck {
    if state.until_ms > now_ms {
        return BanCheck::Banned {
            remaining_ms: state.until_ms - now_ms,
            strikes: state.strikes,
        };
    }
    let forgotten = state.until_ms > 0 && now_ms - state.until_ms >= forget_after_ms;
    BanCheck::Open {
        strikes: if forgotten { 0 } else { state.strikes },
    }
}

/// The ban length of offence number `strike` (1-based): the schedule's entry, the last one
/// once the schedule is exhausted.
pub fn duration_of(schedule: &BanSchedule, strike: u32) -> u64 {
    let index = (strike.max(1) as usize - 1).min(schedule.durations_ms.len().saturating_sub(1));
    schedule.durations_ms.get(index).copied().unwrap_or(0)
}

/// The state after an offence at `now` by a client that had `strikes` remembered.
pub fn offend(schedule: &BanSchedule, strikes: u32, now_ms: u64) -> BanState {
    let strikes = strikes.saturating_add(1);
    BanState {
        until_ms: now_ms.saturating_add(duration_of(schedule, strikes)),
        strikes,
    }
}

/// How long a stored state must be kept: until its strikes would be forgotten.
pub fn keep_ms(schedule: &BanSchedule, state: BanState, now_ms: u64) -> u64 {
    state
        .until_ms
        .saturating_sub(now_ms)
        .saturating_add(schedule.forget_after_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: u64 = 60_000;

    fn schedule() -> BanSchedule {
        BanSchedule {
            durations_ms: vec![2 * MIN, 5 * MIN, 10 * MIN],
            forget_after_ms: 60 * MIN,
        }
    }

    #[test]
    fn durations_grow_and_cap_at_the_last() {
        let s = schedule();
        let rows = [
            (1, 2 * MIN),
            (2, 5 * MIN),
            (3, 10 * MIN),
            (4, 10 * MIN),
            (99, 10 * MIN),
        ];
        for (strike, want) in rows {
            assert_eq!(duration_of(&s, strike), want, "strike {strike}");
        }
    }

    #[test]
    fn check_table() {
        let t = 1_000_000;
        let rows = [
            // never banned
            (BanState::default(), t, BanCheck::Open { strikes: 0 }),
            // inside a ban
            (
                BanState {
                    until_ms: t + 30_000,
                    strikes: 1,
                },
                t,
                BanCheck::Banned {
                    remaining_ms: 30_000,
                    strikes: 1,
                },
            ),
            // at its end: open, strikes remembered
            (
                BanState {
                    until_ms: t,
                    strikes: 2,
                },
                t,
                BanCheck::Open { strikes: 2 },
            ),
            // just before the quiet period is over
            (
                BanState {
                    until_ms: t,
                    strikes: 2,
                },
                t + 60 * MIN - 1,
                BanCheck::Open { strikes: 2 },
            ),
            // quiet for forget_after: forgotten
            (
                BanState {
                    until_ms: t,
                    strikes: 3,
                },
                t + 60 * MIN,
                BanCheck::Open { strikes: 0 },
            ),
        ];
        for (state, now, want) in rows {
            assert_eq!(check(state, 60 * MIN, now), want, "{state:?} at {now}");
        }
    }

    #[test]
    fn offences_escalate() {
        let s = schedule();
        let first = offend(&s, 0, 0);
        assert_eq!(
            first,
            BanState {
                until_ms: 2 * MIN,
                strikes: 1
            }
        );
        let second = offend(&s, first.strikes, 3 * MIN);
        assert_eq!(
            second,
            BanState {
                until_ms: 8 * MIN,
                strikes: 2
            }
        );
        assert_eq!(keep_ms(&s, second, 3 * MIN), 5 * MIN + 60 * MIN);
        let fourth = offend(&s, 3, 0);
        assert_eq!(fourth.until_ms, 10 * MIN, "capped at the last period");
    }
}
