//! The generator's state machine: which id comes next, when to wait for the next tick, and what
//! to do when the clock steps back. It follows CosId's `AbstractSnowflakeId` and
//! `DefaultClockBackwardsSynchronizer`, made lock-free so that every backend of a server can
//! share one generator.
//!
//! Pure: the clock is passed in, and nothing here calls into PostgreSQL, so the rules are
//! unit-tested with a scripted clock and with real threads.
//!
//! # The state word
//!
//! The whole mutable state of a generator is one `AtomicU64`, `word`: the last id issued, whose
//! fields are the last tick, the machine id and the last sequence. Issuing an id is one
//! compare-and-swap of `word` from the last id to the new one. Because every issued id is strictly
//! greater than the word it replaces, ids are unique and increase for every caller. The machine id
//! lives in the word too, so a backend that read an old machine id cannot issue with it after
//! the word has moved on: its compare-and-swap fails.
//!
//! Bit 63, never used by an id, marks the generator closed: it has no machine id it may use.
//!
//! A freshly opened generator's word is a *floor*, `(floor tick, machine id, max sequence)`,
//! which no id has: the next id is then in a later tick, or CosId's normal rules would give it a
//! sequence greater than the maximum, which forces the wait for the next tick.

use crate::layout::{IdParts, Layout, PartsError, TimeRangeError};
use std::sync::atomic::{AtomicU64, Ordering};

const CLOSED_BIT: u64 = 1 << 63;

/// CosId's default sequence reset threshold of its default layout (12 sequence bits): a new tick
/// restarts the sequence only once it has reached this value, so that `id % n` sharding stays
/// even at low rates.
pub const DEFAULT_SEQUENCE_RESET_THRESHOLD: u32 = 2047;

/// CosId's default sequence reset threshold for a layout, `SnowflakeId.defaultSequenceResetThreshold`
/// (`~(-1L << (sequenceBit - 1))`): half the maximum sequence, rounded down. 2,047 for 12
/// sequence bits, 255 for `safe_js`'s 9, 2,097,151 for `second`'s 22, 262,143 for 19.
pub fn default_sequence_reset_threshold(layout: &Layout) -> u32 {
    layout.max_sequence() >> 1
}

/// Why a sequence reset threshold does not fit a layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThresholdTooLarge {
    pub threshold: i64,
    pub max_sequence: u32,
}

/// A sequence reset threshold checked against a layout: 0 (restart at every tick) up to the
/// maximum sequence. A larger one would never be reached, and the sequence would never restart.
pub fn check_sequence_reset_threshold(
    layout: &Layout,
    threshold: i64,
) -> Result<u32, ThresholdTooLarge> {
    match u32::try_from(threshold) {
        Ok(value) if value <= layout.max_sequence() => Ok(value),
        _ => Err(ThresholdTooLarge {
            threshold,
            max_sequence: layout.max_sequence(),
        }),
    }
}
/// CosId's `DefaultClockBackwardsSynchronizer` defaults.
pub const DEFAULT_SPIN_THRESHOLD_MS: u64 = 1;
pub const DEFAULT_BROKEN_THRESHOLD_MS: u64 = 500;

/// Waits for the next tick up to this long are spun; longer ones sleep until this long before
/// the tick and spin the rest. A millisecond tick is never further away, so its waits spin as in
/// CosId; a used-up second sleeps instead of burning a CPU for up to a second.
pub const NEXT_TICK_SPIN_MS: i64 = 1;

/// The immutable part of a generator, fixed when the server starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct GeneratorConfig {
    pub layout: Layout,
    pub sequence_reset_threshold: u32,
}

/// How far a clock step back may go before the generator gives up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackwardsPolicy {
    /// Up to this far behind, busy-wait for the clock to catch up.
    pub spin_threshold_ms: u64,
    /// Up to this far behind, sleep until the clock catches up; beyond it, refuse.
    pub broken_threshold_ms: u64,
}

impl Default for BackwardsPolicy {
    fn default() -> Self {
        BackwardsPolicy {
            spin_threshold_ms: DEFAULT_SPIN_THRESHOLD_MS,
            broken_threshold_ms: DEFAULT_BROKEN_THRESHOLD_MS,
        }
    }
}

/// What the generator needs from its surroundings. The server's implementation reads the real
/// clocks and checks for query cancellation while it waits; tests script it.
pub trait Clock {
    /// Wall-clock time, Unix milliseconds: the source of every id's timestamp.
    fn unix_ms(&mut self) -> i64;
    /// A clock that never steps, in milliseconds, used only to bound waits.
    fn monotonic_ms(&mut self) -> u64;
    /// One turn of a busy wait. The server checks for interrupts here.
    fn spin(&mut self);
    /// Sleep, interruptibly.
    fn sleep_ms(&mut self, ms: u64);
    /// Read only when the clock has stepped back, so that the common path reads no settings.
    fn backwards_policy(&mut self) -> BackwardsPolicy;
}

/// Why no id was issued. A refusal never changes the generator's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GenerateError {
    /// The generator has no machine id it may use.
    Closed,
    /// The clock is further behind the last issued timestamp than the broken threshold.
    ClockBackwards {
        last_unix_ms: i64,
        now_unix_ms: i64,
        broken_threshold_ms: u64,
    },
    /// The clock did not move forward within a wait's budget.
    ClockStalled { waited_ms: u64 },
    /// The clock is outside the layout's time range.
    TimeRange(TimeRangeError),
    /// Issuing would reach the tick bound (the lease watermark): the bound must be raised first.
    BoundReached { bound_unix_ms: i64 },
    /// The lease was not renewed in time: the local deadline has passed.
    DeadlinePassed,
}

