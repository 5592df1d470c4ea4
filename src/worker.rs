//! The background worker that leases the default generator's machine id. The postmaster starts
//! it once the server is consistent; it connects to `cosid.database`, claims a machine id before
//! any id is generated, renews it every `cosid.guarder_delay`, and at shutdown stops the
//! generator and releases the machine id with the exact last timestamp it issued.
//!
//! It is the only writer of the slot's lease status (see `shmem.rs`). It logs changes of state,
//! not every renewal. A store error never ends it: generation stays safe through the local
//! deadline, and comes back when a renewal succeeds.

use crate::clock::{boottime_ms, unix_ms_now};
use crate::generator::GeneratorState;
use crate::layout::Layout;
use crate::lease::{watermark_wait, LeaseState, LeaseTiming, WatermarkWait};
use crate::lease_store::{LeaseStore, LocalStore, Readiness};
use crate::local_state;
use crate::protocol::{ClaimOutcome, Holder};
use crate::remote_store::RemoteStore;
use crate::settings::{self, LeaseSettings, MachineSource};
use crate::shmem::{self, GeneratorSlot, LeaseProblem};
use crate::state_file::StateRecord;
use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, SignalWakeFlags};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Registers the worker; only while preloading.
pub fn register() {
    BackgroundWorkerBuilder::new("cosid lease worker")
        .set_type("cosid lease worker")
        .set_library("cosid")
        .set_function("cosid_worker_main")
        .enable_spi_access()
        .set_start_time(pgrx::bgworkers::BgWorkerStartTime::ConsistentState)
        .set_restart_time(Some(Duration::from_secs(1)))
        .load();
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn cosid_worker_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let Some(settings) = settings::server() else {
        return;
    };
    let MachineSource::Leased(lease_settings) = &settings.machine else {
        return;
    };
    let Ok(slot) = shmem::default_generator() else {
        return;
    };
    // Connected to a database even with a remote store, so that operators see the worker in
    // pg_stat_activity (backend_type 'cosid lease worker') wherever its store is.
    if !wait_before_connecting(slot, &lease_settings.database) {
        exit_worker();
    }
    BackgroundWorker::connect_worker_to_spi(Some(&lease_settings.database), None);
    slot.lease.connect_attempts.store(0, Ordering::Relaxed);
    let store: Box<dyn LeaseStore> = match &lease_settings.lease_store {
        Some(conninfo) => match RemoteStore::new(conninfo, shutdown_requested) {
            Ok(store) => Box::new(store),
            Err(why) => {
                warning!("cosid: cannot use cosid.lease_store: {why}");
                // Started again after its restart time.
                exit_worker();
            }
        },
        None => {
            let store = LocalStore {
                timeout: Duration::from_secs(1),
            };
            if let Err(why) = store.use_read_committed() {
                warning!("cosid: could not set the lease calls' isolation level: {why}");
            }
            Box::new(store)
        }
    };
    let mut worker = Worker::new(slot, settings.namespace.clone(), lease_settings, store);
    worker.run();
    exit_worker();
}

/// Ends a cosid background worker with exit code 1, not 0: a worker that was terminated on its
/// own (pg_terminate_backend) is then started again after its restart time, while at server
/// shutdown nothing is restarted.
pub(crate) fn exit_worker() -> ! {
    // SAFETY: proc_exit runs PostgreSQL's exit callbacks and ends the process; nothing of ours is
    // left to clean up.
    unsafe { pg_sys::proc_exit(1) };
    // PostgreSQL 18 declares proc_exit `pg_noreturn` (C11's `_Noreturn`), which the generated
    // bindings do not turn into `-> !` as they do the `noreturn` attribute of older versions.
    #[allow(unreachable_code)]
    {
        unreachable!("proc_exit returned")
    }
}

/// A worker that cannot connect to `cosid.database` (it does not exist, say) ends with
/// PostgreSQL's FATAL error and is started again: each attempt after a failed one waits twice as
/// long, up to a minute, and the reason stays in `cosid.status`. Returns false on shutdown.
fn wait_before_connecting(slot: &GeneratorSlot, database: &str) -> bool {
    let failed = slot.lease.connect_attempts.fetch_add(1, Ordering::Relaxed);
    if failed == 0 {
        return true;
    }
    let wait_ms = 1_000u64 << failed.min(6).saturating_sub(1);
    let wait_ms = wait_ms.min(60_000);
    let text = format!(
        "the lease worker could not connect to database \"{database}\" (cosid.database); the server log says why, for example that it does not exist; trying again every {} s",
        wait_ms / 1_000
    );
    slot.lease.last_error.store(&text);
    slot.lease.set_problem(LeaseProblem::StoreError);
    if failed == 1 {
        warning!("cosid: {text}");
    }
    sleep_unless_shutdown(wait_ms);
    !shutdown_requested()
}

