//! What a generator looks like from outside the process that runs it: the state, the problem
//! that stops generation, and the last error's text, for every generator; for a leased one also
//! the machine id and claim held and the store-clock times. It lives in shared memory inside
//! each generator's slot; one process writes it (the worker that runs the generator, through
//! [`super::session`] when it is leased) and any process reads it, without a lock.
//!
//! Every field is an atomic. Single values are stored `Release` and loaded `Acquire`; the text is
//! a sequence lock over atomic words: the writer makes the version odd, writes, makes it even; a
//! reader retries until it saw the same even version before and after copying. The timings are
//! `Relaxed`: they are shown, never acted on.

use super::LeaseState;
use std::sync::atomic::{fence, AtomicI32, AtomicI64, AtomicU64, AtomicU8, Ordering};

/// Text that one process writes and any reads, without a lock (see the protocol above).
#[repr(C)]
pub struct AtomicText<const WORDS: usize> {
    version: AtomicU64,
    len: AtomicU64,
    words: [AtomicU64; WORDS],
}

impl<const WORDS: usize> AtomicText<WORDS> {
    pub const fn new() -> Self {
        AtomicText {
            version: AtomicU64::new(0),
            len: AtomicU64::new(0),
            words: [const { AtomicU64::new(0) }; WORDS],
        }
    }

    /// Only one process may call this (the worker); text beyond the capacity is cut.
    pub fn store(&self, text: &str) {
        let mut bytes = text.as_bytes();
        if bytes.len() > WORDS * 8 {
            let mut cut = WORDS * 8;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            bytes = &bytes[..cut];
        }
        self.version.fetch_add(1, Ordering::AcqRel);
        fence(Ordering::Release);
        for (index, word) in self.words.iter().enumerate() {
            let mut chunk = [0u8; 8];
            let from = (index * 8).min(bytes.len());
            let to = (from + 8).min(bytes.len());
            chunk[..to - from].copy_from_slice(&bytes[from..to]);
            word.store(u64::from_le_bytes(chunk), Ordering::Relaxed);
        }
        self.len.store(bytes.len() as u64, Ordering::Relaxed);
        self.version.fetch_add(1, Ordering::Release);
    }

    pub fn load(&self) -> String {
        loop {
            let before = self.version.load(Ordering::Acquire);
            if before % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let len = (self.len.load(Ordering::Relaxed) as usize).min(WORDS * 8);
            let mut bytes = Vec::with_capacity(WORDS * 8);
            for word in &self.words {
                bytes.extend_from_slice(&word.load(Ordering::Relaxed).to_le_bytes());
            }
            fence(Ordering::Acquire);
            if self.version.load(Ordering::Relaxed) == before {
                bytes.truncate(len);
                return String::from_utf8_lossy(&bytes).into_owned();
            }
        }
    }
}

/// Why a generator is not generating, for `cosid_next()`'s error and `cosid.status.problem`:
/// the lease's problems, and those of the files and history a generator opens with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum GeneratorProblem {
    None = 0,
    Exhausted = 1,
    LayoutMismatch = 2,
    ClockBehind = 3,
    StoreError = 4,
    Standby = 5,
    NoExtension = 6,
    Lost = 7,
    ShuttingDown = 8,
    OwnLeaseLive = 9,
    /// The local state file cannot be read exactly: its floor is unknown.
    StateFile = 10,
    /// The store's identity changed: it hands out no machine id until it settled.
    StoreSettling = 11,
    /// The default generator's history forbids its definition (`history.rs`).
    History = 12,
    /// The default generator's history file cannot be read or written.
    HistoryFile = 13,
    /// This server's clock runs further ahead of the lease store's than the store allows.
    ClockAhead = 14,
}