/// A snapshot of a generator's counters, for the status view.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GeneratorStats {
    pub ids_issued: u64,
    pub next_tick_waits: u64,
    pub clock_backwards_waits: u64,
    pub clock_backwards_errors: u64,
}

/// One generator's shared, mutable state. It lives in shared memory; see `shmem.rs` for how
/// processes reach it.
#[repr(C)]
pub struct GeneratorState {
    word: AtomicU64,
    /// Exclusive upper bound on the ticks of issued ids: the lease watermark.
    tick_bound: AtomicU64,
    /// No id once the monotonic clock reaches this (`u64::MAX`: no deadline): the lease's local
    /// deadline.
    deadline_ms: AtomicU64,
    /// Every opening's floor is at least this tick: what the definition's history requires
    /// (`history.rs`), set before the generator is first opened.
    history_floor_ticks: AtomicU64,
    /// The latest tick of every id issued under earlier openings: a re-opening (another
    /// machine id, a lower floor) replaces the word, and what the generator issued must not be
    /// forgotten with it (`last_timestamp_ms`).
    earlier_openings_ticks: AtomicU64,
    /// The word the current opening started from (its floor): a word still equal to it issued
    /// nothing under this opening.
    opened_word: AtomicU64,
    /// One more than the latest tick of an id issued under earlier openings (0: none), floors
    /// left out (`last_issued_ms`).
    earlier_issued_ticks: AtomicU64,
    ids_issued: AtomicU64,
    next_tick_waits: AtomicU64,
    clock_backwards_waits: AtomicU64,
    clock_backwards_errors: AtomicU64,
}

/// One step of the state machine, decided from the last id and the current tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Plan {
    Issue(IdParts),
    WaitForNextTick,
    ClockBackwards,
}

fn plan(config: &GeneratorConfig, last: IdParts, now_ticks: u64) -> Plan {
    if now_ticks < last.ticks {
        return Plan::ClockBackwards;
    }
    let mut sequence = last.sequence;
    if now_ticks > last.ticks && sequence >= config.sequence_reset_threshold {
        sequence = 0;
    }
    sequence = (sequence + 1) & config.layout.max_sequence();
    if sequence == 0 && now_ticks == last.ticks {
        return Plan::WaitForNextTick;
    }
    Plan::Issue(IdParts {
        ticks: now_ticks,
        machine_id: last.machine_id,
        sequence,
    })
}

impl GeneratorState {
    pub const fn closed() -> GeneratorState {
        GeneratorState {
            word: AtomicU64::new(CLOSED_BIT),
            tick_bound: AtomicU64::new(u64::MAX),
            deadline_ms: AtomicU64::new(u64::MAX),
            history_floor_ticks: AtomicU64::new(0),
            earlier_openings_ticks: AtomicU64::new(0),
            opened_word: AtomicU64::new(0),
            earlier_issued_ticks: AtomicU64::new(0),
            ids_issued: AtomicU64::new(0),
            next_tick_waits: AtomicU64::new(0),
            clock_backwards_waits: AtomicU64::new(0),
            clock_backwards_errors: AtomicU64::new(0),
        }
    }

    /// Every later opening issues nothing at or before `floor_ticks`: ids of an earlier
    /// definition of this generator reach that far (`history.rs`), or ids issued before the
    /// segment was last thrown away (a crash-restart). Floors only rise: each of them holds.
    pub fn set_history_floor(&self, floor_ticks: u64) {
        self.history_floor_ticks
            .fetch_max(floor_ticks, Ordering::AcqRel);
    }

    pub fn history_floor_ticks(&self) -> u64 {
        self.history_floor_ticks.load(Ordering::Acquire)
    }

    /// Starts issuing ids with `machine_id`, all in ticks after `floor_ticks` (and after the
    /// history's floor). A machine id beyond the layout's machine bits is refused and the
    /// generator stays as it was: it would spill into the timestamp and make ids of another
    /// machine id, or out of order.
    pub fn open(
        &self,
        layout: &Layout,
        machine_id: u32,
        floor_ticks: u64,
    ) -> Result<(), PartsError> {
        let floor_ticks = floor_ticks.max(self.history_floor_ticks());
        let floor = layout.compose(IdParts {
            ticks: floor_ticks.min(layout.max_ticks()),
            machine_id,
            sequence: layout.max_sequence(),
        })?;
        let earlier = self.word.swap(floor as u64, Ordering::AcqRel) & !CLOSED_BIT;
        let earlier_floor = self.opened_word.swap(floor as u64, Ordering::AcqRel);
        if let Some(parts) = layout.decompose(earlier as i64) {
            self.earlier_openings_ticks
                .fetch_max(parts.ticks, Ordering::AcqRel);
            if earlier != earlier_floor {
                self.earlier_issued_ticks
                    .fetch_max(parts.ticks.saturating_add(1), Ordering::AcqRel);
            }
        }
        Ok(())
    }

