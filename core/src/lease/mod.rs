//! The lease policy: the timing rules that keep a leased machine id safe, with no I/O.
//!
//! A holder renews its lease every `guarder_delay`. The store records
//! `expires_at = store now + safe_guard`, and nobody else takes the machine id before that. The
//! holder itself stops generating earlier, at a local deadline counted on a clock that keeps running
//! through suspend, from the moment the renewal was *sent*:
//!
//! ```text
//! deadline = renewal sent + safe_guard - margin,   margin = min(10 s, safe_guard / 10)
//! ```
//!
//! Every claim and renewal also writes a watermark, an upper bound on every timestamp that can be
//! issued before the next write: `local now + safe_guard`. The generator never issues a timestamp
//! at or past the bound it last wrote, and a new holder waits until its clock passes the
//! watermark it found.

use std::fmt;

pub mod session;
pub mod status;

pub use status::{AtomicText, GeneratorProblem, GeneratorStatus, LeaseSnapshot, UNKNOWN_TIME};

/// The states a lease goes through, as the status view shows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum LeaseState {
    /// Looking for a machine id (at start, after a loss, while the store is unavailable).
    Claiming = 0,
    /// Holding a machine id and renewing it.
    Up = 1,
    /// Holding a machine id whose last renewal failed; generation stops at the local deadline.
    Down = 2,
    /// The store says somebody else holds the machine id now; generation has stopped.
    Lost = 3,
    /// A machine id was found, but its watermark is further ahead of this server's clock than the
    /// broken threshold; it was given back.
    ClockBehind = 4,
    /// Not generating: shutting down, a standby, the extension not created yet, or an unusable
    /// local state file.
    Stopped = 5,
}

impl LeaseState {
    pub const fn name(self) -> &'static str {
        match self {
            LeaseState::Claiming => "CLAIMING",
            LeaseState::Up => "UP",
            LeaseState::Down => "DOWN",
            LeaseState::Lost => "LOST",
            LeaseState::ClockBehind => "CLOCK_BEHIND",
            LeaseState::Stopped => "STOPPED",
        }
    }

    /// The state as the start of a sentence, for an error's DETAIL.
    pub const fn sentence(self) -> &'static str {
        match self {
            LeaseState::Claiming => "The background worker is claiming a machine id.",
            LeaseState::Up => "The lease is held and renewed.",
            LeaseState::Down => "The lease is held, but its last renewal failed.",
            LeaseState::Lost => "The lease was lost: the lease store shows another holder of the machine id.",
            LeaseState::ClockBehind => "The machine id found was given back: its watermark is ahead of this server's clock by more than cosid.clock_backwards_broken_threshold.",
            LeaseState::Stopped => "The lease is stopped.",
        }
    }

    pub fn from_u8(value: u8) -> LeaseState {
        match value {
            0 => LeaseState::Claiming,
            1 => LeaseState::Up,
            2 => LeaseState::Down,
            3 => LeaseState::Lost,
            4 => LeaseState::ClockBehind,
            _ => LeaseState::Stopped,
        }
    }
}

/// The lease's state, last renewal and last error in full sentences, for an error's DETAIL:
/// `last_renewed` is the time of the last successful renewal already written out, `None` when no
/// renewal has succeeded yet.
pub fn situation(state: LeaseState, last_renewed: Option<&str>, last_error: &str) -> String {
    let sentence = state.sentence();
    let mut text = format!(
        "{} (state {} in cosid.status).",
        sentence.trim_end_matches('.'),
        state.name()
    );
    match last_renewed {
        Some(at) => {
            text.push_str(" The last successful renewal was at ");
            text.push_str(at);
            text.push_str(" by the lease store's clock.");
        }
        None => text.push_str(" No renewal has succeeded yet."),
    }
    let error = last_error.trim().trim_end_matches('.');
    if !error.is_empty() {
        text.push_str(" The last error was: ");
        text.push_str(error);
        text.push('.');
    }
    text
}