/// The layout as the store compares it: epoch, time unit and the three widths.
fn layout_text(layout: &Layout) -> String {
    format!(
        "epoch {} ms, {}, {}/{}/{} bits",
        layout.epoch_ms(),
        layout.time_unit().name(),
        layout.timestamp_bits(),
        layout.machine_bits(),
        layout.sequence_bits()
    )
}

struct Worker {
    slot: &'static GeneratorSlot,
    layout: Layout,
    holder: Holder,
    database: String,
    store: Box<dyn LeaseStore>,
    /// The lease timings in force: the settings at start, then each valid reload.
    timing: LeaseTiming,
    /// A machine id given back whose release failed: released before anything is claimed.
    pending_release: Option<(u32, u64, i64)>,
    /// The token of the claim being made, kept until one succeeds: a claim the store committed
    /// but whose answer was lost (a timeout) is then recognised as ours on the next attempt,
    /// instead of a live claim of somebody with our identity.
    claim_token: Option<u64>,
    /// Monotonic time of the next renewal.
    next_renewal_ms: u64,
    next_state_write_ms: u64,
    /// The last line logged, so that a repeated condition is logged once.
    last_logged: String,
}

/// Puts the clock thresholds of this process's settings in force for every backend: at the
/// worker's start and after each reload. A combination the server would refuse at start is
/// ignored, and the thresholds in force stay; the error is the line to log.
pub fn apply_clock_thresholds() -> Result<(), String> {
    match settings::clock_thresholds() {
        Ok(policy) => {
            shmem::set_backwards_policy(policy);
            Ok(())
        }
        Err(why) => {
            let kept = shmem::backwards_policy();
            Err(format!(
                "cosid: ignoring the reloaded clock thresholds: {why}; keeping spin {} ms and \
                 broken {} ms",
                kept.spin_threshold_ms, kept.broken_threshold_ms
            ))
        }
    }
}

pub fn shutdown_requested() -> bool {
    // SAFETY: a plain read of a flag set by the SIGTERM handler.
    unsafe { pg_sys::ShutdownRequestPending != 0 }
}

impl Worker {
    fn new(
        slot: &'static GeneratorSlot,
        namespace: String,
        settings: &LeaseSettings,
        store: Box<dyn LeaseStore>,
    ) -> Worker {
        let mut worker = Worker {
            slot,
            layout: slot.config.layout,
            holder: Holder {
                namespace,
                machine_bits: slot.config.layout.machine_bits(),
                layout: layout_text(&slot.config.layout),
                instance_id: slot.instance_id().to_string(),
                stable: settings.stable,
            },
            database: settings.database.clone(),
            store,
            timing: settings::lease_timing(),
            pending_release: None,
            claim_token: None,
            next_renewal_ms: 0,
            next_state_write_ms: 0,
            last_logged: String::new(),
        };
        worker.start_timing();
        worker
    }

    fn generator(&self) -> &GeneratorState {
        &self.slot.state
    }

    /// The timings this process starts with: the server checked them at start, but a reload
    /// since may have changed them; delays that could let the lease lapse are shortened.
    fn start_timing(&mut self) {
        if let Err(line) = apply_clock_thresholds() {
            self.log_change(PgLogLevel::WARNING, line);
        }
        let timing = settings::lease_timing();
        if let Err(why) = timing.validate() {
            self.log_change(
                PgLogLevel::WARNING,
                format!("cosid: shortening the lease delays: {why}"),
            );
        }
        self.timing = timing.clamped();
        self.publish_timing();
    }

    /// Shows the timings in force in `cosid.status`.
    fn publish_timing(&self) {
        self.slot
            .lease
            .set_timing_ms(self.timing.safe_guard_ms, self.timing.guarder_delay_ms);
    }