impl GeneratorProblem {
    /// What `cosid.status.last_error` shows a role that is not a superuser instead of the error's
    /// text: the kind of problem only, since the text of a store's error can name its host, port,
    /// user and database.
    pub fn public_summary(self) -> &'static str {
        match self {
            GeneratorProblem::None => "error (its text is shown to superusers only)",
            GeneratorProblem::Exhausted => "no machine id left in the namespace",
            GeneratorProblem::LayoutMismatch => "the namespace's leases have another id layout",
            GeneratorProblem::ClockBehind => "this server's clock is behind the lease's watermark",
            GeneratorProblem::StoreError => {
                "the lease store failed (its error is shown to superusers only)"
            }
            GeneratorProblem::Standby => "the lease store is read-only (hot standby)",
            GeneratorProblem::NoExtension => "the lease store has no cosid lease table",
            GeneratorProblem::Lost => "the lease was lost",
            GeneratorProblem::ShuttingDown => "the server is shutting down",
            GeneratorProblem::OwnLeaseLive => "this instance's lease is live under another claim",
            GeneratorProblem::StateFile => {
                "the local state file cannot be used (its error is shown to superusers only)"
            }
            GeneratorProblem::StoreSettling => {
                "the lease store changed identity (failover, recovery, restore or restart) and is settling"
            }
            GeneratorProblem::History => {
                "the default generator's namespace or layout changed, and its ids could repeat"
            }
            GeneratorProblem::HistoryFile => {
                "the history file cannot be used (its error is shown to superusers only)"
            }
            GeneratorProblem::ClockAhead => {
                "this server's clock is further ahead of the lease store's than the store allows"
            }
        }
    }

    /// The problem as a code for machines to read (`cosid.status.problem`): stable across
    /// versions, unlike the texts. `None` for [`GeneratorProblem::None`], which is no problem of a
    /// known kind.
    pub fn code(self) -> Option<&'static str> {
        Some(match self {
            GeneratorProblem::None => return None,
            GeneratorProblem::Exhausted => "exhausted",
            GeneratorProblem::LayoutMismatch => "layout_mismatch",
            GeneratorProblem::ClockBehind => "clock_behind",
            GeneratorProblem::StoreError => "store_error",
            GeneratorProblem::Standby => "store_read_only",
            GeneratorProblem::NoExtension => "store_not_installed",
            GeneratorProblem::Lost => "lost",
            GeneratorProblem::ShuttingDown => "shutting_down",
            GeneratorProblem::OwnLeaseLive => "own_lease_live",
            GeneratorProblem::StateFile => "state_file",
            GeneratorProblem::StoreSettling => "store_settling",
            GeneratorProblem::History => "history",
            GeneratorProblem::HistoryFile => "history_file",
            GeneratorProblem::ClockAhead => "clock_ahead",
        })
    }

    pub fn from_u8(value: u8) -> GeneratorProblem {
        match value {
            1 => GeneratorProblem::Exhausted,
            2 => GeneratorProblem::LayoutMismatch,
            3 => GeneratorProblem::ClockBehind,
            4 => GeneratorProblem::StoreError,
            5 => GeneratorProblem::Standby,
            6 => GeneratorProblem::NoExtension,
            7 => GeneratorProblem::Lost,
            8 => GeneratorProblem::ShuttingDown,
            9 => GeneratorProblem::OwnLeaseLive,
            10 => GeneratorProblem::StateFile,
            11 => GeneratorProblem::StoreSettling,
            12 => GeneratorProblem::History,
            13 => GeneratorProblem::HistoryFile,
            14 => GeneratorProblem::ClockAhead,
            _ => GeneratorProblem::None,
        }
    }
}

/// A generator's status, as the worker that runs it last saw it: a fixed machine id's uses the
/// state, the problem and the text only.
#[repr(C)]
pub struct GeneratorStatus {
    state: AtomicU8,
    problem: AtomicU8,
    /// The machine id held, or -1.
    machine_id: AtomicI32,
    /// The random token of the current claim.
    claim_token: AtomicU64,
    /// Store-clock times, Unix ms; `i64::MIN` when unknown.
    expires_at_ms: AtomicI64,
    last_renewed_at_ms: AtomicI64,
    /// The watermark last written to the store, Unix ms.
    watermark_ms: AtomicI64,
    /// The lease timings in force (the worker's, after its checks of every reload), in ms;
    /// 0 until the worker has started.
    safe_guard_ms: AtomicU64,
    guarder_delay_ms: AtomicU64,
    /// Renewals that did not renew since the server started: the store failed (DOWN) or no
    /// longer showed the lease held (LOST). A counter for monitoring, which a state alone does
    /// not show when a failure is followed by a success between two scrapes.
    renewal_failures: AtomicU64,
    pub last_error: AtomicText<64>,
}