/// The SQLSTATE class of a refusal: `Prerequisite` (55000) needs an operator, `Unavailable`
/// (55P03) passes by itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefusalKind {
    Prerequisite,
    Unavailable,
}

/// An error's parts: its class, message, DETAIL and HINT.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub kind: RefusalKind,
    pub message: String,
    pub detail: String,
    pub hint: &'static str,
}

const RETRY_HINT: &str = "Retry in a moment: ids are generated again as soon as the background \
                          worker holds a lease. If this lasts, see cosid.status and the server log.";

/// Why a leased generator refused an id because it was closed, composed from one snapshot of
/// its lease (`state`, `problem`, the last renewal written out, the last error as the caller
/// may see it): the message and the DETAIL say the same thing. The generator was found closed
/// before the snapshot was taken, so a snapshot that shows a lease held means it was claimed
/// in between.
pub fn no_lease_refusal(
    namespace: &str,
    state: LeaseState,
    problem: GeneratorProblem,
    last_renewed: Option<&str>,
    last_error: &str,
) -> Refusal {
    let situation = situation(state, last_renewed, last_error);
    if matches!(state, LeaseState::Up | LeaseState::Down) {
        return Refusal {
            kind: RefusalKind::Unavailable,
            message: format!(
                "cosid had no machine id lease in namespace \"{namespace}\" when the id was asked for"
            ),
            detail: format!("The lease was claimed just after. {situation}"),
            hint: "Retry: ids are generated now that the background worker holds a lease.",
        };
    }
    let message = format!("cosid holds no machine id lease in namespace \"{namespace}\"");
    match problem {
        // Only an operator ends these: the extension is missing or older than the library in
        // the lease table's database, or the namespace holds ids of another layout.
        GeneratorProblem::NoExtension | GeneratorProblem::LayoutMismatch => Refusal {
            kind: RefusalKind::Prerequisite,
            message,
            detail: situation,
            hint: "The last error says what to change. See cosid.status and the server log.",
        },
        // Claiming, a lost lease, a clock behind the last holder's watermark: the background
        // worker ends each by itself.
        _ => Refusal {
            kind: RefusalKind::Unavailable,
            message,
            detail: situation,
            hint: RETRY_HINT,
        },
    }
}

/// The longest safe guard: a day, what the lease stores accept and the longest they settle for
/// after forgetting claims (`cosid.safe_guard_duration`'s upper bound).
pub const LONGEST_SAFE_GUARD_MS: u64 = 86_400_000;

/// The lease timing settings, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseTiming {
    pub safe_guard_ms: u64,
    pub guarder_delay_ms: u64,
    pub guarder_initial_delay_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TimingError {
    /// The first renewal would come after the lease had lapsed.
    InitialDelayTooLong { initial_ms: u64, limit_ms: u64 },
    /// Renewals would come after the lease had lapsed.
    DelayTooLong { delay_ms: u64, limit_ms: u64 },
}

impl fmt::Display for TimingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimingError::InitialDelayTooLong {
                initial_ms,
                limit_ms,
            } => write!(
                f,
                "cosid.guarder_initial_delay ({initial_ms} ms) must be shorter than \
                 cosid.safe_guard_duration minus its margin ({limit_ms} ms), or the lease lapses \
                 before its first renewal"
            ),
            TimingError::DelayTooLong { delay_ms, limit_ms } => write!(
                f,
                "cosid.guarder_delay ({delay_ms} ms) must be shorter than \
                 cosid.safe_guard_duration minus its margin ({limit_ms} ms), or the lease lapses \
                 between renewals"
            ),
        }
    }
}

impl LeaseTiming {
    /// The part of the safe guard kept back for clock skew: min(10 s, safe_guard / 10).
    pub fn margin_ms(&self) -> u64 {
        (self.safe_guard_ms / 10).min(10_000)
    }

    /// How long after sending a renewal the holder may generate.
    pub fn usable_ms(&self) -> u64 {
        self.safe_guard_ms - self.margin_ms()
    }