    /// After a reload: new timings that could let the lease lapse between renewals, or clock
    /// thresholds that do not fit together, are refused, and the ones in force are kept.
    fn reload_timing(&mut self) {
        if let Err(line) = apply_clock_thresholds() {
            self.log_change(PgLogLevel::WARNING, line);
        }
        let timing = settings::lease_timing();
        match timing.validate() {
            Ok(()) => {
                self.timing = timing;
                self.publish_timing();
            }
            Err(why) => self.log_change(
                PgLogLevel::WARNING,
                format!("cosid: ignoring the reloaded lease settings: {why}"),
            ),
        }
    }

    /// The store, with its call timeout set from the renewal period: a call must end well
    /// before the lease could lapse. At shutdown (the release), a store that does not answer
    /// must not hold the server up for long.
    fn store(&mut self) -> &mut dyn LeaseStore {
        let delay = self.timing.guarder_delay_ms;
        let mut timeout = Duration::from_millis(delay.clamp(500, 10_000));
        if shutdown_requested() {
            timeout = timeout.min(SHUTDOWN_CALL_TIMEOUT);
        }
        self.store.set_timeout(timeout);
        self.store.as_mut()
    }

    /// Logs a line unless it is the one logged last.
    fn log_change(&mut self, level: PgLogLevel, line: String) {
        if line != self.last_logged {
            match level {
                PgLogLevel::WARNING => warning!("{line}"),
                _ => log!("{line}"),
            }
            self.last_logged = line;
        }
    }

    fn set_problem(&mut self, state: LeaseState, problem: LeaseProblem, text: String) {
        let lease = &self.slot.lease;
        lease.set_state(state);
        lease.set_problem(problem);
        lease.last_error.store(&text);
        self.log_change(PgLogLevel::WARNING, format!("cosid: {text}"));
    }

    fn run(&mut self) {
        loop {
            if BackgroundWorker::sighup_received() {
                // SAFETY: reloading the configuration file is what a process does on SIGHUP,
                // outside any transaction.
                unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
                self.reload_timing();
            }
            if shutdown_requested() {
                break;
            }
            self.step();
            let wait = self
                .next_wake_ms()
                .saturating_sub(boottime_ms())
                .clamp(10, 1_000);
            if !BackgroundWorker::wait_latch(Some(Duration::from_millis(wait))) {
                break;
            }
        }
        // Stop and release on SIGTERM; when the postmaster died there is nothing to release to.
        if shutdown_requested() {
            self.shutdown();
        }
    }

    fn next_wake_ms(&self) -> u64 {
        let mut wake = self.next_renewal_ms;
        if self.holder.stable && self.slot.lease.held().is_some() {
            wake = wake.min(self.next_state_write_ms);
        }
        wake
    }

    fn step(&mut self) {
        if self.slot.lease.held().is_none() {
            self.claim();
            return;
        }
        let now = boottime_ms();
        if now >= self.next_renewal_ms {
            self.renew();
        }
        if self.holder.stable && now >= self.next_state_write_ms {
            self.write_state_file(false);
        }
    }

