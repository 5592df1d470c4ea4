use super::scripted::*;
use super::*;
use crate::generator::GenerateError;
use crate::protocol::Value;
use std::collections::VecDeque;

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
    let claim = session.store.0.calls_of("lease_claim")[0].params.clone();
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
    let release = &session.store.0.calls_of("lease_release")[0].params;
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
    assert_eq!(session.store.0.calls_of("lease_claim").len(), 1);
    // It succeeds: the machine id goes back with its watermark, then a claim is made.
    session.env.advance(1_000);
    session.step();
    let releases = session.store.0.calls_of("lease_release");
    assert_eq!(releases.len(), 3);
    assert_eq!(
        releases[2].params[4],
        crate::protocol::Param::BigInt(watermark)
    );
    assert_eq!(session.store.0.calls_of("lease_claim").len(), 2);
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
        .0
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
    assert!(session.store.0.calls_of("lease_claim").is_empty());
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
        assert!(session.store.0.calls_of("lease_claim").is_empty());
    }
}

#[test]
fn renewals_move_the_deadline_and_raise_the_bound() {
    let shared = Shared::new();
    let mut session = shared.leased();
    // Not due yet: nothing is sent.
    session.env.advance(999);
    session.step();
    assert!(session.store.0.calls_of("lease_renew").is_empty());
    session.env.advance(1);
    session.step();
    let renewal = &session.store.0.calls_of("lease_renew")[0].params;
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
    // One renewal, tried again until the store answered that the lease is lost: one failure.
    assert_eq!(shared.status.renewal_failures(), 1);
}

#[test]
fn an_outage_of_the_store_counts_one_renewal_failure_whatever_its_retries() {
    let shared = Shared::new();
    let mut store = store_with_claims([claimed("new", 5, 0)]);
    let refused = || Err(StoreError::failed("connection refused"));
    store.renewals = VecDeque::from([
        refused(),
        refused(),
        refused(),
        Ok(renewed(1_000)),
        refused(),
    ]);
    let mut session = shared.session(store, ScriptedEnv::default());
    session.step();
    for _ in 0..3 {
        session.env.advance(1_000);
        session.step();
        assert_eq!(shared.status.state(), LeaseState::Down);
    }
    // Three attempts of one renewal while DOWN: one failure.
    assert_eq!(shared.status.renewal_failures(), 1);
    session.env.advance(1_000);
    session.step();
    assert_eq!(shared.status.state(), LeaseState::Up);
    // The next renewal fails after a success: a second failure.
    session.env.advance(1_000);
    session.step();
    assert_eq!(shared.status.state(), LeaseState::Down);
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
        .0
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
    assert_eq!(session.store.0.calls_of("lease_claim").len(), 2);
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
    let release = &session.store.0.calls_of("lease_release")[0].params;
    assert_eq!(release[4], crate::protocol::Param::BigInt(last_ms));
    assert_eq!(shared.status.watermark_ms(), last_ms);
    assert_eq!(shared.status.state(), LeaseState::Stopped);
    assert_eq!(shared.status.problem(), GeneratorProblem::ShuttingDown);
    assert_eq!(shared.status.held(), None);
    assert_eq!(
        session.store.0.timeouts.last(),
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
    let mut session = shared.session(store_with_claims([claimed("released", 1, watermark)]), env);
    session.step();
    assert!(!shared.generator.is_open());
    assert_eq!(session.held(), None);
    let release = &session.store.0.calls_of("lease_release")[0].params;
    assert_eq!(release[4], crate::protocol::Param::BigInt(watermark));
    assert_eq!(
        session.store.0.timeouts.last(),
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
    assert!(
        last_log(&session).ends_with("connection refused; it frees itself when its lease expires")
    );
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
            .0
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
    assert!(session.store.0.calls.is_empty());
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
    assert!(second.store.0.calls_of("lease_claim").is_empty());
    let renewal = &second.store.0.calls_of("lease_renew")[0].params;
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
    assert_eq!(second.store.0.calls_of("lease_release").len(), 1);
}
