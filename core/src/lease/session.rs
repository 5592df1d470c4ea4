//! The lease session: every decision of the lease worker, with no PostgreSQL call, in the way
//! CosId separates its guarder (the schedule) from its distributor (claim, guard, revert). The
//! worker (`src/worker/runner.rs`) only schedules [`Session::step`], reloads the timings and
//! calls [`Session::shutdown`]; this module decides what to claim, renew, give back and release,
//! enforces the deadline and watermark rules of [`super`], and says what happened in the
//! lease's [`GeneratorStatus`] and the log.
//!
//! The session reaches the outside world through two seams, so that it is unit-tested with a
//! scripted store and a scripted clock: a [`LeaseStore`] carries the protocol's calls, and an
//! [`Env`] gives the clocks, sleeps, the shutdown flag, random tokens, the log, the reloadable
//! settings and the local state file. The generator and the status it drives are the shared
//! memory ones, plain atomics, so the tests look at exactly what backends would see.
//!
//! What the session holds is kept in the status alone: it outlives a worker that ended on an
//! error and was started again, and so does the open generator, so a new session takes it over.
//!
//! Rules, in the order [`Session::step`] applies them:
//! - A machine id given back whose release failed is released before anything is claimed.
//! - A stable instance reads its local state file before each claim; a file that cannot be read
//!   exactly stops claiming (its floor is unknown).
//! - The store must be ready: a standby, a missing or an outdated protocol stop claiming, each
//!   with the fix in the message.
//! - A claim keeps its token until one succeeds, so that a claim committed but whose answer was
//!   lost is recognised as this server's own on the next attempt.
//! - A claimed machine id is opened only after the clock passed the watermark found (the store's,
//!   or the state file's for a stable instance); one further ahead than the broken threshold is
//!   given back as it was, since nothing was issued under it.
//! - Each claim or renewal moves the generator's deadline to `sent + usable` and raises its tick
//!   bound to the watermark written; a renewal the store no longer matches closes the generator at
//!   once, fail-fast or not. A renewal that failed is tried again within a second, so that a lost
//!   lease is known, and a lapsed one restored, soon after the store is back.
//! - A renewal says whether the holder is still generating (its deadline has not passed): a store
//!   settling after its identity changed renews only such a holder's lease, and a claim there
//!   waits until it settled.
//! - At shutdown the generator is closed first, then the machine id released with the exact last
//!   timestamp issued.

use super::{
    watermark_wait, GeneratorProblem, GeneratorStatus, LeaseState, LeaseTiming, WatermarkWait,
};
use crate::generator::GeneratorState;
use crate::layout::{format_unix_ms, Layout};
use crate::protocol::{ClaimOutcome, ClaimedHow, Holder, LeaseStore, Readiness, StoreError};
use crate::state_file::StateRecord;
use std::time::Duration;

/// How a line of the session is logged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLevel {
    Log,
    Warning,
}

/// Everything the session needs of the process it runs in.
pub trait Env {
    /// A clock that never steps and keeps running through suspend, in ms.
    fn monotonic_ms(&mut self) -> u64;
    /// The wall clock, in Unix ms.
    fn unix_ms(&mut self) -> i64;
    /// Sleeps `ms`, or less when the server shuts down.
    fn sleep_ms(&mut self, ms: u64);
    fn shutdown_requested(&mut self) -> bool;
    /// A strong random number, for claim tokens.
    fn random_u64(&mut self) -> u64;
    fn log(&mut self, level: LogLevel, line: &str);
    /// `cosid.fail_fast` as it is now.
    fn fail_fast(&mut self) -> bool;
    /// The clock step back broken threshold in force, in ms.
    fn broken_threshold_ms(&mut self) -> u64;
    /// `cosid.local_state_interval` as it is now, in ms.
    fn local_state_interval_ms(&mut self) -> u64;
    /// The local state file's record: `None` without a file; an error (the whole sentence)
    /// when it cannot be read exactly.
    fn read_state(&mut self) -> Result<Option<StateRecord>, String>;
    /// The floor a record stands for now (it depends on the boot and the clocks).
    fn state_floor_ms(&mut self, record: &StateRecord) -> i64;
    /// Writes the record for `last_ms`, padded by `pad_ms`, or exact when `pad_ms` is `None`
    /// (the generator is closed).
    fn write_state(
        &mut self,
        namespace: &str,
        machine_id: u32,
        last_ms: i64,
        pad_ms: Option<u64>,
    ) -> Result<(), String>;
}

/// The longest a store call may take at shutdown (the release).
pub const SHUTDOWN_CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// Without a lease, claims are tried again this often, plus the server's own spread
/// ([`retry_spread_ms`]); claims the store did not answer (unreachable, read-only) back off to
/// at most [`CLAIM_RETRY_MAX_MS`].
pub const CLAIM_RETRY_MS: u64 = 1_000;

/// The longest wait between claims while the store does not answer.
pub const CLAIM_RETRY_MAX_MS: u64 = 2_000;

/// A server's own offset of its claim retries, 0 to 499 ms, from its instance id: servers that
/// lost the store at the same moment (a failover) then do not all call it again at the same
/// moment, and each keeps its place from one retry to the next.
pub fn retry_spread_ms(instance_id: &str) -> u64 {
    // FNV-1a: stable across builds and platforms, unlike std's hasher.
    let hash = instance_id
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        });
    hash % 500
}

/// The wait before the next claim after `unanswered` claims in a row that the store did not
/// answer: 1 s, then 2 s, plus the spread. (Short: a server whose deadline passed during an
/// outage claims again as soon as the store is back.)
pub fn claim_retry_ms(unanswered: u32, spread_ms: u64) -> u64 {
    (CLAIM_RETRY_MS << unanswered.min(6)).min(CLAIM_RETRY_MAX_MS) + spread_ms
}

/// A failed renewal is tried again this soon (or at the next renewal, if that is sooner).
pub const RENEWAL_RETRY_MS: u64 = 1_000;

/// A machine id and the token of the claim that took it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    pub machine_id: u32,
    pub token: u64,
}

/// A claim the store granted.
#[derive(Clone, Copy, Debug)]
struct Claimed {
    held: Held,
    how: ClaimedHow,
    previous_watermark_ms: i64,
    expires_at_ms: i64,
    store_now_ms: i64,
    /// When the claim was sent, on the monotonic clock: its deadline counts from then.
    sent_ms: u64,
    /// The watermark the claim wrote.
    watermark_ms: i64,
}

/// A machine id given back whose release failed, with the watermark to release it with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PendingRelease {
    held: Held,
    watermark_ms: i64,
}

/// The shared-memory parts a session drives: the generator it opens and closes, and the status
/// it publishes.
#[derive(Clone, Copy)]
pub struct Slot<'a> {
    pub generator: &'a GeneratorState,
    pub status: &'a GeneratorStatus,
    pub layout: Layout,
}

pub struct Session<'a, S: LeaseStore, E: Env> {
    generator: &'a GeneratorState,
    status: &'a GeneratorStatus,
    layout: Layout,
    holder: Holder,
    /// `cosid.database`, named in the messages about a store in it.
    database: String,
    store: S,
    env: E,
    /// The timings in force: the settings at start, then each valid reload.
    timing: LeaseTiming,
    pending_release: Option<PendingRelease>,
    /// The token of the claim being made, kept until one succeeds (see the rules above).
    claim_token: Option<u64>,
    /// Monotonic time of the next renewal (or claim).
    next_renewal_ms: u64,
    /// Claims in a row that the store did not answer: the next one waits longer.
    unanswered_claims: u32,
    next_state_write_ms: u64,
    /// The last line logged through [`Session::note`], so that a repeated condition is logged
    /// once.
    last_logged: String,
}