pub const UNKNOWN_TIME: i64 = i64::MIN;

/// What a refusal reads of a lease, once: its message, DETAIL and HINT are all composed from
/// this, so that they cannot describe two moments (a claim may complete between two reads).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseSnapshot {
    pub state: LeaseState,
    pub problem: GeneratorProblem,
    /// Store-clock Unix ms; [`UNKNOWN_TIME`] when no renewal succeeded yet.
    pub last_renewed_at_ms: i64,
    pub last_error: String,
}

impl GeneratorStatus {
    pub const fn new() -> GeneratorStatus {
        GeneratorStatus {
            state: AtomicU8::new(LeaseState::Claiming as u8),
            problem: AtomicU8::new(GeneratorProblem::None as u8),
            machine_id: AtomicI32::new(-1),
            claim_token: AtomicU64::new(0),
            expires_at_ms: AtomicI64::new(UNKNOWN_TIME),
            last_renewed_at_ms: AtomicI64::new(UNKNOWN_TIME),
            watermark_ms: AtomicI64::new(UNKNOWN_TIME),
            safe_guard_ms: AtomicU64::new(0),
            guarder_delay_ms: AtomicU64::new(0),
            renewal_failures: AtomicU64::new(0),
            last_error: AtomicText::new(),
        }
    }

    /// The state, problem, last renewal and last error, each read once. The state is read
    /// first: the worker writes it last when a claim opens the generator, so a snapshot that
    /// shows a lease UP shows the problem and error that claim cleared.
    pub fn snapshot(&self) -> LeaseSnapshot {
        let state = self.state();
        LeaseSnapshot {
            state,
            problem: self.problem(),
            last_renewed_at_ms: self.last_renewed_at_ms(),
            last_error: self.last_error.load(),
        }
    }
    pub fn state(&self) -> LeaseState {
        LeaseState::from_u8(self.state.load(Ordering::Acquire))
    }
    pub fn set_state(&self, state: LeaseState) {
        self.state.store(state as u8, Ordering::Release);
    }
    pub fn problem(&self) -> GeneratorProblem {
        GeneratorProblem::from_u8(self.problem.load(Ordering::Acquire))
    }
    pub fn set_problem(&self, problem: GeneratorProblem) {
        self.problem.store(problem as u8, Ordering::Release);
    }
    /// The machine id and claim token held, if any.
    pub fn held(&self) -> Option<(u32, u64)> {
        let machine_id = self.machine_id.load(Ordering::Acquire);
        (machine_id >= 0).then(|| (machine_id as u32, self.claim_token.load(Ordering::Acquire)))
    }
    pub fn set_held(&self, held: Option<(u32, u64)>) {
        match held {
            Some((machine_id, token)) => {
                self.claim_token.store(token, Ordering::Release);
                self.machine_id.store(machine_id as i32, Ordering::Release);
            }
            None => self.machine_id.store(-1, Ordering::Release),
        }
    }
    pub fn expires_at_ms(&self) -> i64 {
        self.expires_at_ms.load(Ordering::Acquire)
    }
    pub fn last_renewed_at_ms(&self) -> i64 {
        self.last_renewed_at_ms.load(Ordering::Acquire)
    }
    pub fn watermark_ms(&self) -> i64 {
        self.watermark_ms.load(Ordering::Acquire)
    }
    pub fn set_renewed(&self, renewed_at_ms: i64, expires_at_ms: i64, watermark_ms: i64) {
        self.last_renewed_at_ms
            .store(renewed_at_ms, Ordering::Release);
        self.expires_at_ms.store(expires_at_ms, Ordering::Release);
        self.watermark_ms.store(watermark_ms, Ordering::Release);
    }
    /// The safe guard and the renewal period in force, in ms; `None` before the worker started.
    pub fn timing_ms(&self) -> Option<(u64, u64)> {
        let safe_guard = self.safe_guard_ms.load(Ordering::Relaxed);
        (safe_guard > 0).then(|| (safe_guard, self.guarder_delay_ms.load(Ordering::Relaxed)))
    }
    pub fn set_timing_ms(&self, safe_guard_ms: u64, guarder_delay_ms: u64) {
        self.safe_guard_ms.store(safe_guard_ms, Ordering::Relaxed);
        self.guarder_delay_ms
            .store(guarder_delay_ms, Ordering::Relaxed);
    }
    pub fn set_watermark_ms(&self, watermark_ms: i64) {
        self.watermark_ms.store(watermark_ms, Ordering::Release);
    }
    pub fn renewal_failures(&self) -> u64 {
        self.renewal_failures.load(Ordering::Relaxed)
    }
    pub fn count_renewal_failure(&self) {
        self.renewal_failures.fetch_add(1, Ordering::Relaxed);
    }
}

