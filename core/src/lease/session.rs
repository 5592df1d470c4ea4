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

    /// Stops the generator, and releases the machine id with the last millisecond of the last
    /// tick issued (the exact last timestamp with a layout counting milliseconds).
    pub fn shutdown(&mut self) {
        self.generator.close();
        let status = self.status;
        if let Some(held) = self.held() {
            let last_ms = self.generator.last_tick_end_ms(&self.layout);
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
            Readiness::NotSetUp(what) => (GeneratorProblem::NoExtension, what.to_string()),
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
                    "the lease store's identity changed (a promoted standby, a point-in-time recovery, a restore, or a start of its server, which may be an older copy; or it is a Redis server cosid has no record of yet), and it may have forgotten claims it acknowledged: it hands out no machine id in namespace \"{namespace}\" until {} by its clock (the longest safe guard after the change was first seen, and the lead a holder's clock may have had; or until this server's clock passes the ids such a holder may have issued), while the holders whose claims it kept go on; claiming again until then",
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
                self.count_renewal_failure();
                self.set_problem(LeaseState::Lost, GeneratorProblem::Lost, text);
            }
            Err(why) => {
                // Tried again soon (the store makes a new connection), not a whole period
                // later: the lease may be lost, and the store back within a second.
                self.next_renewal_ms = sent_ms + RENEWAL_RETRY_MS.min(timing.guarder_delay_ms);
                self.count_renewal_failure();
                let text = format!(
                    "renewing the lease of machine id {machine_id} in namespace \"{namespace}\" failed: {why}; trying again"
                );
                self.set_problem(LeaseState::Down, GeneratorProblem::StoreError, text);
            }
        }
    }

    /// Counts a renewal that did not renew once, however many times it is tried again while
    /// `DOWN`: an outage of the store is one failure, not one a second (the intermittent
    /// failures' alert counts renewals that failed and then succeeded).
    fn count_renewal_failure(&self) {
        if self.status.state() != LeaseState::Down {
            self.status.count_renewal_failure();
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
mod scripted;
#[cfg(test)]
mod tests;