impl<'a, S: LeaseStore, E: Env> Session<'a, S, E> {
    /// A session over `slot`, with no timings in force until [`Session::start`].
    ///
    /// The status in shared memory outlives a worker that ended on an error and was started
    /// again, and so does the open generator: a machine id the status shows held is taken over,
    /// under its claim's token, and renewed at once. Claiming afresh instead would leave the
    /// generator open under a lease nobody renews.
    pub fn new(
        slot: Slot<'a>,
        holder: Holder,
        database: &str,
        store: S,
        env: E,
    ) -> Session<'a, S, E> {
        Session {
            generator: slot.generator,
            status: slot.status,
            layout: slot.layout,
            holder,
            database: database.to_string(),
            store,
            env,
            timing: LeaseTiming {
                safe_guard_ms: 1,
                guarder_delay_ms: 1,
                guarder_initial_delay_ms: 1,
            },
            pending_release: None,
            claim_token: None,
            next_renewal_ms: 0,
            unanswered_claims: 0,
            next_state_write_ms: 0,
            last_logged: String::new(),
        }
    }

    /// Puts the timings in force that the settings say now: the server checked them at start,
    /// but a reload since may have made them unsafe, and delays that could let the lease lapse
    /// are shortened.
    pub fn start(&mut self, timing: LeaseTiming) {
        if let Err(why) = timing.validate() {
            self.note(
                LogLevel::Warning,
                format!("cosid: shortening the lease delays: {why}"),
            );
        }
        self.timing = timing.clamped();
        self.publish_timing();
    }

    /// The machine id held, if any.
    pub fn held(&self) -> Option<Held> {
        self.status
            .held()
            .map(|(machine_id, token)| Held { machine_id, token })
    }

    pub fn timing(&self) -> LeaseTiming {
        self.timing
    }

    /// After a reload: timings that could let the lease lapse between renewals are refused, and
    /// the ones in force are kept.
    pub fn reload(&mut self, timing: LeaseTiming) {
        match timing.validate() {
            Ok(()) => {
                self.timing = timing;
                self.publish_timing();
            }
            Err(why) => self.note(
                LogLevel::Warning,
                format!("cosid: ignoring the reloaded lease settings: {why}"),
            ),
        }
    }

    /// Logs a line unless it is the one logged last.
    pub fn note(&mut self, level: LogLevel, line: String) {
        if line != self.last_logged {
            self.env.log(level, &line);
            self.last_logged = line;
        }
    }

    /// When the session next has something to do, on the monotonic clock.
    pub fn next_wake_ms(&self) -> u64 {
        let mut wake = self.next_renewal_ms;
        if self.holder.stable && self.held().is_some() {
            wake = wake.min(self.next_state_write_ms);
        }
        wake
    }

    /// Claims when nothing is held; otherwise renews and writes the state file when due.
    pub fn step(&mut self) {
        if self.held().is_none() {
            self.claim();
        } else {
            let now = self.env.monotonic_ms();
            if now >= self.next_renewal_ms {
                self.renew();
            }
            if self.holder.stable && now >= self.next_state_write_ms {
                self.write_state_file(false);
            }
        }
        if let Some(notice) = self.store.take_notice() {
            self.note(LogLevel::Warning, format!("cosid: {notice}"));
        }
    }

    /// Stops the generator, and releases the machine id with the exact last timestamp issued.
    pub fn shutdown(&mut self) {
        self.generator.close();
        let status = self.status;
        if let Some(held) = self.held() {
            let last_ms = self.last_issued_ms();
            if self.holder.stable {
                self.write_state_file(true);
            }
            self.arm_store_timeout();
            match self
                .store
                .release(&self.holder, held.machine_id, held.token, last_ms)
            {
                Ok(true) => self.env.log(
                    LogLevel::Log,
                    &format!(
                        "cosid: released machine id {} in namespace \"{}\" with watermark {}",
                        held.machine_id,
                        self.holder.namespace,
                        format_unix_ms(last_ms)
                    ),
                ),
                Ok(false) => {}
                Err(why) => self.env.log(
                    LogLevel::Warning,
                    &format!(
                        "cosid: could not release machine id {} in namespace \"{}\": {why}; it frees itself when its lease expires",
                        held.machine_id, self.holder.namespace
                    ),
                ),
            }
            self.set_held(None);
            status.set_watermark_ms(last_ms);
        }
        status.set_state(LeaseState::Stopped);
        status.set_problem(GeneratorProblem::ShuttingDown);
    }

    /// Shows the timings in force in the status.
    fn publish_timing(&self) {
        self.status
            .set_timing_ms(self.timing.safe_guard_ms, self.timing.guarder_delay_ms);
    }

    fn set_held(&self, held: Option<Held>) {
        self.status
            .set_held(held.map(|held| (held.machine_id, held.token)));
    }

    /// A call must end well before the lease could lapse; at shutdown (the release), a store
    /// that does not answer must not hold the server up for long.
    fn arm_store_timeout(&mut self) {
        let delay = self.timing.guarder_delay_ms;
        let mut timeout = Duration::from_millis(delay.clamp(500, 10_000));
        if self.env.shutdown_requested() {
            timeout = timeout.min(SHUTDOWN_CALL_TIMEOUT);
        }
        self.store.set_timeout(timeout);
    }

    fn set_problem(&mut self, state: LeaseState, problem: GeneratorProblem, text: String) {
        // The state last: a reader that sees it sees its problem and text (GeneratorStatus::snapshot).
        self.status.last_error.store(&text);
        self.status.set_problem(problem);
        self.status.set_state(state);
        self.note(LogLevel::Warning, format!("cosid: {text}"));
    }

    /// One attempt to take a machine id, in named steps; each step that fails has said why.
    fn claim(&mut self) {
        let wait_ms = claim_retry_ms(
            self.unanswered_claims,
            retry_spread_ms(&self.holder.instance_id),
        );
        self.next_renewal_ms = self.env.monotonic_ms() + wait_ms;
        self.claim_once();
        let unanswered = self.held().is_none()
            && matches!(
                self.status.problem(),
                GeneratorProblem::StoreError | GeneratorProblem::Standby
            );
        self.unanswered_claims = if unanswered {
            self.unanswered_claims.saturating_add(1)
        } else {
            0
        };
    }

    fn claim_once(&mut self) {
        if !self.release_given_back() {
            return;
        }
        let Some(state_record) = self.read_state_file() else {
            return;
        };
        if !self.store_ready() {
            return;
        }
        let Some(claimed) = self.send_claim() else {
            return;
        };
        let floor_ms = self.honoured_watermark(
            state_record.as_ref(),
            claimed.held.machine_id,
            claimed.previous_watermark_ms,
        );
        if self.wait_for_watermark(&claimed, floor_ms) {
            self.open(claimed, floor_ms);
        }
    }

    /// Releases a machine id given back whose release failed: until then it is held under a
    /// claim nobody renews. False while it still fails.
    fn release_given_back(&mut self) -> bool {
        let Some(pending) = self.pending_release else {
            return true;
        };
        self.arm_store_timeout();
        let released = self.store.release(
            &self.holder,
            pending.held.machine_id,
            pending.held.token,
            pending.watermark_ms,
        );
        if released.is_ok() {
            self.pending_release = None;
        }
        released.is_ok()
    }

    /// A stable instance's state file, read before each claim (`Some(None)` without one, and
    /// always for an instance that is not stable). A file that cannot be read exactly holds a
    /// floor nobody knows: `None`, and nothing is claimed until it is restored or removed.
    fn read_state_file(&mut self) -> Option<Option<StateRecord>> {
        if !self.holder.stable {
            return Some(None);
        }
        match self.env.read_state() {
            Ok(record) => Some(record),
            Err(unusable) => {
                self.set_problem(
                    LeaseState::Stopped,
                    GeneratorProblem::StateFile,
                    format!(
                        "{unusable}; not claiming a machine id until it is restored or removed"
                    ),
                );
                None
            }
        }
    }

    /// Whether the store can be claimed from; if not, the status says what to do.
    fn store_ready(&mut self) -> bool {
        self.arm_store_timeout();
        match self.store.readiness() {
            Ok(Readiness::Ready) => true,
            Ok(not_ready) => {
                let (problem, text) = self.not_ready(not_ready);
                self.set_problem(LeaseState::Stopped, problem, text);
                false
            }
            Err(why) => {
                self.set_problem(
                    LeaseState::Claiming,
                    GeneratorProblem::StoreError,
                    format!("cannot reach the lease table: {why}"),
                );
                false
            }
        }
    }

    /// Sends the claim, under the token kept since the last claim that failed.
    fn send_claim(&mut self) -> Option<Claimed> {
        let token = match self.claim_token {
            Some(token) => token,
            None => *self.claim_token.insert(self.env.random_u64()),
        };
        let sent_ms = self.env.monotonic_ms();
        let watermark_ms = self.timing.watermark_ms(self.env.unix_ms());
        self.arm_store_timeout();
        let outcome =
            self.store
                .claim(&self.holder, self.timing.safe_guard_ms, token, watermark_ms);
        match outcome {
            Ok(ClaimOutcome::Claimed {
                machine_id,
                how,
                previous_watermark_ms,
                expires_at_ms,
                store_now_ms,
            }) => Some(Claimed {
                held: Held { machine_id, token },
                how,
                previous_watermark_ms,
                expires_at_ms,
                store_now_ms,
                sent_ms,
                watermark_ms,
            }),
            Ok(refused) => {
                let (problem, text) = self.refused(refused);
                self.set_problem(LeaseState::Claiming, problem, text);
                None
            }
            Err(why) => {
                self.set_problem(
                    LeaseState::Claiming,
                    GeneratorProblem::StoreError,
                    format!("claiming a machine id failed: {why}"),
                );
                None
            }
        }
    }

    /// Waits until the clock passes `floor_ms`, the watermark the new holder must honour. One
    /// further ahead than the broken threshold is given back as it was, since nothing was issued
    /// under the claim; so is the machine id when the server shuts down meanwhile. False when it
    /// was given back.
    fn wait_for_watermark(&mut self, claimed: &Claimed, floor_ms: i64) -> bool {
        let Held { machine_id, token } = claimed.held;
        let broken = self.env.broken_threshold_ms();
        let now_ms = self.env.unix_ms();
        match watermark_wait(floor_ms, now_ms, broken) {
            WatermarkWait::Ready => {}
            WatermarkWait::Wait { ms } => self.env.sleep_ms(ms),
            WatermarkWait::TooFarAhead { ahead_ms } => {
                self.arm_store_timeout();
                let released = self.store.release(
                    &self.holder,
                    machine_id,
                    token,
                    claimed.previous_watermark_ms,
                );
                if released.is_err() {
                    self.pending_release = Some(PendingRelease {
                        held: claimed.held,
                        watermark_ms: claimed.previous_watermark_ms,
                    });
                }
                self.set_problem(
                    LeaseState::ClockBehind,
                    GeneratorProblem::ClockBehind,
                    format!(
                        "machine id {machine_id} of namespace \"{}\" has a watermark {ahead_ms} ms ahead of this server's clock, more than cosid.clock_backwards_broken_threshold ({broken} ms); gave it back",
                        self.holder.namespace
                    ),
                );
                return false;
            }
        }
        if self.env.shutdown_requested() {
            self.arm_store_timeout();
            let _ = self.store.release(
                &self.holder,
                machine_id,
                token,
                claimed.previous_watermark_ms,
            );
            return false;
        }
        true
    }

    /// Opens the generator under the claimed machine id, above `floor_ms`, with the claim's
    /// deadline and bound, and says so.
    fn open(&mut self, claimed: Claimed, floor_ms: i64) {
        let machine_id = claimed.held.machine_id;
        // Reopening the machine id this generator last used must not lower its floor (a store
        // that forgot the watermark, rows deleted by hand).
        let mut floor_ticks = self.layout.unix_ms_to_ticks(floor_ms).unwrap_or(0);
        if let Some(last) = self.layout.decompose(self.generator.last_word()) {
            if last.machine_id == machine_id {
                floor_ticks = floor_ticks.max(last.ticks);
            }
        }
        self.claim_token = None;
        self.set_held(Some(claimed.held));
        self.status.set_renewed(
            claimed.store_now_ms,
            claimed.expires_at_ms,
            claimed.watermark_ms,
        );
        self.publish_limits(claimed.sent_ms, claimed.watermark_ms);
        // Backends enforce the watermark too, on their own clock reads: nothing is issued at or
        // before it, and a clock still behind it counts as a step back. The protocol's decoder
        // checked the machine id against the machine bits; were it refused anyway, the generator
        // would stay closed, which refuses ids.
        let opened = self.generator.open(&self.layout, machine_id, floor_ticks);
        debug_assert!(opened.is_ok());
        self.status.set_problem(GeneratorProblem::None);
        self.status.last_error.store("");
        self.status.set_state(LeaseState::Up);
        self.next_renewal_ms = claimed.sent_ms + self.timing.guarder_initial_delay_ms;
        self.next_state_write_ms = 0;
        self.note(
            LogLevel::Log,
            format!(
                "cosid: leased machine id {machine_id} in namespace \"{}\" as \"{}\" ({})",
                self.holder.namespace, self.holder.instance_id, claimed.how
            ),
        );
    }

    /// Why the store cannot be claimed from yet, and what fixes it.
    fn not_ready(&self, readiness: Readiness) -> (GeneratorProblem, String) {
        let remote = self.store.is_remote();
        let database = &self.database;
        let version = env!("CARGO_PKG_VERSION");
        match readiness {
            Readiness::Ready => (GeneratorProblem::None, String::new()),
            Readiness::ReadOnly if remote => (
                GeneratorProblem::Standby,
                format!(
                    "{}: waiting for a writable primary; list every host that can become the store's primary in cosid.lease_store",
                    StoreError::ReadOnly
                ),
            ),
            Readiness::ReadOnly => (
                GeneratorProblem::Standby,
                format!(
                    "this server is a hot standby; the lease table in database \"{database}\" is read-only until it is promoted"
                ),
            ),
            Readiness::NoExtension if remote => (
                GeneratorProblem::NoExtension,
                "waiting for the lease protocol in cosid.lease_store: install it with psql -f sql/lease_store.sql, or CREATE EXTENSION cosid there".to_string(),
            ),
            Readiness::NoExtension => (
                GeneratorProblem::NoExtension,
                format!("waiting for the extension: run CREATE EXTENSION cosid in database \"{database}\""),
            ),
            Readiness::Outdated if remote => (
                GeneratorProblem::NoExtension,
                format!(
                    "waiting for the lease store in cosid.lease_store to be updated: it has an older version's protocol than this server's cosid {version}; run the store's update scripts there (lease_store--<old>--<new>.sql, in contrib/cosid/ of PostgreSQL's share directory when installed from a package, or made into target/sql/ by make sql)"
                ),
            ),
            Readiness::Outdated => (
                GeneratorProblem::NoExtension,
                format!(
                    "waiting for the extension's update: its SQL objects in database \"{database}\" are older than this server's cosid {version}; run ALTER EXTENSION cosid UPDATE there"
                ),
            ),
            Readiness::Untrusted => {
                let place = if remote {
                    "the lease store in cosid.lease_store".to_string()
                } else {
                    format!("database \"{database}\"")
                };
                (
                    GeneratorProblem::NoExtension,
                    format!(
                        "not calling the lease functions of {place}: they are not cosid's (cosid.lease_claim, cosid.lease_renew and cosid.lease_release must be SECURITY DEFINER functions owned by the role cosid_lease_owner, as CREATE EXTENSION cosid and lease_store.sql make them); drop the schema cosid that someone else created there and install cosid's"
                    ),
                )
            }
        }
    }

    /// Why a claim took no machine id.
    fn refused(&mut self, outcome: ClaimOutcome) -> (GeneratorProblem, String) {
        let holder = &self.holder;
        let namespace = &holder.namespace;
        match outcome {
            ClaimOutcome::Busy {
                machine_id,
                expires_at_ms,
            } => (
                GeneratorProblem::OwnLeaseLive,
                format!(
                    "machine id {machine_id} of namespace \"{namespace}\" is leased to this instance id (\"{}\") under an earlier claim, live until {}: waiting for it to expire, since whoever made that claim (this server before a crash, or another server with the same instance id) may still be generating",
                    holder.instance_id,
                    format_unix_ms(expires_at_ms)
                ),
            ),
            ClaimOutcome::Exhausted => (
                GeneratorProblem::Exhausted,
                format!(
                    "no machine id left in namespace \"{namespace}\": all {} ids of {} machine bits are held",
                    1u64 << holder.machine_bits,
                    holder.machine_bits
                ),
            ),
            ClaimOutcome::Contended => (
                GeneratorProblem::StoreError,
                "claiming a machine id failed: other claims kept changing the lease table; trying again".to_string(),
            ),
            ClaimOutcome::Settling { settles_at_ms } => (
                GeneratorProblem::StoreSettling,
                format!(
                    "the lease store's identity changed (a promoted standby, a point-in-time recovery, a restore, or a start of its server, which may be an older copy), and it may have forgotten claims it acknowledged: it hands out no machine id in namespace \"{namespace}\" until {} (a whole safe guard after the change was first seen), while the holders whose claims it kept go on; claiming again until then",
                    format_unix_ms(settles_at_ms)
                ),
            ),
            ClaimOutcome::LayoutMismatch => (
                GeneratorProblem::LayoutMismatch,
                format!(
                    "namespace \"{namespace}\" was used with another id layout than this server's ({}), or has live leases with other machine bits: a namespace keeps one layout for as long as the lease table has its rows, or ids can coincide; use a new namespace (see cosid.lease_namespace_layout())",
                    holder.layout
                ),
            ),
            ClaimOutcome::ClockAhead {
                allowed_ms,
                store_now_ms,
            } => (
                GeneratorProblem::ClockAhead,
                format!(
                    "this server's clock is {} ms ahead of the lease store's, more than the store allows ({allowed_ms} ms, cosid.store_settings.max_clock_lead): after the store forgets a claim, the next holder's ids start that far above the time it settled, and a holder further ahead could issue the same ids; set this server's clock right (NTP), or raise the limit on the store",
                    self.env.unix_ms() - store_now_ms
                ),
            ),
            ClaimOutcome::Claimed { .. } => (GeneratorProblem::None, String::new()),
        }
    }

    /// A stable instance also honours the floor in its local state file (`record`, read before
    /// the claim): its last timestamp, plus `cosid.local_state_interval` unless it was written at
    /// a clean shutdown. It covers a lease table that forgot its watermark (restored, recreated,
    /// rows deleted). A record of another namespace or machine id says nothing about this one.
    fn honoured_watermark(
        &mut self,
        record: Option<&StateRecord>,
        machine_id: u32,
        store_watermark_ms: i64,
    ) -> i64 {
        match record {
            Some(record) if record.is_for(&self.holder.namespace, machine_id) => {
                store_watermark_ms.max(self.env.state_floor_ms(record))
            }
            _ => store_watermark_ms,
        }
    }

    /// Raises the generator's bound to the watermark just written, and moves its deadline to
    /// the one of the renewal sent at `sent_ms`. With fail-fast off, neither is enforced: the
    /// generator keeps going while renewals fail (unsafe, as documented), but a lost lease still
    /// stops it.
    fn publish_limits(&mut self, sent_ms: u64, watermark_ms: i64) {
        let generator = self.generator;
        if !self.env.fail_fast() {
            generator.set_tick_bound(u64::MAX);
            generator.set_deadline_ms(u64::MAX);
            return;
        }
        let bound = self
            .layout
            .unix_ms_to_ticks(watermark_ms)
            .unwrap_or(self.layout.max_ticks());
        let current = generator.tick_bound();
        if current == u64::MAX || bound > current || !generator.is_open() {
            generator.set_tick_bound(bound);
        }
        generator.set_deadline_ms(self.timing.deadline_ms(sent_ms));
    }

    fn renew(&mut self) {
        let Some(held) = self.held() else {
            return;
        };
        let timing = self.timing;
        let sent_ms = self.env.monotonic_ms();
        self.next_renewal_ms = sent_ms + timing.guarder_delay_ms;
        let watermark_ms = timing.watermark_ms(self.env.unix_ms());
        // Whether the holder still generates under renewals some store acknowledged is decided
        // by the store as it sends the call: a store that settles after a failover renews such
        // a lease even where its copy shows it expired.
        let live_until_ms = if self.generator.is_open() {
            self.generator.deadline_ms()
        } else {
            0
        };
        self.arm_store_timeout();
        let renewed = self.store.renew(
            &self.holder,
            held.machine_id,
            held.token,
            timing.safe_guard_ms,
            watermark_ms,
            live_until_ms,
        );
        let namespace = &self.holder.namespace;
        let machine_id = held.machine_id;
        match renewed {
            Ok(Some(renewed)) => {
                self.status
                    .set_renewed(renewed.store_now_ms, renewed.expires_at_ms, watermark_ms);
                self.publish_limits(sent_ms, watermark_ms);
                if self.status.state() != LeaseState::Up {
                    self.status.set_problem(GeneratorProblem::None);
                    self.status.last_error.store("");
                    self.status.set_state(LeaseState::Up);
                    let line = format!(
                        "cosid: lease of machine id {machine_id} in namespace \"{}\" renewed",
                        self.holder.namespace
                    );
                    self.note(LogLevel::Log, line);
                }
            }
            Ok(None) => {
                // Somebody else may hold the machine id now: stop at once, fail-fast or not.
                let text = format!(
                    "lease of machine id {machine_id} in namespace \"{namespace}\" was lost: the lease table no longer shows it held by \"{}\" with this claim; claiming again",
                    self.holder.instance_id
                );
                self.generator.close();
                self.set_held(None);
                self.next_renewal_ms = 0;
                self.status.count_renewal_failure();
                self.set_problem(LeaseState::Lost, GeneratorProblem::Lost, text);
            }
            Err(why) => {
                // Tried again soon (the store makes a new connection), not a whole period
                // later: the lease may be lost, and the store back within a second.
                self.next_renewal_ms = sent_ms + RENEWAL_RETRY_MS.min(timing.guarder_delay_ms);
                self.status.count_renewal_failure();
                let text = format!(
                    "renewing the lease of machine id {machine_id} in namespace \"{namespace}\" failed: {why}; trying again"
                );
                self.set_problem(LeaseState::Down, GeneratorProblem::StoreError, text);
            }
        }
    }

    /// The timestamp of the last id issued (or the floor, if none was): exact once the generator
    /// is closed.
    fn last_issued_ms(&self) -> i64 {
        self.generator.last_timestamp_ms(&self.layout)
    }

    /// Writes the floor a restart must honour: the last timestamp issued, padded for what may be
    /// issued before the next write; once the generator is `closed`, the exact last timestamp.
    fn write_state_file(&mut self, closed: bool) {
        let Some(held) = self.held() else {
            return;
        };
        let interval_ms = self.env.local_state_interval_ms();
        self.next_state_write_ms = self.env.monotonic_ms() + interval_ms;
        let last_ms = self.last_issued_ms();
        let pad_ms = (!closed).then_some(interval_ms);
        let written =
            self.env
                .write_state(&self.holder.namespace, held.machine_id, last_ms, pad_ms);
        if let Err(why) = written {
            self.note(LogLevel::Warning, format!("cosid: {why}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wait before a session's first retry of a claim: a second plus its own spread.
    fn first_retry<S: LeaseStore, E: Env>(session: &Session<'_, S, E>) -> u64 {
        CLAIM_RETRY_MS + retry_spread_ms(&session.holder.instance_id)
    }

    #[test]
    fn claims_the_store_does_not_answer_back_off_and_servers_spread_their_retries() {
        assert_eq!(claim_retry_ms(0, 7), 1_007);
        assert_eq!(claim_retry_ms(1, 7), 2_007);
        assert_eq!(claim_retry_ms(2, 7), 2_007);
        assert_eq!(claim_retry_ms(u32::MAX, 7), 2_007);
        let spreads: std::collections::BTreeSet<u64> = (0..20)
            .map(|pid| retry_spread_ms(&format!("db1:5432:{pid}")))
            .collect();
        assert!(spreads.iter().all(|spread| *spread < 500));
        // Twenty servers of one host do not retry in step.
        assert!(spreads.len() >= 15, "{spreads:?}");
        assert_eq!(
            retry_spread_ms("db1:5432:77"),
            retry_spread_ms("db1:5432:77")
        );
    }
    use crate::generator::{BackwardsPolicy, Clock, GenerateError, GeneratorConfig};
    use crate::layout::TimeUnit;
    use crate::protocol::{Call, Value};
    use std::collections::VecDeque;

    const EPOCH_MS: i64 = 1_577_203_200_000;
    const START_WALL_MS: i64 = 1_700_000_000_000;
    const START_MONO_MS: u64 = 50_000;
    const TOKEN: u64 = 0xfeed;

    type Answer = Result<Vec<Vec<Value>>, StoreError>;

    /// A store that answers each kind of call from its own script and records every call.
    #[derive(Default)]
    struct ScriptedStore {
        remote: bool,
        readiness: VecDeque<Answer>,
        claims: VecDeque<Answer>,
        renewals: VecDeque<Answer>,
        releases: VecDeque<Answer>,
        calls: Vec<Call>,
        timeouts: Vec<Duration>,
    }

    impl ScriptedStore {
        fn calls_of(&self, function: &str) -> Vec<&Call> {
            self.calls
                .iter()
                .filter(|call| call.sql.contains(&format!("cosid.{function}($")))
                .collect()
        }
    }

    impl LeaseStore for ScriptedStore {
        fn is_remote(&self) -> bool {
            self.remote
        }
        fn set_timeout(&mut self, timeout: Duration) {
            self.timeouts.push(timeout);
        }
        fn run(&mut self, call: &Call) -> Answer {
            self.calls.push(call.clone());
            let (queue, default) = if call.sql.contains("to_regprocedure") {
                (&mut self.readiness, Some(bools(&[true, true, true])))
            } else if call.sql.contains("cosid.lease_claim($") {
                (&mut self.claims, None)
            } else if call.sql.contains("lease_renew") {
                (&mut self.renewals, Some(renewed(1_000)))
            } else {
                (&mut self.releases, Some(bools(&[true])))
            };
            match queue.pop_front() {
                Some(answer) => answer,
                None => Ok(default.unwrap_or_else(|| panic!("no answer scripted for {call:?}"))),
            }
        }
    }

    fn bools(values: &[bool]) -> Vec<Vec<Value>> {
        vec![values.iter().map(|v| Value::Bool(*v)).collect()]
    }

    fn renewed(expires_in_ms: i64) -> Vec<Vec<Value>> {
        vec![vec![
            Value::BigInt(START_WALL_MS + expires_in_ms),
            Value::BigInt(START_WALL_MS),
        ]]
    }

    fn claimed(how: &str, machine_id: i32, previous_watermark_ms: i64) -> Answer {
        Ok(vec![vec![
            Value::Text(how.into()),
            Value::Int(machine_id),
            Value::BigInt(previous_watermark_ms),
            Value::BigInt(START_WALL_MS + 4_000),
            Value::BigInt(START_WALL_MS),
        ]])
    }

    fn refused(outcome: &str, machine_id: Value) -> Answer {
        Ok(vec![vec![
            Value::Text(outcome.into()),
            machine_id,
            Value::Null,
            Value::BigInt(START_WALL_MS + 3_000),
            Value::BigInt(START_WALL_MS),
        ]])
    }

    /// Clocks that move only when told to (or when the session sleeps), and everything else the
    /// session asks of its process, recorded.
    struct ScriptedEnv {
        mono_ms: u64,
        wall_ms: i64,
        shutdown: bool,
        shutdown_when_sleeping: bool,
        randoms: VecDeque<u64>,
        logs: Vec<(LogLevel, String)>,
        sleeps: Vec<u64>,
        fail_fast: bool,
        broken_threshold_ms: u64,
        interval_ms: u64,
        state: Result<Option<StateRecord>, String>,
        writes: Vec<(String, u32, i64, Option<u64>)>,
        write_error: Option<String>,
    }

    impl Default for ScriptedEnv {
        fn default() -> Self {
            ScriptedEnv {
                mono_ms: START_MONO_MS,
                wall_ms: START_WALL_MS,
                shutdown: false,
                shutdown_when_sleeping: false,
                randoms: VecDeque::from([TOKEN, TOKEN + 1, TOKEN + 2]),
                logs: Vec::new(),
                sleeps: Vec::new(),
                fail_fast: true,
                broken_threshold_ms: 500,
                interval_ms: 1_000,
                state: Ok(None),
                writes: Vec::new(),
                write_error: None,
            }
        }
    }

    impl ScriptedEnv {
        fn advance(&mut self, ms: u64) {
            self.mono_ms += ms;
            self.wall_ms += ms as i64;
        }
    }

    impl Env for ScriptedEnv {
        fn monotonic_ms(&mut self) -> u64 {
            self.mono_ms
        }
        fn unix_ms(&mut self) -> i64 {
            self.wall_ms
        }
        fn sleep_ms(&mut self, ms: u64) {
            self.sleeps.push(ms);
            self.advance(ms);
            self.shutdown |= self.shutdown_when_sleeping;
        }
        fn shutdown_requested(&mut self) -> bool {
            self.shutdown
        }
        fn random_u64(&mut self) -> u64 {
            self.randoms.pop_front().expect("a random number")
        }
        fn log(&mut self, level: LogLevel, line: &str) {
            self.logs.push((level, line.to_string()));
        }
        fn fail_fast(&mut self) -> bool {
            self.fail_fast
        }
        fn broken_threshold_ms(&mut self) -> u64 {
            self.broken_threshold_ms
        }
        fn local_state_interval_ms(&mut self) -> u64 {
            self.interval_ms
        }
        fn read_state(&mut self) -> Result<Option<StateRecord>, String> {
            self.state.clone()
        }
        fn state_floor_ms(&mut self, record: &StateRecord) -> i64 {
            record.floor_ms
        }
        fn write_state(
            &mut self,
            namespace: &str,
            machine_id: u32,
            last_ms: i64,
            pad_ms: Option<u64>,
        ) -> Result<(), String> {
            self.writes
                .push((namespace.to_string(), machine_id, last_ms, pad_ms));
            self.write_error.clone().map_or(Ok(()), Err)
        }
    }

    /// The generator's clock in the tests: reads the session's scripted wall clock.
    struct FixedClock {
        wall_ms: i64,
        mono_ms: u64,
    }

    impl Clock for FixedClock {
        fn unix_ms(&mut self) -> i64 {
            self.wall_ms
        }
        fn monotonic_ms(&mut self) -> u64 {
            self.mono_ms
        }
        fn spin(&mut self) {
            self.wall_ms += 1;
        }
        fn sleep_ms(&mut self, ms: u64) {
            self.wall_ms += ms as i64;
        }
        fn backwards_policy(&mut self) -> BackwardsPolicy {
            BackwardsPolicy::default()
        }
    }

    fn layout() -> Layout {
        Layout::new(EPOCH_MS, TimeUnit::Millisecond, 41, 3, 12).unwrap()
    }

    fn timing() -> LeaseTiming {
        LeaseTiming {
            safe_guard_ms: 4_000,
            guarder_delay_ms: 1_000,
            guarder_initial_delay_ms: 1_000,
        }
    }

    fn holder(stable: bool) -> Holder {
        Holder::new("orders", &layout(), "db1:5432:7", stable)
    }

    /// The shared memory a session drives, as backends would see it.
    struct Shared {
        generator: GeneratorState,
        status: GeneratorStatus,
    }

    impl Shared {
        fn new() -> Shared {
            Shared {
                generator: GeneratorState::closed(),
                status: GeneratorStatus::new(),
            }
        }

        fn session(&self, store: ScriptedStore, env: ScriptedEnv) -> TestSession<'_> {
            self.session_with(store, env, holder(false), timing())
        }

        fn session_with(
            &self,
            store: ScriptedStore,
            env: ScriptedEnv,
            holder: Holder,
            timing: LeaseTiming,
        ) -> TestSession<'_> {
            let slot = Slot {
                generator: &self.generator,
                status: &self.status,
                layout: layout(),
            };
            let mut session = Session::new(slot, holder, "app", store, env);
            session.start(timing);
            session
        }

        /// A session that has just leased machine id 5 (a new one, no watermark).
        fn leased(&self) -> TestSession<'_> {
            let mut session = self.session(
                store_with_claims([claimed("new", 5, 0)]),
                ScriptedEnv::default(),
            );
            session.step();
            session
        }

        /// One id, as a backend would issue it at `wall_ms`, `mono_ms`.
        fn next_id(&self, wall_ms: i64, mono_ms: u64) -> Result<i64, GenerateError> {
            let config = GeneratorConfig {
                layout: layout(),
                sequence_reset_threshold: 0,
            };
            self.generator
                .next_id(&config, &mut FixedClock { wall_ms, mono_ms })
        }
    }

    type TestSession<'a> = Session<'a, ScriptedStore, ScriptedEnv>;

    fn store_with_claims(claims: impl IntoIterator<Item = Answer>) -> ScriptedStore {
        ScriptedStore {
            claims: claims.into_iter().collect(),
            ..ScriptedStore::default()
        }
    }

    fn ticks(unix_ms: i64) -> u64 {
        layout().unix_ms_to_ticks(unix_ms).unwrap()
    }

    fn last_log(session: &TestSession<'_>) -> String {
        session
            .env
            .logs
            .last()
            .map(|(_, line)| line.clone())
            .unwrap_or_default()
    }

    #[test]
    fn a_new_machine_id_opens_the_generator_with_the_claims_limits() {
        let shared = Shared::new();
        let session = shared.leased();

        assert_eq!(
            session.held(),
            Some(Held {
                machine_id: 5,
                token: TOKEN
            })
        );
        let status = &shared.status;
        assert_eq!(status.state(), LeaseState::Up);
        assert_eq!(status.problem(), GeneratorProblem::None);
        assert_eq!(status.held(), Some((5, TOKEN)));
        assert_eq!(status.watermark_ms(), START_WALL_MS + 4_000);
        assert_eq!(status.expires_at_ms(), START_WALL_MS + 4_000);
        assert_eq!(status.timing_ms(), Some((4_000, 1_000)));
        // Deadline: sent + safe guard - margin (400 ms); bound: the watermark written.
        assert_eq!(shared.generator.deadline_ms(), START_MONO_MS + 3_600);
        assert_eq!(shared.generator.tick_bound(), ticks(START_WALL_MS + 4_000));
        assert_eq!(session.next_wake_ms(), START_MONO_MS + 1_000);
        assert_eq!(
            last_log(&session),
            "cosid: leased machine id 5 in namespace \"orders\" as \"db1:5432:7\" (new)"
        );

        // The claim carried the holder, the safe guard, the token and the watermark, in order.
        let claim = session.store.calls_of("lease_claim")[0].params.clone();
        assert_eq!(claim[0], crate::protocol::Param::Text("orders".into()));
        assert_eq!(claim[1], crate::protocol::Param::Int(3));
        assert_eq!(claim[4], crate::protocol::Param::BigInt(4_000));
        assert_eq!(
            claim[5],
            crate::protocol::Param::Text(format!("{TOKEN:016x}"))
        );
        assert_eq!(
            claim[6],
            crate::protocol::Param::BigInt(START_WALL_MS + 4_000)
        );

        let id = shared
            .next_id(START_WALL_MS + 10, START_MONO_MS + 10)
            .unwrap();
        let parts = layout().decompose(id).unwrap();
        assert_eq!(parts.machine_id, 5);
        assert_eq!(parts.ticks, ticks(START_WALL_MS + 10));
        // Past the deadline, backends refuse.
        assert_eq!(
            shared.next_id(START_WALL_MS + 20, START_MONO_MS + 3_600),
            Err(GenerateError::DeadlinePassed)
        );
    }

    #[test]
    fn own_released_and_expired_machine_ids_open_alike() {
        for how in ["own", "released", "expired"] {
            let shared = Shared::new();
            let mut session = shared.session(
                store_with_claims([claimed(how, 2, 0)]),
                ScriptedEnv::default(),
            );
            session.step();
            assert_eq!(shared.status.state(), LeaseState::Up, "{how}");
            assert!(shared.generator.is_open(), "{how}");
            assert!(last_log(&session).ends_with(&format!("({how})")), "{how}");
        }
    }

    #[test]
    fn a_watermark_ahead_of_the_clock_is_waited_out_and_becomes_the_floor() {
        let shared = Shared::new();
        let watermark = START_WALL_MS + 300;
        let mut session = shared.session(
            store_with_claims([claimed("released", 1, watermark)]),
            ScriptedEnv::default(),
        );
        session.step();
        assert_eq!(session.env.sleeps, vec![301]);
        assert_eq!(shared.status.state(), LeaseState::Up);
        // Nothing at or before the watermark, even with a clock read behind it.
        let floor = layout().decompose(shared.generator.last_word()).unwrap();
        assert_eq!(floor.ticks, ticks(watermark));
        let id = shared.next_id(watermark + 1, START_MONO_MS + 400).unwrap();
        assert!(layout().decompose(id).unwrap().ticks > ticks(watermark));
    }

    #[test]
    fn a_watermark_beyond_the_broken_threshold_is_given_back_exactly() {
        let shared = Shared::new();
        let watermark = START_WALL_MS + 10_000;
        let mut session = shared.session(
            store_with_claims([claimed("expired", 4, watermark)]),
            ScriptedEnv::default(),
        );
        session.step();
        assert_eq!(shared.status.state(), LeaseState::ClockBehind);
        assert_eq!(shared.status.problem(), GeneratorProblem::ClockBehind);
        assert!(!shared.generator.is_open());
        assert_eq!(session.held(), None);
        assert!(session.env.sleeps.is_empty());
        let release = &session.store.calls_of("lease_release")[0].params;
        assert_eq!(release[1], crate::protocol::Param::Int(4));
        assert_eq!(release[4], crate::protocol::Param::BigInt(watermark));
        assert_eq!(
            shared.status.last_error.load(),
            "machine id 4 of namespace \"orders\" has a watermark 10001 ms ahead of this server's clock, more than cosid.clock_backwards_broken_threshold (500 ms); gave it back"
        );
    }

    #[test]
    fn a_failed_give_back_is_released_before_the_next_claim() {
        let shared = Shared::new();
        let watermark = START_WALL_MS + 10_000;
        let mut store = store_with_claims([claimed("expired", 4, watermark), claimed("new", 6, 0)]);
        store.releases = VecDeque::from([
            Err(StoreError::failed("connection reset")),
            Err(StoreError::failed("still down")),
        ]);
        let mut session = shared.session(store, ScriptedEnv::default());
        session.step();
        assert_eq!(shared.status.state(), LeaseState::ClockBehind);
        // The release fails again: nothing is claimed meanwhile.
        session.env.advance(1_000);
        session.step();
        assert_eq!(session.store.calls_of("lease_claim").len(), 1);
        // It succeeds: the machine id goes back with its watermark, then a claim is made.
        session.env.advance(1_000);
        session.step();
        let releases = session.store.calls_of("lease_release");
        assert_eq!(releases.len(), 3);
        assert_eq!(
            releases[2].params[4],
            crate::protocol::Param::BigInt(watermark)
        );
        assert_eq!(session.store.calls_of("lease_claim").len(), 2);
        assert_eq!(session.held().map(|held| held.machine_id), Some(6));
    }

    #[test]
    fn refusals_say_why_and_claim_again_a_second_later() {
        let cases = [
            (
                refused("busy", Value::Int(2)),
                GeneratorProblem::OwnLeaseLive,
                "machine id 2 of namespace \"orders\" is leased to this instance id (\"db1:5432:7\") under an earlier claim, live until 2023-11-14 22:13:23.000+00",
            ),
            (
                refused("exhausted", Value::Null),
                GeneratorProblem::Exhausted,
                "no machine id left in namespace \"orders\": all 8 ids of 3 machine bits are held",
            ),
            (
                refused("contended", Value::Null),
                GeneratorProblem::StoreError,
                "claiming a machine id failed: other claims kept changing the lease table; trying again",
            ),
            (
                refused("layout", Value::Null),
                GeneratorProblem::LayoutMismatch,
                "namespace \"orders\" was used with another id layout than this server's (epoch 1577203200000 ms, millisecond, 41/3/12 bits)",
            ),
        ];
        for (answer, problem, text) in cases {
            let shared = Shared::new();
            let mut session = shared.session(store_with_claims([answer]), ScriptedEnv::default());
            session.step();
            assert_eq!(shared.status.state(), LeaseState::Claiming, "{text}");
            assert_eq!(shared.status.problem(), problem, "{text}");
            assert!(shared.status.last_error.load().starts_with(text), "{text}");
            assert!(!shared.generator.is_open());
            assert_eq!(session.held(), None);
            assert_eq!(
                session.next_wake_ms(),
                START_MONO_MS + first_retry(&session)
            );
            assert_eq!(session.env.logs.len(), 1);
            assert_eq!(session.env.logs[0].0, LogLevel::Warning);
        }
    }

    #[test]
    fn a_machine_id_beyond_the_machine_bits_is_an_error_not_an_id() {
        let shared = Shared::new();
        let mut session = shared.session(
            store_with_claims([claimed("new", 8, 0)]),
            ScriptedEnv::default(),
        );
        session.step();
        assert!(!shared.generator.is_open());
        assert_eq!(shared.status.problem(), GeneratorProblem::StoreError);
        let error = shared.status.last_error.load();
        assert!(
            error.starts_with("claiming a machine id failed: the lease store answered machine id 8, outside 0 to 7 (3 machine bits)"),
            "{error}"
        );
    }

    #[test]
    fn a_session_backs_off_while_the_store_does_not_answer_and_not_after() {
        let shared = Shared::new();
        let store = store_with_claims([
            Err(StoreError::failed("connection refused")),
            Err(StoreError::failed("connection refused")),
            Err(StoreError::failed("connection refused")),
            refused("exhausted", Value::Null),
            refused("exhausted", Value::Null),
        ]);
        let mut session = shared.session(store, ScriptedEnv::default());
        let spread = retry_spread_ms(&session.holder.instance_id);
        let mut waits = Vec::new();
        for _ in 0..5 {
            let started = session.env.monotonic_ms();
            session.step();
            let wait = session.next_wake_ms() - started;
            waits.push(wait);
            session.env.advance(wait);
        }
        // Unreachable: 1 s, then 2 s; an answer (no machine id left) puts it back to 1 s.
        assert_eq!(
            waits,
            [1_000, 2_000, 2_000, 2_000, 1_000].map(|ms| ms + spread)
        );
    }

    #[test]
    fn a_claim_whose_answer_was_lost_is_sent_again_with_the_same_token() {
        let shared = Shared::new();
        let mut store = store_with_claims([
            Err(StoreError::failed(
                "the lease store did not answer a call (1000 ms allowed) in time",
            )),
            Err(StoreError::failed("connection refused")),
            claimed("own", 3, 0),
            claimed("new", 1, 0),
        ]);
        store.renewals = VecDeque::from([Ok(vec![])]);
        let mut session = shared.session(store, ScriptedEnv::default());
        for _ in 0..3 {
            session.step();
            session.env.advance(1_000);
        }
        assert_eq!(session.held().map(|held| held.machine_id), Some(3));
        // A lost lease, and the claim after it: a new token.
        session.step();
        assert_eq!(shared.status.state(), LeaseState::Lost);
        session.step();
        let tokens: Vec<_> = session
            .store
            .calls_of("lease_claim")
            .iter()
            .map(|call| call.params[5].clone())
            .collect();
        let text = |token: u64| crate::protocol::Param::Text(format!("{token:016x}"));
        assert_eq!(
            tokens,
            vec![text(TOKEN), text(TOKEN), text(TOKEN), text(TOKEN + 1)]
        );
        assert_eq!(
            session.held(),
            Some(Held {
                machine_id: 1,
                token: TOKEN + 1
            })
        );
    }

    #[test]
    fn store_errors_while_claiming_are_reported_and_logged_once() {
        let shared = Shared::new();
        let mut store = store_with_claims([]);
        store.readiness = VecDeque::from([
            Err(StoreError::failed("could not connect")),
            Err(StoreError::failed("could not connect")),
        ]);
        let mut session = shared.session(store, ScriptedEnv::default());
        session.step();
        session.env.advance(1_000);
        session.step();
        assert_eq!(shared.status.state(), LeaseState::Claiming);
        assert_eq!(shared.status.problem(), GeneratorProblem::StoreError);
        assert_eq!(
            shared.status.last_error.load(),
            "cannot reach the lease table: could not connect"
        );
        assert_eq!(session.env.logs.len(), 1);
        assert!(session.store.calls_of("lease_claim").is_empty());
    }

    #[test]
    fn a_store_not_ready_is_waited_for_with_the_fix_in_the_message() {
        let cases: [(bool, bool, [bool; 3], GeneratorProblem, &str); 7] = [
            (false, true, [true, true, true], GeneratorProblem::Standby, "this server is a hot standby; the lease table in database \"app\" is read-only until it is promoted"),
            (false, false, [false, false, false], GeneratorProblem::NoExtension, "waiting for the extension: run CREATE EXTENSION cosid in database \"app\""),
            (true, false, [false, false, false], GeneratorProblem::NoExtension, "waiting for the lease protocol in cosid.lease_store: install it with psql -f sql/lease_store.sql"),
            (false, false, [false, true, false], GeneratorProblem::NoExtension, "waiting for the extension's update: its SQL objects in database \"app\" are older than this server's cosid"),
            (true, false, [false, true, false], GeneratorProblem::NoExtension, "waiting for the lease store in cosid.lease_store to be updated"),
            (false, false, [true, false, false], GeneratorProblem::NoExtension, "not calling the lease functions of database \"app\": they are not cosid's"),
            (true, false, [true, true, false], GeneratorProblem::NoExtension, "not calling the lease functions of the lease store in cosid.lease_store: they are not cosid's"),
        ];
        for (remote, read_only, protocol, problem, text) in cases {
            let shared = Shared::new();
            let mut store = store_with_claims([]);
            store.remote = remote;
            store.readiness = VecDeque::from([if read_only {
                Err(StoreError::ReadOnly)
            } else {
                Ok(bools(&protocol))
            }]);
            let mut session = shared.session(store, ScriptedEnv::default());
            session.step();
            assert_eq!(shared.status.state(), LeaseState::Stopped, "{text}");
            assert_eq!(shared.status.problem(), problem, "{text}");
            let error = shared.status.last_error.load();
            assert!(error.starts_with(text), "{error}");
            assert!(session.store.calls_of("lease_claim").is_empty());
        }
    }

    #[test]
    fn renewals_move_the_deadline_and_raise_the_bound() {
        let shared = Shared::new();
        let mut session = shared.leased();
        // Not due yet: nothing is sent.
        session.env.advance(999);
        session.step();
        assert!(session.store.calls_of("lease_renew").is_empty());
        session.env.advance(1);
        session.step();
        let renewal = &session.store.calls_of("lease_renew")[0].params;
        assert_eq!(renewal[1], crate::protocol::Param::Int(5));
        assert_eq!(
            renewal[3],
            crate::protocol::Param::Text(format!("{TOKEN:016x}"))
        );
        assert_eq!(
            renewal[5],
            crate::protocol::Param::BigInt(START_WALL_MS + 1_000 + 4_000)
        );
        assert_eq!(
            shared.generator.deadline_ms(),
            START_MONO_MS + 1_000 + 3_600
        );
        assert_eq!(shared.generator.tick_bound(), ticks(START_WALL_MS + 5_000));
        assert_eq!(shared.status.watermark_ms(), START_WALL_MS + 5_000);
        assert_eq!(session.next_wake_ms(), START_MONO_MS + 2_000);
        assert_eq!(shared.status.state(), LeaseState::Up);
    }

    #[test]
    fn a_failed_renewal_keeps_the_old_deadline_and_recovers() {
        let shared = Shared::new();
        let mut store = store_with_claims([claimed("new", 5, 0)]);
        store.renewals = VecDeque::from([Err(StoreError::failed(
            "the lease store did not answer in time",
        ))]);
        let mut session = shared.session(store, ScriptedEnv::default());
        session.step();
        session.env.advance(1_000);
        session.step();
        assert_eq!(shared.status.state(), LeaseState::Down);
        assert_eq!(shared.status.problem(), GeneratorProblem::StoreError);
        assert_eq!(
            shared.status.last_error.load(),
            "renewing the lease of machine id 5 in namespace \"orders\" failed: the lease store did not answer in time; trying again"
        );
        assert_eq!(shared.status.renewal_failures(), 1);
        // Still open, until the claim's own deadline.
        assert_eq!(shared.generator.deadline_ms(), START_MONO_MS + 3_600);
        assert!(shared
            .next_id(START_WALL_MS + 1_001, START_MONO_MS + 1_001)
            .is_ok());
        assert_eq!(
            shared.next_id(START_WALL_MS + 3_600, START_MONO_MS + 3_600),
            Err(GenerateError::DeadlinePassed)
        );
        session.env.advance(1_000);
        session.step();
        assert_eq!(shared.status.state(), LeaseState::Up);
        assert_eq!(shared.status.last_error.load(), "");
        // The failure stays counted once the lease is renewed again.
        assert_eq!(shared.status.renewal_failures(), 1);
        assert_eq!(
            shared.generator.deadline_ms(),
            START_MONO_MS + 2_000 + 3_600
        );
        assert_eq!(
            last_log(&session),
            "cosid: lease of machine id 5 in namespace \"orders\" renewed"
        );
    }

    #[test]
    fn a_failed_renewal_is_tried_again_within_a_second_whatever_the_period() {
        let shared = Shared::new();
        let mut store = store_with_claims([claimed("new", 5, 0)]);
        store.renewals = VecDeque::from([Err(StoreError::failed("connection closed")), Ok(vec![])]);
        let slow = LeaseTiming {
            safe_guard_ms: 20_000,
            guarder_delay_ms: 5_000,
            guarder_initial_delay_ms: 5_000,
        };
        let mut session = shared.session_with(store, ScriptedEnv::default(), holder(false), slow);
        session.step();
        session.env.advance(5_000);
        session.step();
        assert_eq!(shared.status.state(), LeaseState::Down);
        let failed_at = START_MONO_MS + 5_000;
        assert_eq!(session.next_wake_ms(), failed_at + RENEWAL_RETRY_MS);
        // The store is back and no longer shows the claim: the holder knows a second later.
        session.env.advance(RENEWAL_RETRY_MS);
        session.step();
        assert_eq!(shared.status.state(), LeaseState::Lost);
        assert!(!shared.generator.is_open());
        // The failed renewal and the lost one.
        assert_eq!(shared.status.renewal_failures(), 2);
    }

    #[test]
    fn a_renewal_says_whether_the_holder_is_still_generating() {
        let shared = Shared::new();
        let mut store = store_with_claims([claimed("new", 5, 0)]);
        store.renewals = VecDeque::from([
            Ok(renewed(5_000)),
            Err(StoreError::failed("the lease store did not answer in time")),
            Err(StoreError::failed("the lease store did not answer in time")),
            Err(StoreError::failed("the lease store did not answer in time")),
            Err(StoreError::failed("the lease store did not answer in time")),
            Ok(vec![]),
        ]);
        let mut session = shared.session(store, ScriptedEnv::default());
        session.step();
        for _ in 0..6 {
            session.env.advance(1_000);
            session.step();
        }
        let deadlines: Vec<_> = session
            .store
            .calls_of("lease_renew")
            .iter()
            .map(|call| match call.params[6] {
                crate::protocol::Param::LiveBefore(deadline) => deadline,
                ref other => panic!("not a deadline: {other:?}"),
            })
            .collect();
        // The claim's deadline (3.6 s), then the renewal's at 1 s (1 s + 3.6 s), then none once
        // the lease was lost.
        let claimed = START_MONO_MS + 3_600;
        let renewed = START_MONO_MS + 1_000 + 3_600;
        assert_eq!(
            deadlines,
            [claimed, renewed, renewed, renewed, renewed, renewed]
        );
        // What a store sending each call at once decides: the renewals at 2 to 4 s fail while
        // the generator still runs; at 5 s its deadline (4.6 s) has passed.
        let live: Vec<bool> = deadlines
            .iter()
            .enumerate()
            .map(|(index, deadline)| {
                let sent = START_MONO_MS + 1_000 * (index as u64 + 1);
                crate::protocol::live_before(*deadline, sent, 0)
            })
            .collect();
        assert_eq!(live, [true, true, true, true, false, false]);
        // The last renewal found the lease lost: the holder generates nothing.
        assert!(!shared.generator.is_open());
    }

    #[test]
    fn a_settling_store_is_waited_out_and_says_until_when() {
        let shared = Shared::new();
        let settles_at = START_WALL_MS + 6_000;
        let settling = Ok(vec![vec![
            Value::Text("settling".into()),
            Value::Null,
            Value::Null,
            Value::BigInt(settles_at),
            Value::BigInt(START_WALL_MS),
        ]]);
        let store = store_with_claims([settling, claimed("expired", 3, 0)]);
        let mut session = shared.session(store, ScriptedEnv::default());
        session.step();
        assert_eq!(shared.status.state(), LeaseState::Claiming);
        assert_eq!(shared.status.problem(), GeneratorProblem::StoreSettling);
        assert!(!shared.generator.is_open());
        let text = shared.status.last_error.load();
        assert!(text.contains("identity changed"), "{text}");
        assert!(text.contains(&format_unix_ms(settles_at)), "{text}");
        assert_eq!(
            session.next_wake_ms(),
            START_MONO_MS + first_retry(&session)
        );
        session.env.advance(first_retry(&session));
        session.step();
        assert_eq!(shared.status.state(), LeaseState::Up);
        assert_eq!(session.store.calls_of("lease_claim").len(), 2);
    }

    #[test]
    fn a_clock_too_far_ahead_of_the_store_claims_nothing_and_says_by_how_much() {
        let shared = Shared::new();
        // The store's clock is 2.5 s behind this server's; it allows 1 s.
        let ahead = Ok(vec![vec![
            Value::Text("clock_ahead".into()),
            Value::Null,
            Value::BigInt(1_000),
            Value::Null,
            Value::BigInt(START_WALL_MS - 2_500),
        ]]);
        let store = store_with_claims([ahead, claimed("new", 3, 0)]);
        let mut session = shared.session(store, ScriptedEnv::default());
        session.step();
        assert_eq!(shared.status.state(), LeaseState::Claiming);
        assert_eq!(shared.status.problem(), GeneratorProblem::ClockAhead);
        assert!(!shared.generator.is_open());
        let text = shared.status.last_error.load();
        assert!(
            text.contains("2500 ms ahead of the lease store's"),
            "{text}"
        );
        assert!(
            text.contains("(1000 ms, cosid.store_settings.max_clock_lead)"),
            "{text}"
        );
        // Claimed again a second later, once the clock is right.
        session.env.advance(first_retry(&session));
        session.step();
        assert_eq!(shared.status.state(), LeaseState::Up);
    }

    #[test]
    fn a_lost_lease_closes_the_generator_at_once_and_claims_again() {
        for fail_fast in [true, false] {
            let shared = Shared::new();
            let mut store = store_with_claims([claimed("new", 5, 0), claimed("new", 6, 0)]);
            store.renewals = VecDeque::from([Ok(vec![])]);
            let env = ScriptedEnv {
                fail_fast,
                ..ScriptedEnv::default()
            };
            let mut session = shared.session(store, env);
            session.step();
            session.env.advance(1_000);
            session.step();
            assert!(!shared.generator.is_open());
            assert_eq!(
                shared.next_id(START_WALL_MS + 1_001, START_MONO_MS + 1_001),
                Err(GenerateError::Closed)
            );
            assert_eq!(shared.status.state(), LeaseState::Lost);
            assert_eq!(shared.status.held(), None);
            assert_eq!(session.held(), None);
            assert!(shared.status.last_error.load().contains("was lost"));
            session.step();
            assert_eq!(session.held().map(|held| held.machine_id), Some(6));
        }
    }

    #[test]
    fn without_fail_fast_nothing_bounds_the_generator() {
        let shared = Shared::new();
        let env = ScriptedEnv {
            fail_fast: false,
            ..ScriptedEnv::default()
        };
        let mut session = shared.session(store_with_claims([claimed("new", 5, 0)]), env);
        session.step();
        assert_eq!(shared.generator.deadline_ms(), u64::MAX);
        assert_eq!(shared.generator.tick_bound(), u64::MAX);
    }

    #[test]
    fn shutdown_releases_with_the_exact_last_timestamp() {
        let shared = Shared::new();
        let mut session = shared.leased();
        let last = shared
            .next_id(START_WALL_MS + 1_234, START_MONO_MS + 10)
            .unwrap();
        session.env.shutdown = true;
        session.shutdown();
        assert!(!shared.generator.is_open());
        let last_ms = layout().ticks_to_unix_ms(layout().decompose(last).unwrap().ticks);
        assert_eq!(last_ms, START_WALL_MS + 1_234);
        let release = &session.store.calls_of("lease_release")[0].params;
        assert_eq!(release[4], crate::protocol::Param::BigInt(last_ms));
        assert_eq!(shared.status.watermark_ms(), last_ms);
        assert_eq!(shared.status.state(), LeaseState::Stopped);
        assert_eq!(shared.status.problem(), GeneratorProblem::ShuttingDown);
        assert_eq!(shared.status.held(), None);
        assert_eq!(
            session.store.timeouts.last(),
            Some(&Duration::from_millis(1_000))
        );
        assert!(last_log(&session).starts_with(
            "cosid: released machine id 5 in namespace \"orders\" with watermark 2023-11-14 22:13:21.234+00"
        ));
    }

    #[test]
    fn a_shutdown_during_the_watermark_wait_gives_the_machine_id_back_unopened() {
        let shared = Shared::new();
        let watermark = START_WALL_MS + 300;
        let env = ScriptedEnv {
            shutdown_when_sleeping: true,
            ..ScriptedEnv::default()
        };
        let mut session =
            shared.session(store_with_claims([claimed("released", 1, watermark)]), env);
        session.step();
        assert!(!shared.generator.is_open());
        assert_eq!(session.held(), None);
        let release = &session.store.calls_of("lease_release")[0].params;
        assert_eq!(release[4], crate::protocol::Param::BigInt(watermark));
        assert_eq!(
            session.store.timeouts.last(),
            Some(&SHUTDOWN_CALL_TIMEOUT.min(Duration::from_millis(1_000)))
        );
    }

    #[test]
    fn a_failed_release_at_shutdown_is_logged() {
        let shared = Shared::new();
        let mut store = store_with_claims([claimed("new", 5, 0)]);
        store.releases = VecDeque::from([Err(StoreError::failed("connection refused"))]);
        let mut session = shared.session(store, ScriptedEnv::default());
        session.step();
        session.shutdown();
        assert_eq!(session.env.logs.last().unwrap().0, LogLevel::Warning);
        assert!(last_log(&session)
            .ends_with("connection refused; it frees itself when its lease expires"));
        assert_eq!(shared.status.state(), LeaseState::Stopped);
    }

    #[test]
    fn store_calls_are_bounded_by_the_renewal_period() {
        for (delay, expected) in [(100, 500), (1_000, 1_000), (60_000, 10_000)] {
            let shared = Shared::new();
            let timing = LeaseTiming {
                safe_guard_ms: 300_000,
                guarder_delay_ms: delay,
                guarder_initial_delay_ms: delay,
            };
            let mut session = shared.session_with(
                store_with_claims([claimed("new", 5, 0)]),
                ScriptedEnv::default(),
                holder(false),
                timing,
            );
            session.step();
            assert!(session
                .store
                .timeouts
                .iter()
                .all(|t| *t == Duration::from_millis(expected)));
        }
    }

    #[test]
    fn reopening_the_same_machine_id_never_lowers_its_floor() {
        let shared = Shared::new();
        let mut store = store_with_claims([claimed("new", 5, 0), claimed("own", 5, 0)]);
        store.renewals = VecDeque::from([Ok(vec![])]);
        let mut session = shared.session(store, ScriptedEnv::default());
        session.step();
        let issued = shared
            .next_id(START_WALL_MS + 900, START_MONO_MS + 5)
            .unwrap();
        session.env.advance(1_000);
        session.step(); // lost
        session.step(); // the same machine id again, its watermark forgotten by the store
        let floor = layout().decompose(shared.generator.last_word()).unwrap();
        assert_eq!(floor.ticks, layout().decompose(issued).unwrap().ticks);
        let next = shared.next_id(START_WALL_MS + 900, START_MONO_MS + 1_005);
        assert!(next.map_or(true, |id| id > issued));
    }

    fn record(namespace: &str, machine_id: u32, floor_ms: i64) -> StateRecord {
        StateRecord {
            namespace: namespace.to_string(),
            machine_id,
            floor_ms,
            written: None,
        }
    }

    #[test]
    fn a_stable_instance_honours_its_state_file_floor() {
        let shared = Shared::new();
        let env = ScriptedEnv {
            state: Ok(Some(record("orders", 5, START_WALL_MS + 200))),
            ..ScriptedEnv::default()
        };
        let mut session = shared.session_with(
            store_with_claims([claimed("own", 5, START_WALL_MS - 10)]),
            env,
            holder(true),
            timing(),
        );
        session.step();
        assert_eq!(session.env.sleeps, vec![201]);
        let floor = layout().decompose(shared.generator.last_word()).unwrap();
        assert_eq!(floor.ticks, ticks(START_WALL_MS + 200));

        // A record of another machine id or namespace says nothing about this one.
        for other in [
            record("orders", 4, START_WALL_MS + 200),
            record("users", 5, START_WALL_MS + 200),
        ] {
            let shared = Shared::new();
            let env = ScriptedEnv {
                state: Ok(Some(other)),
                ..ScriptedEnv::default()
            };
            let mut session = shared.session_with(
                store_with_claims([claimed("own", 5, 0)]),
                env,
                holder(true),
                timing(),
            );
            session.step();
            assert!(session.env.sleeps.is_empty());
        }
    }

    #[test]
    fn an_unusable_state_file_stops_claiming() {
        let shared = Shared::new();
        let env = ScriptedEnv {
            state: Err("the state file \"/data/cosid.state\" is truncated".into()),
            ..ScriptedEnv::default()
        };
        let mut session = shared.session_with(store_with_claims([]), env, holder(true), timing());
        session.step();
        assert_eq!(shared.status.state(), LeaseState::Stopped);
        assert_eq!(shared.status.problem(), GeneratorProblem::StateFile);
        assert_eq!(
            shared.status.last_error.load(),
            "the state file \"/data/cosid.state\" is truncated; not claiming a machine id until it is restored or removed"
        );
        assert!(session.store.calls.is_empty());
    }

    #[test]
    fn a_stable_instance_writes_its_floor_padded_then_exact_at_shutdown() {
        let shared = Shared::new();
        let mut session = shared.session_with(
            store_with_claims([claimed("new", 5, 0)]),
            ScriptedEnv::default(),
            holder(true),
            timing(),
        );
        session.step();
        assert_eq!(session.next_wake_ms(), 0);
        session.step();
        // Nothing issued yet: the floor it was opened with, the watermark found (none: the epoch).
        let floor_ms = EPOCH_MS;
        assert_eq!(
            session.env.writes,
            vec![("orders".to_string(), 5, floor_ms, Some(1_000))]
        );
        assert_eq!(session.next_wake_ms(), START_MONO_MS + 1_000);
        let last = shared
            .next_id(START_WALL_MS + 77, START_MONO_MS + 5)
            .unwrap();
        let last_ms = layout().ticks_to_unix_ms(layout().decompose(last).unwrap().ticks);
        session.env.write_error = Some("could not write the state file".into());
        session.shutdown();
        assert_eq!(
            session.env.writes[1],
            ("orders".to_string(), 5, last_ms, None)
        );
        assert!(session
            .env
            .logs
            .iter()
            .any(|(level, line)| *level == LogLevel::Warning
                && line == "cosid: could not write the state file"));
    }

    #[test]
    fn unsafe_timings_are_shortened_at_start_and_refused_at_reload() {
        let shared = Shared::new();
        let unsafe_timing = LeaseTiming {
            safe_guard_ms: 4_000,
            guarder_delay_ms: 60_000,
            guarder_initial_delay_ms: 60_000,
        };
        let mut session = shared.session_with(
            store_with_claims([]),
            ScriptedEnv::default(),
            holder(false),
            unsafe_timing,
        );
        assert_eq!(session.timing(), unsafe_timing.clamped());
        assert_eq!(shared.status.timing_ms(), Some((4_000, 1_200)));
        assert!(last_log(&session).starts_with("cosid: shortening the lease delays:"));

        session.reload(unsafe_timing);
        assert_eq!(session.timing(), unsafe_timing.clamped());
        assert!(last_log(&session).starts_with("cosid: ignoring the reloaded lease settings:"));
        let logged = session.env.logs.len();
        session.reload(unsafe_timing);
        assert_eq!(
            session.env.logs.len(),
            logged,
            "a repeated line is logged once"
        );

        session.reload(timing());
        assert_eq!(session.timing(), timing());
        assert_eq!(shared.status.timing_ms(), Some((4_000, 1_000)));
    }
    #[test]
    fn a_restarted_worker_takes_over_the_machine_id_it_holds_and_renews_at_once() {
        let shared = Shared::new();
        let first = shared.leased();
        let issued = shared
            .next_id(START_WALL_MS + 10, START_MONO_MS + 10)
            .unwrap();
        // The worker ends on an error, without its shutdown: the generator and the status stay.
        drop(first);
        let env = ScriptedEnv {
            mono_ms: START_MONO_MS + 2_000,
            wall_ms: START_WALL_MS + 2_000,
            ..ScriptedEnv::default()
        };
        let mut second = shared.session(store_with_claims([]), env);
        assert_eq!(
            second.held(),
            Some(Held {
                machine_id: 5,
                token: TOKEN
            })
        );
        assert_eq!(second.next_wake_ms(), 0);
        second.step();
        assert!(second.store.calls_of("lease_claim").is_empty());
        let renewal = &second.store.calls_of("lease_renew")[0].params;
        assert_eq!(
            renewal[3],
            crate::protocol::Param::Text(format!("{TOKEN:016x}"))
        );
        assert_eq!(
            shared.generator.deadline_ms(),
            START_MONO_MS + 2_000 + 3_600
        );
        let next = shared
            .next_id(START_WALL_MS + 2_001, START_MONO_MS + 2_001)
            .unwrap();
        assert!(next > issued);
        // Its shutdown releases what the first worker held.
        second.shutdown();
        assert_eq!(second.store.calls_of("lease_release").len(), 1);
    }
}