    pub fn validate(&self) -> Result<(), TimingError> {
        let limit_ms = self.usable_ms();
        if self.guarder_initial_delay_ms >= limit_ms {
            return Err(TimingError::InitialDelayTooLong {
                initial_ms: self.guarder_initial_delay_ms,
                limit_ms,
            });
        }
        if self.guarder_delay_ms >= limit_ms {
            return Err(TimingError::DelayTooLong {
                delay_ms: self.guarder_delay_ms,
                limit_ms,
            });
        }
        Ok(())
    }

    /// The same timings with the delays shortened, where needed, to a third of the usable time,
    /// so that they validate: for settings that changed after the server checked them.
    pub fn clamped(&self) -> LeaseTiming {
        let limit_ms = (self.usable_ms() / 3).max(1);
        LeaseTiming {
            safe_guard_ms: self.safe_guard_ms,
            guarder_delay_ms: self.guarder_delay_ms.min(limit_ms),
            guarder_initial_delay_ms: self.guarder_initial_delay_ms.min(limit_ms),
        }
    }

    /// The local deadline of a renewal (or claim) sent at `sent_monotonic_ms`.
    pub fn deadline_ms(&self, sent_monotonic_ms: u64) -> u64 {
        sent_monotonic_ms + self.usable_ms()
    }

    /// The watermark to write with a claim or renewal sent when the wall clock read
    /// `now_unix_ms`: no id issued before the next write may reach it, because generation stops
    /// at the deadline, `usable_ms` after sending, and the generator is bounded by it as well.
    pub fn watermark_ms(&self, now_unix_ms: i64) -> i64 {
        now_unix_ms + self.safe_guard_ms as i64
    }
}

/// The wall-clock time (Unix ms) of a local deadline on the monotonic clock, for display: the
/// deadline's distance from `now_monotonic_ms`, added to `now_unix_ms`. `None` for no deadline
/// (`u64::MAX`).
pub fn deadline_unix_ms(deadline_ms: u64, now_monotonic_ms: u64, now_unix_ms: i64) -> Option<i64> {
    if deadline_ms == u64::MAX {
        return None;
    }
    let ahead = i64::try_from(deadline_ms.abs_diff(now_monotonic_ms)).unwrap_or(i64::MAX);
    Some(if deadline_ms >= now_monotonic_ms {
        now_unix_ms.saturating_add(ahead)
    } else {
        now_unix_ms.saturating_sub(ahead)
    })
}

/// What a new holder does with the watermark it found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatermarkWait {
    /// The clock is past the watermark: generate at once.
    Ready,
    /// Wait this long, then generate.
    Wait { ms: u64 },
    /// The watermark is further ahead than the broken threshold: give the machine id back.
    TooFarAhead { ahead_ms: u64 },
}

pub fn watermark_wait(
    watermark_ms: i64,
    now_unix_ms: i64,
    broken_threshold_ms: u64,
) -> WatermarkWait {
    if now_unix_ms > watermark_ms {
        return WatermarkWait::Ready;
    }
    let ahead_ms = (watermark_ms - now_unix_ms) as u64 + 1;
    if ahead_ms > broken_threshold_ms {
        WatermarkWait::TooFarAhead { ahead_ms }
    } else {
        WatermarkWait::Wait { ms: ahead_ms }
    }
}