    /// The latest timestamp of an id issued, over this opening and every earlier one, in Unix
    /// milliseconds (the start of its tick); floors an opening started from do not count.
    /// `None` when no id was issued. Read once nothing can issue any more.
    pub fn last_issued_ms(&self, layout: &Layout) -> Option<i64> {
        let word = self.last_word() as u64;
        let current = if word != self.opened_word.load(Ordering::Acquire) {
            layout.decompose(word as i64).map(|parts| parts.ticks)
        } else {
            None
        };
        let earlier = self
            .earlier_issued_ticks
            .load(Ordering::Acquire)
            .checked_sub(1);
        current
            .into_iter()
            .chain(earlier)
            .max()
            .map(|ticks| layout.ticks_to_unix_ms(ticks))
    }

    /// Stops issuing ids; calls in flight fail their compare-and-swap and see the closed word.
    pub fn close(&self) {
        self.word.fetch_or(CLOSED_BIT, Ordering::AcqRel);
    }

    pub fn is_open(&self) -> bool {
        self.word.load(Ordering::Acquire) & CLOSED_BIT == 0
    }

    /// The last id issued (or the floor), without the closed mark.
    pub fn last_word(&self) -> i64 {
        (self.word.load(Ordering::Acquire) & !CLOSED_BIT) as i64
    }

    /// The latest timestamp of an id issued (or of a floor), in Unix milliseconds, over this
    /// opening and every earlier one.
    pub fn last_timestamp_ms(&self, layout: &Layout) -> i64 {
        layout.ticks_to_unix_ms(self.last_ticks(layout))
    }

    /// The last millisecond of the tick of [`Self::last_timestamp_ms`]: with a layout counting
    /// seconds, a successor that waits only until its clock passes the start of that second
    /// (CosId's holders do) would issue in it again.
    pub fn last_tick_end_ms(&self, layout: &Layout) -> i64 {
        layout.ticks_to_unix_ms(self.last_ticks(layout) + 1) - 1
    }

    fn last_ticks(&self, layout: &Layout) -> u64 {
        layout
            .decompose(self.last_word())
            .map_or(0, |parts| parts.ticks)
            .max(self.earlier_openings_ticks.load(Ordering::Acquire))
    }

    pub fn stats(&self) -> GeneratorStats {
        GeneratorStats {
            ids_issued: self.ids_issued.load(Ordering::Relaxed),
            next_tick_waits: self.next_tick_waits.load(Ordering::Relaxed),
            clock_backwards_waits: self.clock_backwards_waits.load(Ordering::Relaxed),
            clock_backwards_errors: self.clock_backwards_errors.load(Ordering::Relaxed),
        }
    }

    /// Issues the next id, waiting (boundedly, interruptibly) for the next tick when the sequence
    /// is used up and for the clock when it stepped back a little.
    pub fn next_id(
        &self,
        config: &GeneratorConfig,
        clock: &mut impl Clock,
    ) -> Result<i64, GenerateError> {
        let layout = &config.layout;
        // The word whose sequence ran out, once its tick has been waited for: CosId then issues
        // sequence 0 in the new tick.
        let mut waited_out: Option<u64> = None;
        let mut wait_started_ms: Option<u64> = None;
        let mut counted_backwards = false;
        loop {
            let word = self.word.load(Ordering::Acquire);
            if word & CLOSED_BIT != 0 {
                return Err(GenerateError::Closed);
            }
            let deadline = self.deadline_ms.load(Ordering::Acquire);
            if deadline != u64::MAX && clock.monotonic_ms() >= deadline {
                return Err(GenerateError::DeadlinePassed);
            }
            let last = layout
                .decompose(word as i64)
                .expect("an open word is always an id of its layout");
            let now_unix_ms = clock.unix_ms();
            let now_ticks = layout
                .unix_ms_to_ticks(now_unix_ms)
                .map_err(GenerateError::TimeRange)?;
            let step = if waited_out == Some(word) && now_ticks > last.ticks {
                Plan::Issue(IdParts {
                    ticks: now_ticks,
                    machine_id: last.machine_id,
                    sequence: 0,
                })
            } else {
                plan(config, last, now_ticks)
            };
            match step {
                Plan::Issue(parts) => {
                    let bound = self.tick_bound.load(Ordering::Acquire);
                    if parts.ticks >= bound {
                        return Err(GenerateError::BoundReached {
                            bound_unix_ms: layout.ticks_to_unix_ms(bound),
                        });
                    }
                    // In range: the machine id is the open word's, checked by `open`.
                    let id = layout.compose_in_range(parts);
                    if self
                        .word
                        .compare_exchange(word, id as u64, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        self.ids_issued.fetch_add(1, Ordering::Relaxed);
                        return Ok(id);
                    }
                }
                Plan::WaitForNextTick => {
                    if waited_out != Some(word) {
                        waited_out = Some(word);
                        self.next_tick_waits.fetch_add(1, Ordering::Relaxed);
                    }
                    // A tick is at most a second; a clock that does not reach the next one in
                    // several is frozen or jumping, and the caller should hear about it.
                    self.check_wait_budget(clock, &mut wait_started_ms, 5_000)?;
                    // The clock is within the last tick, so the next one is 1 ms to a tick away.
                    let wait_ms = layout.ticks_to_unix_ms(last.ticks + 1) - now_unix_ms;
                    if wait_ms > NEXT_TICK_SPIN_MS {
                        clock.sleep_ms((wait_ms - NEXT_TICK_SPIN_MS) as u64);
                    } else {
                        clock.spin();
                    }
                }
                Plan::ClockBackwards => {
                    let last_unix_ms = layout.ticks_to_unix_ms(last.ticks);
                    let behind_ms = (last_unix_ms - now_unix_ms).max(0) as u64;
                    let policy = clock.backwards_policy();
                    if behind_ms > policy.broken_threshold_ms {
                        self.clock_backwards_errors.fetch_add(1, Ordering::Relaxed);
                        return Err(GenerateError::ClockBackwards {
                            last_unix_ms,
                            now_unix_ms,
                            broken_threshold_ms: policy.broken_threshold_ms,
                        });
                    }
                    if !counted_backwards {
                        counted_backwards = true;
                        self.clock_backwards_waits.fetch_add(1, Ordering::Relaxed);
                    }
                    let budget = policy.broken_threshold_ms + 1_000;
                    self.check_wait_budget(clock, &mut wait_started_ms, budget)?;
                    if behind_ms <= policy.spin_threshold_ms {
                        clock.spin();
                    } else {
                        clock.sleep_ms(behind_ms);
                    }
                }
            }
        }
    }