    fn claim(&mut self) {
        // Retry within a second when nothing was claimed.
        self.next_renewal_ms = boottime_ms() + 1_000;
        if let Some((machine_id, token, watermark_ms)) = self.pending_release {
            // Until it is released, the machine id is held under a claim nobody renews.
            let holder = self.holder.clone();
            if self
                .store()
                .release(&holder, machine_id, token, watermark_ms)
                .is_err()
            {
                return;
            }
            self.pending_release = None;
        }
        // A stable instance reads its state file before each claim: a file that cannot be read
        // exactly holds a floor nobody knows, so nothing is claimed until it is restored or
        // removed (retried every second).
        let state_record = if self.holder.stable {
            match local_state::read() {
                Ok(record) => record,
                Err(unusable) => {
                    return self.set_problem(
                        LeaseState::Stopped,
                        LeaseProblem::StateFile,
                        format!(
                            "{unusable}; not claiming a machine id until it is restored or removed"
                        ),
                    );
                }
            }
        } else {
            None
        };
        let readiness = self.store().readiness();
        match readiness {
            Ok(Readiness::Ready) => {}
            Ok(Readiness::ReadOnly) => {
                return self.set_problem(
                    LeaseState::Stopped,
                    LeaseProblem::Standby,
                    format!(
                        "this server is a hot standby; the lease table in database \"{}\" is read-only until it is promoted",
                        self.database
                    ),
                );
            }
            Ok(Readiness::NoExtension) => {
                let fix = if self.store.is_remote() {
                    "waiting for the lease protocol in cosid.lease_store: install it with psql -f sql/lease_store.sql, or CREATE EXTENSION cosid there".to_string()
                } else {
                    format!(
                        "waiting for the extension: run CREATE EXTENSION cosid in database \"{}\"",
                        self.database
                    )
                };
                return self.set_problem(LeaseState::Stopped, LeaseProblem::NoExtension, fix);
            }
            Ok(Readiness::Outdated) => {
                let version = env!("CARGO_PKG_VERSION");
                let fix = if self.store.is_remote() {
                    format!(
                        "waiting for the lease store in cosid.lease_store to be updated: it has an older version's protocol than this server's cosid {version}; run the store's update script (sql/lease_store--<old>--<new>.sql) there"
                    )
                } else {
                    format!(
                        "waiting for the extension's update: its SQL objects in database \"{}\" are older than this server's cosid {version}; run ALTER EXTENSION cosid UPDATE there",
                        self.database
                    )
                };
                return self.set_problem(LeaseState::Stopped, LeaseProblem::NoExtension, fix);
            }
            Err(why) => {
                return self.set_problem(
                    LeaseState::Claiming,
                    LeaseProblem::StoreError,
                    format!("cannot reach the lease table: {why}"),
                );
            }
        }
        let timing = self.timing;
        let token = *self.claim_token.get_or_insert_with(shmem::random_u64);
        let sent_ms = boottime_ms();
        let watermark_ms = timing.watermark_ms(unix_ms_now());
        let holder = self.holder.clone();
        let outcome = self
            .store()
            .claim(&holder, timing.safe_guard_ms, token, watermark_ms);
        let (machine_id, how, previous_watermark_ms, expires_at_ms, store_now_ms) = match outcome {
            Ok(ClaimOutcome::Claimed {
                machine_id,
                how,
                previous_watermark_ms,
                expires_at_ms,
                store_now_ms,
            }) => (
                machine_id,
                how,
                previous_watermark_ms,
                expires_at_ms,
                store_now_ms,
            ),
            Ok(ClaimOutcome::Busy {
                machine_id,
                expires_at_ms,
            }) => {
                return self.set_problem(
                    LeaseState::Claiming,
                    LeaseProblem::OwnLeaseLive,
                    format!(
                        "machine id {machine_id} of namespace \"{}\" is leased to this instance id (\"{}\") under an earlier claim, live until {}: waiting for it to expire, since whoever made that claim (this server before a crash, or another server with the same instance id) may still be generating",
                        self.holder.namespace,
                        self.holder.instance_id,
                        crate::layout::format_unix_ms(expires_at_ms)
                    ),
                );
            }
            Ok(ClaimOutcome::Exhausted) => {
                return self.set_problem(
                    LeaseState::Claiming,
                    LeaseProblem::Exhausted,
                    format!(
                        "no machine id left in namespace \"{}\": all {} ids of {} machine bits are held",
                        self.holder.namespace,
                        1u64 << self.holder.machine_bits,
                        self.holder.machine_bits
                    ),
                );
            }
            Ok(ClaimOutcome::Contended) => {
                return self.set_problem(
                    LeaseState::Claiming,
                    LeaseProblem::StoreError,
                    "claiming a machine id failed: other claims kept changing the lease table; trying again".to_string(),
                );
            }
            Ok(ClaimOutcome::LayoutMismatch) => {
                return self.set_problem(
                    LeaseState::Claiming,
                    LeaseProblem::LayoutMismatch,
                    format!(
                        "namespace \"{}\" has live leases with another id layout than this server's ({}): servers of one namespace must share one layout, or their ids can coincide",
                        self.holder.namespace, self.holder.layout
                    ),
                );
            }
            Err(why) => {
                return self.set_problem(
                    LeaseState::Claiming,
                    LeaseProblem::StoreError,
                    format!("claiming a machine id failed: {why}"),
                );
            }
        };

        let previous =
            self.honoured_watermark(state_record.as_ref(), machine_id, previous_watermark_ms);
        let broken = shmem::backwards_policy().broken_threshold_ms;
        match watermark_wait(previous, unix_ms_now(), broken) {
            WatermarkWait::Ready => {}
            WatermarkWait::Wait { ms } => sleep_unless_shutdown(ms),
            WatermarkWait::TooFarAhead { ahead_ms } => {
                // Give the machine id back as it was: nothing was issued under this claim.
                if self
                    .store()
                    .release(&holder, machine_id, token, previous_watermark_ms)
                    .is_err()
                {
                    self.pending_release = Some((machine_id, token, previous_watermark_ms));
                }
                return self.set_problem(
                    LeaseState::ClockBehind,
                    LeaseProblem::ClockBehind,
                    format!(
                        "machine id {machine_id} of namespace \"{}\" has a watermark {ahead_ms} ms ahead of this server's clock, more than cosid.clock_backwards_broken_threshold ({broken} ms); gave it back",
                        self.holder.namespace
                    ),
                );
            }
        }
        if shutdown_requested() {
            let _ = self
                .store()
                .release(&holder, machine_id, token, previous_watermark_ms);
            return;
        }
        // Reopening the machine id this generator last used must not lower its floor (a store
        // that forgot the watermark, rows deleted by hand).
        let mut floor_ticks = self.layout.unix_ms_to_ticks(previous).unwrap_or(0);
        if let Some(last) = self.layout.decompose(self.generator().last_word()) {
            if last.machine_id == machine_id {
                floor_ticks = floor_ticks.max(last.ticks);
            }
        }

        self.claim_token = None;
        let lease = &self.slot.lease;
        lease.set_held(Some((machine_id, token)));
        lease.set_renewed(store_now_ms, expires_at_ms, watermark_ms);
        self.publish_limits(sent_ms, watermark_ms);
        // Backends enforce the watermark too, on their own clock reads: nothing is issued at or
        // before it, and a clock still behind it counts as a step back.
        // Cannot be refused: the protocol's decoder checked the machine id against the machine
        // bits; were it refused, the generator would stay closed, which refuses ids.
        let opened = self.generator().open(&self.layout, machine_id, floor_ticks);
        debug_assert!(opened.is_ok());
        lease.set_problem(LeaseProblem::None);
        lease.last_error.store("");
        lease.set_state(LeaseState::Up);
        self.next_renewal_ms = sent_ms + timing.guarder_initial_delay_ms;
        self.next_state_write_ms = 0;
        self.log_change(
            PgLogLevel::LOG,
            format!(
                "cosid: leased machine id {machine_id} in namespace \"{}\" as \"{}\" ({how})",
                self.holder.namespace, self.holder.instance_id
            ),
        );
    }