/// The default instance id: `host:port:postmaster-pid`, plus a random suffix for a non-stable
/// instance, so that clones of a data directory and promoted standbys never share one.
pub fn default_instance_id(host: &str, port: u16, pid: u32, random_suffix: Option<u32>) -> String {
    match random_suffix {
        Some(suffix) => format!("{host}:{port}:{pid}:{suffix:08x}"),
        None => format!("{host}:{port}:{pid}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(safe_guard_ms: u64, delay_ms: u64, initial_ms: u64) -> LeaseTiming {
        LeaseTiming {
            safe_guard_ms,
            guarder_delay_ms: delay_ms,
            guarder_initial_delay_ms: initial_ms,
        }
    }

    #[test]
    fn a_refusal_says_one_thing_of_one_snapshot() {
        let states = [
            LeaseState::Claiming,
            LeaseState::Up,
            LeaseState::Down,
            LeaseState::Lost,
            LeaseState::ClockBehind,
            LeaseState::Stopped,
        ];
        for state in states {
            for problem in (0..=11).map(GeneratorProblem::from_u8) {
                let refusal = no_lease_refusal("orders", state, problem, None, "");
                let held = matches!(state, LeaseState::Up | LeaseState::Down);
                // The DETAIL is that snapshot's situation, and the message agrees with it.
                assert!(
                    refusal
                        .detail
                        .contains(&format!("(state {} in", state.name())),
                    "{refusal:?}"
                );
                assert_eq!(
                    refusal.message.contains("holds no machine id lease"),
                    !held,
                    "{refusal:?}"
                );
                assert_eq!(
                    refusal.detail.contains("The lease is held"),
                    held,
                    "{refusal:?}"
                );
            }
        }
        // The race that was seen: a claim completed after the generator was found closed.
        let refusal = no_lease_refusal(
            "orders",
            LeaseState::Up,
            GeneratorProblem::None,
            Some("2026-01-01 00:00:00.000 UTC"),
            "",
        );
        assert_eq!(refusal.kind, RefusalKind::Unavailable);
        assert_eq!(
            refusal.message,
            "cosid had no machine id lease in namespace \"orders\" when the id was asked for"
        );
        assert!(refusal
            .detail
            .starts_with("The lease was claimed just after. The lease is held and renewed"));
        let layout = no_lease_refusal(
            "orders",
            LeaseState::Claiming,
            GeneratorProblem::LayoutMismatch,
            None,
            "another layout",
        );
        assert_eq!(layout.kind, RefusalKind::Prerequisite);
        assert_eq!(
            layout.message,
            "cosid holds no machine id lease in namespace \"orders\""
        );
        assert!(layout
            .detail
            .ends_with("The last error was: another layout."));
    }

    #[test]
    fn a_snapshot_after_a_claim_shows_what_the_claim_cleared() {
        let status = GeneratorStatus::new();
        status.set_state(LeaseState::Claiming);
        status.set_problem(GeneratorProblem::StoreError);
        status.last_error.store("the store failed");
        // As the session opens a generator: problem and error first, the state last.
        status.set_problem(GeneratorProblem::None);
        status.last_error.store("");
        status.set_renewed(5, 10, 15);
        status.set_state(LeaseState::Up);
        assert_eq!(
            status.snapshot(),
            LeaseSnapshot {
                state: LeaseState::Up,
                problem: GeneratorProblem::None,
                last_renewed_at_ms: 5,
                last_error: String::new(),
            }
        );
    }

    #[test]
    fn a_deadline_is_shown_at_its_distance_from_now() {
        let now_unix = 1_700_000_000_000;
        assert_eq!(deadline_unix_ms(u64::MAX, 5_000, now_unix), None);
        assert_eq!(
            deadline_unix_ms(8_600, 5_000, now_unix),
            Some(now_unix + 3_600)
        );
        assert_eq!(
            deadline_unix_ms(4_000, 5_000, now_unix),
            Some(now_unix - 1_000)
        );
        assert_eq!(deadline_unix_ms(5_000, 5_000, now_unix), Some(now_unix));
        assert_eq!(deadline_unix_ms(u64::MAX - 1, 0, now_unix), Some(i64::MAX));
    }

    #[test]
    fn margin_is_a_tenth_up_to_ten_seconds() {
        assert_eq!(timing(300_000, 60_000, 60_000).margin_ms(), 10_000);
        assert_eq!(timing(50_000, 1_000, 1_000).margin_ms(), 5_000);
        assert_eq!(timing(4_000, 1_000, 1_000).margin_ms(), 400);
        assert_eq!(
            timing(4_000, 1_000, 1_000).deadline_ms(1_000_000),
            1_003_600
        );
    }

    #[test]
    fn cosid_defaults_are_valid() {
        assert_eq!(timing(300_000, 60_000, 60_000).validate(), Ok(()));
    }

    #[test]
    fn delays_must_fit_inside_the_safe_guard() {
        assert_eq!(
            timing(4_000, 3_600, 1_000).validate(),
            Err(TimingError::DelayTooLong {
                delay_ms: 3_600,
                limit_ms: 3_600
            })
        );
        assert!(matches!(
            timing(4_000, 1_000, 5_000).validate(),
            Err(TimingError::InitialDelayTooLong { .. })
        ));
        assert_eq!(timing(4_000, 3_599, 3_599).validate(), Ok(()));
        let message = timing(4_000, 1_000, 5_000)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("cosid.guarder_initial_delay (5000 ms)"),
            "{message}"
        );
    }

    #[test]
    fn clamping_makes_any_timing_valid() {
        for (sg, delay, initial) in [
            (4_000, 60_000, 60_000),
            (300_000, 60_000, 60_000),
            (20, 5, 500),
        ] {
            let clamped = timing(sg, delay, initial).clamped();
            assert_eq!(clamped.validate(), Ok(()), "{sg} {delay} {initial}");
            assert_eq!(clamped.safe_guard_ms, sg);
        }
        assert_eq!(
            timing(300_000, 60_000, 60_000).clamped(),
            timing(300_000, 60_000, 60_000)
        );
    }

    #[test]
    fn watermark_covers_everything_until_the_deadline() {
        let t = timing(4_000, 1_000, 1_000);
        // The wall clock and the monotonic clock advance together here; the deadline comes
        // before the watermark.
        let (sent_wall, sent_mono) = (1_700_000_000_000i64, 50_000u64);
        let last_issuable_wall = sent_wall + (t.deadline_ms(sent_mono) - sent_mono) as i64;
        assert!(last_issuable_wall < t.watermark_ms(sent_wall));
    }

    #[test]
    fn new_holders_wait_for_the_watermark() {
        assert_eq!(watermark_wait(1_000, 1_001, 500), WatermarkWait::Ready);
        assert_eq!(
            watermark_wait(1_000, 1_000, 500),
            WatermarkWait::Wait { ms: 1 }
        );
        assert_eq!(
            watermark_wait(1_000, 700, 500),
            WatermarkWait::Wait { ms: 301 }
        );
        assert_eq!(
            watermark_wait(1_000, 400, 500),
            WatermarkWait::TooFarAhead { ahead_ms: 601 }
        );
    }

    #[test]
    fn instance_ids() {
        assert_eq!(default_instance_id("db1", 5432, 77, None), "db1:5432:77");
        assert_eq!(
            default_instance_id("db1", 5432, 77, Some(0xabc)),
            "db1:5432:77:00000abc"
        );
        for state in 0..=5u8 {
            assert_eq!(LeaseState::from_u8(state) as u8, state);
        }
    }

    #[test]
    fn the_situation_reads_as_sentences_in_every_state() {
        for value in 0..=5 {
            let state = LeaseState::from_u8(value);
            for (at, error) in [
                (None, ""),
                (Some("2026-12-01 15:00:00.000 UTC"), ""),
                (None, "could not connect to the lease store."),
            ] {
                let text = situation(state, at, error);
                assert!(!text.contains("never"), "{text}");
                assert!(!text.contains(".."), "{text}");
                assert!(text.ends_with('.'), "{text}");
                assert!(text.starts_with(char::is_uppercase), "{text}");
            }
        }
        assert_eq!(
            situation(LeaseState::Claiming, None, ""),
            "The background worker is claiming a machine id (state CLAIMING in cosid.status). \
             No renewal has succeeded yet."
        );
        assert_eq!(
            situation(
                LeaseState::Down,
                Some("2026-12-01 15:00:00.000 UTC"),
                "timeout."
            ),
            "The lease is held, but its last renewal failed (state DOWN in cosid.status). The \
             last successful renewal was at \
             2026-12-01 15:00:00.000 UTC by the lease store's clock. The last error was: timeout."
        );
    }
}