    fn check_wait_budget(
        &self,
        clock: &mut impl Clock,
        started_ms: &mut Option<u64>,
        budget_ms: u64,
    ) -> Result<(), GenerateError> {
        let now = clock.monotonic_ms();
        let started = *started_ms.get_or_insert(now);
        let waited_ms = now.saturating_sub(started);
        if waited_ms > budget_ms {
            return Err(GenerateError::ClockStalled { waited_ms });
        }
        Ok(())
    }

    /// Sets the exclusive upper bound on issued ticks (`u64::MAX`: none).
    pub fn set_tick_bound(&self, bound: u64) {
        self.tick_bound.store(bound, Ordering::Release);
    }

    pub fn tick_bound(&self) -> u64 {
        self.tick_bound.load(Ordering::Acquire)
    }

    /// Sets the monotonic time from which no id is issued (`u64::MAX`: none).
    pub fn set_deadline_ms(&self, deadline_ms: u64) {
        self.deadline_ms.store(deadline_ms, Ordering::Release);
    }

    pub fn deadline_ms(&self) -> u64 {
        self.deadline_ms.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{TimeUnit, COSID_EPOCH_MS};
    use std::collections::{HashSet, VecDeque};

    #[test]
    fn each_preset_resets_at_half_its_maximum_sequence_as_cosid() {
        // The figures of CosId's SnowflakeId.defaultSequenceResetThreshold for each layout.
        let expected = [
            ("millisecond", 2_047),
            ("second", 2_097_151),
            ("safe_js", 255),
            ("safe_js_second", 262_143),
        ];
        for (name, threshold) in expected {
            let (unit, timestamp_bits, machine_bits, sequence_bits) =
                crate::layout::preset(name).unwrap();
            let layout = Layout::new(
                COSID_EPOCH_MS,
                unit,
                timestamp_bits,
                machine_bits,
                sequence_bits,
            )
            .unwrap();
            assert_eq!(
                default_sequence_reset_threshold(&layout),
                threshold,
                "{name}"
            );
        }
        let one_bit = Layout::new(COSID_EPOCH_MS, TimeUnit::Millisecond, 41, 10, 1).unwrap();
        assert_eq!(default_sequence_reset_threshold(&one_bit), 0);
        let widest = Layout::new(COSID_EPOCH_MS, TimeUnit::Second, 31, 0, 31).unwrap();
        assert_eq!(default_sequence_reset_threshold(&widest), (1 << 30) - 1);
    }

    #[test]
    fn a_threshold_is_zero_up_to_the_maximum_sequence() {
        let safe_js = Layout::new(COSID_EPOCH_MS, TimeUnit::Millisecond, 41, 3, 9).unwrap();
        assert_eq!(check_sequence_reset_threshold(&safe_js, 0), Ok(0));
        assert_eq!(check_sequence_reset_threshold(&safe_js, 511), Ok(511));
        for refused in [-1, 512, i64::from(u32::MAX) + 1] {
            assert_eq!(
                check_sequence_reset_threshold(&safe_js, refused),
                Err(ThresholdTooLarge {
                    threshold: refused,
                    max_sequence: 511
                })
            );
        }
    }

    #[test]
    fn a_safe_js_generator_at_one_id_per_tick_stays_at_or_below_its_threshold() {
        // The sequence climbs by one per id until it reaches the threshold, then restarts at
        // the next tick: with CosId's 255 it never passes 255; with the millisecond layout's
        // 2047, never reached, it climbs to 511 and wraps.
        let layout = Layout::new(COSID_EPOCH_MS, TimeUnit::Millisecond, 41, 3, 9).unwrap();
        let highest = |threshold: u32| {
            let config = GeneratorConfig {
                layout,
                sequence_reset_threshold: threshold,
            };
            let mut last = IdParts {
                ticks: 1,
                machine_id: 0,
                sequence: 0,
            };
            let mut highest = 0;
            for tick in 2..3_000 {
                match plan(&config, last, tick) {
                    Plan::Issue(parts) => {
                        highest = highest.max(parts.sequence);
                        last = parts;
                    }
                    other => panic!("{other:?}"),
                }
            }
            highest
        };
        assert_eq!(highest(default_sequence_reset_threshold(&layout)), 255);
        assert_eq!(highest(DEFAULT_SEQUENCE_RESET_THRESHOLD), 511);
    }

    /// A clock that replays scripted readings; waits advance it.
    struct ScriptedClock {
        readings: VecDeque<i64>,
        current: i64,
        monotonic: u64,
        spins: u64,
        slept_ms: u64,
        policy: BackwardsPolicy,
        /// Applied to `current` by every spin: lets a frozen clock stay frozen.
        spin_advance_ms: i64,
    }

    impl ScriptedClock {
        fn new(readings: &[i64]) -> ScriptedClock {
            ScriptedClock {
                readings: readings.iter().copied().collect(),
                current: readings[0],
                monotonic: 0,
                spins: 0,
                slept_ms: 0,
                policy: BackwardsPolicy::default(),
                spin_advance_ms: 1,
            }
        }
    }

    impl Clock for ScriptedClock {
        fn unix_ms(&mut self) -> i64 {
            if let Some(next) = self.readings.pop_front() {
                self.current = next;
            }
            self.current
        }
        fn monotonic_ms(&mut self) -> u64 {
            self.monotonic
        }
        fn spin(&mut self) {
            self.spins += 1;
            self.monotonic += 1;
            self.current += self.spin_advance_ms;
        }
        fn sleep_ms(&mut self, ms: u64) {
            self.slept_ms += ms;
            self.monotonic += ms;
            self.current += ms as i64;
        }
        fn backwards_policy(&mut self) -> BackwardsPolicy {
            self.policy
        }
    }

    fn config(sequence_bits: u32, threshold: u32) -> GeneratorConfig {
        GeneratorConfig {
            layout: Layout::new(COSID_EPOCH_MS, TimeUnit::Millisecond, 41, 10, sequence_bits)
                .unwrap(),
            sequence_reset_threshold: threshold,
        }
    }

    fn opened(config: &GeneratorConfig, machine_id: u32, floor_unix_ms: i64) -> GeneratorState {
        let state = GeneratorState::closed();
        let floor = config.layout.unix_ms_to_ticks(floor_unix_ms).unwrap();
        state.open(&config.layout, machine_id, floor).unwrap();
        state
    }

    fn parts(config: &GeneratorConfig, id: i64) -> (i64, u32, u32) {
        let p = config.layout.decompose(id).unwrap();
        (
            config.layout.ticks_to_unix_ms(p.ticks),
            p.machine_id,
            p.sequence,
        )
    }

    const T0: i64 = 1_700_000_000_000;

    /// CosId's `AbstractSnowflakeId.generate()`, transcribed: the model the lock-free
    /// generator must agree with, id for id.
    struct CosIdModel {
        config: GeneratorConfig,
        machine_id: u32,
        last_ticks: u64,
        sequence: u32,
    }

    impl CosIdModel {
        fn generate(&mut self, clock: &mut ScriptedClock) -> i64 {
            let layout = self.config.layout;
            let mut now = layout.unix_ms_to_ticks(clock.unix_ms()).unwrap();
            assert!(
                now >= self.last_ticks,
                "the model does not handle clock steps back"
            );
            if now > self.last_ticks && self.sequence >= self.config.sequence_reset_threshold {
                self.sequence = 0;
            }
            self.sequence = (self.sequence + 1) & layout.max_sequence();
            if self.sequence == 0 {
                while now <= self.last_ticks {
                    clock.spin();
                    now = layout.unix_ms_to_ticks(clock.unix_ms()).unwrap();
                }
            }
            self.last_ticks = now;
            layout
                .compose(IdParts {
                    ticks: now,
                    machine_id: self.machine_id,
                    sequence: self.sequence,
                })
                .unwrap()
        }
    }

    #[test]
    fn last_timestamp_is_the_floor_then_the_last_id() {
        let config = config(12, 2047);
        let state = opened(&config, 9, T0);
        assert_eq!(state.last_timestamp_ms(&config.layout), T0);
        let mut clock = ScriptedClock::new(&[T0 + 5]);
        state.next_id(&config, &mut clock).unwrap();
        assert_eq!(state.last_timestamp_ms(&config.layout), T0 + 5);
        state.close();
        assert_eq!(state.last_timestamp_ms(&config.layout), T0 + 5);
    }

    #[test]
    fn the_last_tick_ends_at_its_last_millisecond() {
        // Milliseconds: the last timestamp itself.
        let config = config(12, 2047);
        let state = opened(&config, 9, T0);
        let mut clock = ScriptedClock::new(&[T0 + 5]);
        state.next_id(&config, &mut clock).unwrap();
        assert_eq!(state.last_tick_end_ms(&config.layout), T0 + 5);
        // Seconds: the last millisecond of the second of the last id, and of the floor's second
        // when none was issued (a floor 700 ms into a second).
        let seconds = GeneratorConfig {
            layout: Layout::new(COSID_EPOCH_MS, TimeUnit::Second, 31, 10, 1).unwrap(),
            sequence_reset_threshold: 0,
        };
        let second = |n: i64| COSID_EPOCH_MS + n * 1000;
        let state = opened(&seconds, 4, second(100) + 700);
        assert_eq!(state.last_timestamp_ms(&seconds.layout), second(100));
        assert_eq!(state.last_tick_end_ms(&seconds.layout), second(101) - 1);
        let mut clock = ScriptedClock::new(&[second(101) + 200]);
        state.next_id(&seconds, &mut clock).unwrap();
        state.close();
        assert_eq!(state.last_tick_end_ms(&seconds.layout), second(102) - 1);
    }

    #[test]
    fn agrees_with_cosid_id_for_id() {
        for (sequence_bits, threshold) in [(12, 2047), (4, 7), (4, 0), (4, 15), (3, 100), (1, 0)] {
            let config = config(sequence_bits, threshold);
            // Bursts within a tick and quiet gaps, so that both the reset threshold and the
            // sequence overflow are reached.
            let mut readings = Vec::new();
            let mut t = T0 + 1;
            for round in 0..60i64 {
                let burst = (round * 7) % 40;
                for _ in 0..burst {
                    readings.push(t);
                }
                t += 1 + (round % 3);
            }
            let mut ours_clock = ScriptedClock::new(&readings);
            let mut model_clock = ScriptedClock::new(&readings);
            let state = opened(&config, 9, T0);
            let mut model = CosIdModel {
                config,
                machine_id: 9,
                last_ticks: config.layout.unix_ms_to_ticks(T0).unwrap(),
                sequence: config.layout.max_sequence(),
            };
            for call in 0..readings.len() {
                let ours = state.next_id(&config, &mut ours_clock).unwrap();
                let theirs = model.generate(&mut model_clock);
                assert_eq!(
                    parts(&config, ours),
                    parts(&config, theirs),
                    "call {call}, sequence_bits {sequence_bits}, threshold {threshold}"
                );
            }
        }
    }

    #[test]
    fn sequence_restarts_only_after_the_threshold() {
        let config = config(12, 2047);
        let state = opened(&config, 5, T0);
        let mut clock = ScriptedClock::new(&[T0 + 1, T0 + 2, T0 + 3]);
        let ids: Vec<_> = (0..3)
            .map(|_| parts(&config, state.next_id(&config, &mut clock).unwrap()))
            .collect();
        // The sequence keeps counting across ticks below the threshold: 1, 2, 3.
        assert_eq!(ids, vec![(T0 + 1, 5, 1), (T0 + 2, 5, 2), (T0 + 3, 5, 3)]);
    }

    #[test]
    fn sequence_overflow_waits_for_the_next_tick() {
        let config = config(12, 2047);
        let state = opened(&config, 1, T0);
        let mut clock = ScriptedClock::new(&[T0 + 1]);
        clock.spin_advance_ms = 0;
        let mut last = 0;
        for expected_sequence in 1..=4095 {
            let id = state.next_id(&config, &mut clock).unwrap();
            assert_eq!(parts(&config, id), (T0 + 1, 1, expected_sequence));
            assert!(id > last);
            last = id;
        }
        assert_eq!(clock.spins, 0);
        // The 4,096th id of the millisecond needs the next one: the clock is frozen, so the wait
        // must end in an error rather than spin forever...
        assert!(matches!(
            state.next_id(&config, &mut clock),
            Err(GenerateError::ClockStalled { .. })
        ));
        assert_eq!(
            state.last_word(),
            last,
            "a refusal leaves the state as it was"
        );
        // ...and once the clock moves, it gets sequence 0 of the next millisecond, as in CosId.
        clock.spin_advance_ms = 1;
        clock.monotonic = 0;
        let id = state.next_id(&config, &mut clock).unwrap();
        assert_eq!(parts(&config, id), (T0 + 2, 1, 0));
        assert_eq!(
            clock.slept_ms, 0,
            "a millisecond tick is spun for, never slept for"
        );
        assert!(state.stats().next_tick_waits >= 1);
        assert_eq!(state.stats().ids_issued, 4096);
    }

    #[test]
    fn a_fresh_generator_never_issues_in_its_floor_tick() {
        let config = config(12, 2047);
        let state = opened(&config, 3, T0);
        let mut clock = ScriptedClock::new(&[T0, T0, T0 + 1]);
        let id = state.next_id(&config, &mut clock).unwrap();
        assert_eq!(parts(&config, id), (T0 + 1, 3, 0));
        assert_eq!(clock.spins, 2, "one spin per reading of the floor tick");
    }

    #[test]
    fn every_opening_stays_above_the_history_floor() {
        let config = config(12, 2047);
        let state = GeneratorState::closed();
        let layout = &config.layout;
        state.set_history_floor(layout.unix_ms_to_ticks(T0 + 5).unwrap());
        state
            .open(layout, 3, layout.unix_ms_to_ticks(T0).unwrap())
            .unwrap();
        assert_eq!(state.last_timestamp_ms(layout), T0 + 5);
        // A lower floor set later does not lower it.
        state.set_history_floor(layout.unix_ms_to_ticks(T0 + 1).unwrap());
        state
            .open(layout, 3, layout.unix_ms_to_ticks(T0).unwrap())
            .unwrap();
        assert_eq!(state.last_timestamp_ms(layout), T0 + 5);
        // A later floor still wins over the history's.
        state
            .open(layout, 3, layout.unix_ms_to_ticks(T0 + 9).unwrap())
            .unwrap();
        assert_eq!(state.last_timestamp_ms(layout), T0 + 9);
    }

    #[test]
    fn the_last_issued_id_leaves_floors_out() {
        let config = config(12, 2047);
        let layout = &config.layout;
        let state = GeneratorState::closed();
        assert_eq!(state.last_issued_ms(layout), None);
        state
            .open(layout, 3, layout.unix_ms_to_ticks(T0).unwrap())
            .unwrap();
        assert_eq!(state.last_issued_ms(layout), None, "a floor is no id");
        let mut clock = ScriptedClock::new(&[T0 + 2]);
        state.next_id(&config, &mut clock).unwrap();
        assert_eq!(state.last_issued_ms(layout), Some(T0 + 2));
        // Opened again far ahead (a watermark, a history's floor): still the issued one.
        state
            .open(layout, 3, layout.unix_ms_to_ticks(T0 + 3_600_000).unwrap())
            .unwrap();
        assert_eq!(state.last_issued_ms(layout), Some(T0 + 2));
        assert_eq!(state.last_timestamp_ms(layout), T0 + 3_600_000);
        state.close();
        assert_eq!(state.last_issued_ms(layout), Some(T0 + 2));
    }

    #[test]
    fn a_reopening_below_the_last_id_keeps_its_timestamp() {
        let config = config(12, 2047);
        let layout = &config.layout;
        let state = opened(&config, 3, T0);
        let mut clock = ScriptedClock::new(&[T0 + 40]);
        state.next_id(&config, &mut clock).unwrap();
        // Another machine id whose floor is below the last id (the clock was stepped back).
        state.close();
        state
            .open(layout, 4, layout.unix_ms_to_ticks(T0 + 10).unwrap())
            .unwrap();
        assert_eq!(parts(&config, state.last_word()), (T0 + 10, 4, 4095));
        assert_eq!(state.last_timestamp_ms(layout), T0 + 40);
        // Ids of the new opening past the old ones count again.
        let mut clock = ScriptedClock::new(&[T0 + 50]);
        state.next_id(&config, &mut clock).unwrap();
        assert_eq!(state.last_timestamp_ms(layout), T0 + 50);
    }

    #[test]
    fn small_step_back_spins_then_continues() {
        let config = config(12, 2047);
        let state = opened(&config, 2, T0);
        let mut clock = ScriptedClock::new(&[T0 + 10, T0 + 9]);
        let first = state.next_id(&config, &mut clock).unwrap();
        let second = state.next_id(&config, &mut clock).unwrap();
        assert!(second > first);
        assert_eq!(clock.spins, 1);
        assert_eq!(clock.slept_ms, 0);
        assert_eq!(state.stats().clock_backwards_waits, 1);
    }

    #[test]
    fn medium_step_back_sleeps_until_the_clock_catches_up() {
        let config = config(12, 2047);
        let state = opened(&config, 2, T0);
        let mut clock = ScriptedClock::new(&[T0 + 1000, T0 + 700]);
        let first = state.next_id(&config, &mut clock).unwrap();
        let second = state.next_id(&config, &mut clock).unwrap();
        assert!(second > first);
        assert_eq!(clock.slept_ms, 300);
        assert_eq!(parts(&config, second).0, T0 + 1000);
    }

    #[test]
    fn large_step_back_is_refused_without_changing_state() {
        let config = config(12, 2047);
        let state = opened(&config, 2, T0);
        let mut clock = ScriptedClock::new(&[T0 + 1000, T0 + 499]);
        let first = state.next_id(&config, &mut clock).unwrap();
        let refused = state.next_id(&config, &mut clock);
        assert_eq!(
            refused,
            Err(GenerateError::ClockBackwards {
                last_unix_ms: T0 + 1000,
                now_unix_ms: T0 + 499,
                broken_threshold_ms: 500,
            })
        );
        assert_eq!(state.last_word(), first);
        assert_eq!(clock.slept_ms, 0);
        assert_eq!(state.stats().clock_backwards_errors, 1);
    }

    #[test]
    fn thresholds_come_from_the_policy() {
        let config = config(12, 2047);
        let state = opened(&config, 2, T0);
        let mut clock = ScriptedClock::new(&[T0 + 1000, T0 + 995]);
        clock.policy = BackwardsPolicy {
            spin_threshold_ms: 0,
            broken_threshold_ms: 4,
        };
        state.next_id(&config, &mut clock).unwrap();
        assert!(matches!(
            state.next_id(&config, &mut clock),
            Err(GenerateError::ClockBackwards {
                broken_threshold_ms: 4,
                ..
            })
        ));
    }

    #[test]
    fn closed_generator_refuses() {
        let config = config(12, 2047);
        let state = opened(&config, 2, T0);
        state.close();
        assert!(!state.is_open());
        let mut clock = ScriptedClock::new(&[T0 + 1]);
        assert_eq!(
            state.next_id(&config, &mut clock),
            Err(GenerateError::Closed)
        );
        assert_eq!(state.stats().ids_issued, 0);
    }

    #[test]
    fn tick_bound_is_never_reached() {
        let config = config(12, 2047);
        let state = opened(&config, 2, T0);
        let bound = config.layout.unix_ms_to_ticks(T0 + 5).unwrap();
        state.set_tick_bound(bound);
        let mut clock = ScriptedClock::new(&[T0 + 4, T0 + 5]);
        assert!(state.next_id(&config, &mut clock).is_ok());
        assert_eq!(
            state.next_id(&config, &mut clock),
            Err(GenerateError::BoundReached {
                bound_unix_ms: T0 + 5
            })
        );
    }

    #[test]
    fn deadline_stops_generation_until_it_is_extended() {
        let config = config(12, 2047);
        let state = opened(&config, 2, T0);
        let mut clock = ScriptedClock::new(&[T0 + 1]);
        clock.monotonic = 1_000;
        state.set_deadline_ms(1_001);
        assert!(state.next_id(&config, &mut clock).is_ok());
        clock.monotonic = 1_001;
        let last = state.last_word();
        assert_eq!(
            state.next_id(&config, &mut clock),
            Err(GenerateError::DeadlinePassed)
        );
        assert_eq!(state.last_word(), last);
        state.set_deadline_ms(5_000);
        assert!(state.next_id(&config, &mut clock).unwrap() > last);
    }

    #[test]
    fn a_machine_id_beyond_the_machine_bits_is_refused_at_open() {
        let config = config(12, 2047);
        let floor = config.layout.unix_ms_to_ticks(T0).unwrap();
        let state = GeneratorState::closed();
        assert_eq!(
            state.open(&config.layout, 1024, floor),
            Err(PartsError::MachineId {
                machine_id: 1024,
                max_machine_id: 1023
            })
        );
        assert!(
            !state.is_open(),
            "a refused open leaves the generator closed"
        );
        // An open generator keeps its machine id when a bad one is refused.
        state.open(&config.layout, 1023, floor).unwrap();
        let before = state.last_word();
        assert!(state.open(&config.layout, u32::MAX, floor).is_err());
        assert_eq!(state.last_word(), before);
        let mut clock = ScriptedClock::new(&[T0 + 1]);
        let id = state.next_id(&config, &mut clock).unwrap();
        assert_eq!(parts(&config, id), (T0 + 1, 1023, 1));
    }

    #[test]
    fn a_used_up_second_is_slept_out_not_spun() {
        let config = GeneratorConfig {
            layout: Layout::new(COSID_EPOCH_MS, TimeUnit::Second, 31, 10, 1).unwrap(),
            sequence_reset_threshold: 0,
        };
        let second = |n: i64| COSID_EPOCH_MS + n * 1000;
        let state = opened(&config, 4, second(100));
        let mut clock = ScriptedClock::new(&[second(101) + 200]);
        let first = state.next_id(&config, &mut clock).unwrap();
        assert_eq!(parts(&config, first), (second(101), 4, 1));
        // Sequence 1 was the last of second 101: the next id waits 800 ms for second 102,
        // sleeping all but the last millisecond.
        let next = state.next_id(&config, &mut clock).unwrap();
        assert_eq!(parts(&config, next), (second(102), 4, 0));
        assert_eq!(clock.slept_ms, 799);
        assert_eq!(clock.spins, 1);
        assert_eq!(state.stats().next_tick_waits, 1);
    }

    #[test]
    fn clock_outside_the_layout_is_refused() {
        let config = config(12, 2047);
        let state = opened(&config, 2, COSID_EPOCH_MS);
        let mut clock = ScriptedClock::new(&[COSID_EPOCH_MS - 1]);
        assert_eq!(
            state.next_id(&config, &mut clock),
            Err(GenerateError::TimeRange(TimeRangeError::BeforeEpoch))
        );
        let mut clock = ScriptedClock::new(&[config.layout.max_unix_ms() + 1]);
        assert_eq!(
            state.next_id(&config, &mut clock),
            Err(GenerateError::TimeRange(TimeRangeError::AfterMaximum))
        );
    }

    /// Real threads on a real clock: no duplicates, strictly increasing per thread, and the
    /// machine id of every id is the generator's.
    #[test]
    fn threads_sharing_a_generator_never_collide() {
        struct SystemClock;
        impl Clock for SystemClock {
            fn unix_ms(&mut self) -> i64 {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_millis() as i64
            }
            fn monotonic_ms(&mut self) -> u64 {
                0
            }
            fn spin(&mut self) {
                std::hint::spin_loop();
            }
            fn sleep_ms(&mut self, ms: u64) {
                std::thread::sleep(std::time::Duration::from_millis(ms));
            }
            fn backwards_policy(&mut self) -> BackwardsPolicy {
                BackwardsPolicy::default()
            }
        }
        let config = config(12, 2047);
        let state = GeneratorState::closed();
        let now = SystemClock.unix_ms();
        state
            .open(
                &config.layout,
                77,
                config.layout.unix_ms_to_ticks(now).unwrap(),
            )
            .unwrap();
        let per_thread = 50_000;
        let all: Vec<Vec<i64>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    scope.spawn(|| {
                        let mut clock = SystemClock;
                        (0..per_thread)
                            .map(|_| state.next_id(&config, &mut clock).unwrap())
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut seen = HashSet::new();
        for ids in &all {
            assert!(ids.windows(2).all(|w| w[0] < w[1]));
            for &id in ids {
                assert_eq!(config.layout.decompose(id).unwrap().machine_id, 77);
                assert!(seen.insert(id), "duplicate id {id}");
            }
        }
        assert_eq!(seen.len(), 4 * per_thread);
        assert_eq!(state.stats().ids_issued, 4 * per_thread as u64);
    }
}