    /// A stable instance also honours the floor in its local state file (`record`, read before
    /// the claim): its last timestamp, plus `cosid.local_state_interval` unless it was written at
    /// a clean shutdown. It covers a lease table that forgot its watermark (restored, recreated,
    /// rows deleted).
    fn honoured_watermark(
        &self,
        record: Option<&StateRecord>,
        machine_id: u32,
        store_watermark_ms: i64,
    ) -> i64 {
        match local_state::floor_ms(record, &self.holder.namespace, machine_id) {
            Some(floor_ms) => store_watermark_ms.max(floor_ms),
            None => store_watermark_ms,
        }
    }

    /// Raises the generator's bound to the watermark just written, and moves its deadline to
    /// the one of the renewal sent at `sent_ms`. With fail-fast off, neither is enforced: the
    /// generator keeps going while renewals fail (unsafe, as documented), but a lost lease still
    /// stops it.
    fn publish_limits(&self, sent_ms: u64, watermark_ms: i64) {
        let generator = self.generator();
        if !settings::fail_fast() {
            generator.set_tick_bound(u64::MAX);
            generator.set_deadline_ms(u64::MAX);
            return;
        }
        let timing = self.timing;
        let bound = self
            .layout
            .unix_ms_to_ticks(watermark_ms)
            .unwrap_or(self.layout.max_ticks());
        let current = generator.tick_bound();
        if current == u64::MAX || bound > current || !generator.is_open() {
            generator.set_tick_bound(bound);
        }
        generator.set_deadline_ms(timing.deadline_ms(sent_ms));
    }