impl<const WORDS: usize> Default for AtomicText<WORDS> {
    fn default() -> Self {
        AtomicText::new()
    }
}

impl Default for GeneratorStatus {
    fn default() -> Self {
        GeneratorStatus::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_problem_has_its_own_code_and_survives_its_number() {
        let mut codes = std::collections::BTreeSet::new();
        for value in 0..=u8::MAX {
            let problem = GeneratorProblem::from_u8(value);
            if problem == GeneratorProblem::None {
                assert_eq!(problem.code(), None);
                continue;
            }
            assert_eq!(problem as u8, value);
            let code = problem
                .code()
                .expect("a problem of a known kind has a code");
            assert!(
                code.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{code}"
            );
            assert!(codes.insert(code), "{code} twice");
        }
        assert_eq!(codes.len(), 14);
    }

    #[test]
    fn text_is_cut_at_a_character_boundary() {
        let text: AtomicText<2> = AtomicText::new();
        text.store("short");
        assert_eq!(text.load(), "short");
        text.store("0123456789abcdefXYZ");
        assert_eq!(text.load(), "0123456789abcdef");
        // 15 ASCII bytes and a 2-byte character: the character does not fit and is left out.
        text.store("0123456789abcdeé");
        assert_eq!(text.load(), "0123456789abcde");
        text.store("");
        assert_eq!(text.load(), "");
    }

    #[test]
    fn status_round_trips() {
        let status = GeneratorStatus::new();
        assert_eq!(status.state(), LeaseState::Claiming);
        assert_eq!(status.held(), None);
        assert_eq!(status.timing_ms(), None);
        assert_eq!(status.expires_at_ms(), UNKNOWN_TIME);
        status.set_held(Some((7, 0xabc)));
        assert_eq!(status.held(), Some((7, 0xabc)));
        status.set_held(None);
        assert_eq!(status.held(), None);
        status.set_timing_ms(4_000, 1_000);
        assert_eq!(status.timing_ms(), Some((4_000, 1_000)));
        for problem in 0..=10u8 {
            assert_eq!(GeneratorProblem::from_u8(problem) as u8, problem);
        }
    }

    #[test]
    fn public_summaries_are_distinct_and_name_nothing_of_the_store() {
        let summaries: Vec<&str> = (0..=10u8)
            .map(|problem| GeneratorProblem::from_u8(problem).public_summary())
            .collect();
        for (i, summary) in summaries.iter().enumerate() {
            assert!(!summary.is_empty());
            assert!(!summaries[..i].contains(summary), "{summary}");
            // Fixed sentences: nothing of a connection string or a path can be in them.
            assert!(
                !summary.contains('=') && !summary.contains('/'),
                "{summary}"
            );
        }
    }
}
