//! The lease session's test fixtures: a store that answers from scripts and records every call,
//! a process whose clocks the test moves, and a generator with its status to share.

use super::*;
use crate::generator::{BackwardsPolicy, Clock, GenerateError, GeneratorConfig};
use crate::layout::TimeUnit;
use crate::protocol::{Call, CosidProtocol, SqlTransport, Value};
use std::collections::VecDeque;

pub(super) const EPOCH_MS: i64 = 1_577_203_200_000;
pub(super) const START_WALL_MS: i64 = 1_700_000_000_000;
pub(super) const START_MONO_MS: u64 = 50_000;
pub(super) const TOKEN: u64 = 0xfeed;

pub(super) type Answer = Result<Vec<Vec<Value>>, StoreError>;

/// A store that answers each kind of call from its own script and records every call.
#[derive(Default)]
pub(super) struct ScriptedStore {
    pub(super) remote: bool,
    pub(super) readiness: VecDeque<Answer>,
    pub(super) claims: VecDeque<Answer>,
    pub(super) renewals: VecDeque<Answer>,
    pub(super) releases: VecDeque<Answer>,
    pub(super) calls: Vec<Call>,
    pub(super) timeouts: Vec<Duration>,
}

impl ScriptedStore {
    pub(super) fn calls_of(&self, function: &str) -> Vec<&Call> {
        self.calls
            .iter()
            .filter(|call| call.sql.contains(&format!("cosid.{function}($")))
            .collect()
    }
}

impl SqlTransport for ScriptedStore {
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

pub(super) fn bools(values: &[bool]) -> Vec<Vec<Value>> {
    vec![values.iter().map(|v| Value::Bool(*v)).collect()]
}

pub(super) fn renewed(expires_in_ms: i64) -> Vec<Vec<Value>> {
    vec![vec![
        Value::BigInt(START_WALL_MS + expires_in_ms),
        Value::BigInt(START_WALL_MS),
    ]]
}

pub(super) fn claimed(how: &str, machine_id: i32, previous_watermark_ms: i64) -> Answer {
    Ok(vec![vec![
        Value::Text(how.into()),
        Value::Int(machine_id),
        Value::BigInt(previous_watermark_ms),
        Value::BigInt(START_WALL_MS + 4_000),
        Value::BigInt(START_WALL_MS),
    ]])
}

pub(super) fn refused(outcome: &str, machine_id: Value) -> Answer {
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
pub(super) struct ScriptedEnv {
    pub(super) mono_ms: u64,
    pub(super) wall_ms: i64,
    pub(super) shutdown: bool,
    pub(super) shutdown_when_sleeping: bool,
    pub(super) randoms: VecDeque<u64>,
    pub(super) logs: Vec<(LogLevel, String)>,
    pub(super) sleeps: Vec<u64>,
    pub(super) fail_fast: bool,
    pub(super) broken_threshold_ms: u64,
    pub(super) interval_ms: u64,
    pub(super) state: Result<Option<StateRecord>, String>,
    pub(super) writes: Vec<(String, u32, i64, Option<u64>)>,
    pub(super) write_error: Option<String>,
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
    pub(super) fn advance(&mut self, ms: u64) {
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
pub(super) struct FixedClock {
    pub(super) wall_ms: i64,
    pub(super) mono_ms: u64,
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

pub(super) fn layout() -> Layout {
    Layout::new(EPOCH_MS, TimeUnit::Millisecond, 41, 3, 12).unwrap()
}

pub(super) fn timing() -> LeaseTiming {
    LeaseTiming {
        safe_guard_ms: 4_000,
        guarder_delay_ms: 1_000,
        guarder_initial_delay_ms: 1_000,
    }
}

pub(super) fn holder(stable: bool) -> Holder {
    Holder::new("orders", &layout(), "db1:5432:7", stable)
}

/// The shared memory a session drives, as backends would see it.
pub(super) struct Shared {
    pub(super) generator: GeneratorState,
    pub(super) status: GeneratorStatus,
}

impl Shared {
    pub(super) fn new() -> Shared {
        Shared {
            generator: GeneratorState::closed(),
            status: GeneratorStatus::new(),
        }
    }

    pub(super) fn session(&self, store: ScriptedStore, env: ScriptedEnv) -> TestSession<'_> {
        self.session_with(store, env, holder(false), timing())
    }

    pub(super) fn session_with(
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
        let mut session = Session::new(slot, holder, "app", CosidProtocol(store), env);
        session.start(timing);
        session
    }

    /// A session that has just leased machine id 5 (a new one, no watermark).
    pub(super) fn leased(&self) -> TestSession<'_> {
        let mut session = self.session(
            store_with_claims([claimed("new", 5, 0)]),
            ScriptedEnv::default(),
        );
        session.step();
        session
    }

    /// One id, as a backend would issue it at `wall_ms`, `mono_ms`.
    pub(super) fn next_id(&self, wall_ms: i64, mono_ms: u64) -> Result<i64, GenerateError> {
        let config = GeneratorConfig {
            layout: layout(),
            sequence_reset_threshold: 0,
        };
        self.generator
            .next_id(&config, &mut FixedClock { wall_ms, mono_ms })
    }
}

pub(super) type TestSession<'a> = Session<'a, CosidProtocol<ScriptedStore>, ScriptedEnv>;

pub(super) fn store_with_claims(claims: impl IntoIterator<Item = Answer>) -> ScriptedStore {
    ScriptedStore {
        claims: claims.into_iter().collect(),
        ..ScriptedStore::default()
    }
}

pub(super) fn ticks(unix_ms: i64) -> u64 {
    layout().unix_ms_to_ticks(unix_ms).unwrap()
}

pub(super) fn last_log(session: &TestSession<'_>) -> String {
    session
        .env
        .logs
        .last()
        .map(|(_, line)| line.clone())
        .unwrap_or_default()
}