    fn renew(&mut self) {
        let Some((machine_id, token)) = self.slot.lease.held() else {
            return;
        };
        let timing = self.timing;
        let sent_ms = boottime_ms();
        self.next_renewal_ms = sent_ms + timing.guarder_delay_ms;
        let watermark_ms = timing.watermark_ms(unix_ms_now());
        let holder = self.holder.clone();
        let renewed = self.store().renew(
            &holder,
            machine_id,
            token,
            timing.safe_guard_ms,
            watermark_ms,
        );
        match renewed {
            Ok(Some(renewed)) => {
                let lease = &self.slot.lease;
                lease.set_renewed(renewed.store_now_ms, renewed.expires_at_ms, watermark_ms);
                self.publish_limits(sent_ms, watermark_ms);
                if lease.state() != LeaseState::Up {
                    lease.set_problem(LeaseProblem::None);
                    lease.last_error.store("");
                    lease.set_state(LeaseState::Up);
                    self.log_change(
                        PgLogLevel::LOG,
                        format!(
                            "cosid: lease of machine id {machine_id} in namespace \"{}\" renewed",
                            self.holder.namespace
                        ),
                    );
                }
            }
            Ok(None) => {
                // Somebody else may hold the machine id now: stop at once, fail-fast or not.
                self.generator().close();
                self.slot.lease.set_held(None);
                self.next_renewal_ms = 0;
                self.set_problem(
                    LeaseState::Lost,
                    LeaseProblem::Lost,
                    format!(
                        "lease of machine id {machine_id} in namespace \"{}\" was lost: the lease table no longer shows it held by \"{}\" with this claim; claiming again",
                        self.holder.namespace, self.holder.instance_id
                    ),
                );
            }
            Err(why) => {
                self.set_problem(
                    LeaseState::Down,
                    LeaseProblem::StoreError,
                    format!(
                        "renewing the lease of machine id {machine_id} in namespace \"{}\" failed: {why}",
                        self.holder.namespace
                    ),
                );
            }
        }
    }

    /// The timestamp of the last id issued (or the floor, if none was): exact once the generator
    /// is closed.
    fn last_issued_ms(&self) -> i64 {
        self.generator().last_timestamp_ms(&self.layout)
    }

    /// Writes the floor a restart must honour: the last timestamp issued, padded for what may be
    /// issued before the next write; once the generator is `closed`, the exact last timestamp.
    fn write_state_file(&mut self, closed: bool) {
        let Some((machine_id, _)) = self.slot.lease.held() else {
            return;
        };
        self.next_state_write_ms = boottime_ms() + settings::local_state_interval_ms();
        let namespace = &self.holder.namespace;
        let last_ms = self.last_issued_ms();
        let record = if closed {
            local_state::final_record(namespace, machine_id, last_ms)
        } else {
            local_state::record(
                namespace,
                machine_id,
                last_ms,
                settings::local_state_interval_ms(),
            )
        };
        if let Err(why) = local_state::write(&record) {
            self.log_change(PgLogLevel::WARNING, format!("cosid: {why}"));
        }
    }

    fn shutdown(&mut self) {
        self.generator().close();
        let lease = &self.slot.lease;
        if let Some((machine_id, token)) = lease.held() {
            let last_ms = self.last_issued_ms();
            if self.holder.stable {
                self.write_state_file(true);
            }
            let holder = self.holder.clone();
            match self.store().release(&holder, machine_id, token, last_ms) {
                Ok(true) => log!(
                    "cosid: released machine id {machine_id} in namespace \"{}\" with watermark {}",
                    self.holder.namespace,
                    crate::layout::format_unix_ms(last_ms)
                ),
                Ok(false) => {}
                Err(why) => warning!(
                    "cosid: could not release machine id {machine_id} in namespace \"{}\": {why}; it frees itself when its lease expires",
                    self.holder.namespace
                ),
            }
            lease.set_held(None);
            lease.set_watermark_ms(last_ms);
        }
        lease.set_state(LeaseState::Stopped);
        lease.set_problem(LeaseProblem::ShuttingDown);
    }
}

/// The longest a store call may take at shutdown (the release).
const SHUTDOWN_CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// Sleeps until `ms` have passed, the server shuts down or the postmaster dies.
fn sleep_unless_shutdown(ms: u64) {
    let until = boottime_ms() + ms;
    while !shutdown_requested() {
        let now = boottime_ms();
        if now >= until
            || !BackgroundWorker::wait_latch(Some(Duration::from_millis((until - now).min(50))))
        {
            break;
        }
    }
}
