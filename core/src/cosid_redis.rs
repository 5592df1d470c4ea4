//! Machine ids from CosId's Redis distributor, shared with Java services that use CosId
//! (`cosid.distributor = 'cosid_redis'`): a [`LeaseStore`] over a transport that runs a Lua
//! script on the namespace's keys.
//!
//! The keys are CosId's, with the namespace as a hash tag: `cosid:{<namespace>}:itc_idx` (a hash
//! from holder to `"<machine id>|<stamp>"`), `cosid:{<namespace>}:adder` (the last machine id
//! handed out, from -1) and `cosid:{<namespace>}:revert` (a hash from a released machine id to
//! its stamp). A claim takes, in CosId's order, the holder's own entry, a released machine id,
//! the next of the adder while it is below the maximum, and only then an expired entry. A
//! renewal sets the entry's stamp; a release moves the entry to the released hash. Each is one
//! script, so it runs whole or not at all. Where Java instances cannot see it, cosid is stricter,
//! as with CosId's JDBC table (`cosid_jdbc.rs`):
//! - The holder is the claim's token and instance id (`cosid-<token>@<instance id>`): a claim is
//!   never mistaken for another server's or an earlier life's.
//! - The stamp a claim and each renewal write is the watermark, a time no id issued under it
//!   reaches; a release writes the millisecond after the last id issued, since CosId waits only
//!   until its clock reaches a released stamp.
//! - An entry a Java instance holds is never taken when it expires (CosId keeps generating after
//!   its renewals fail); only entries cosid held are.
//! - A claim keeps the stamp it found (its floor) in cosid's own hash `cosid:{<namespace>}:
//!   cosid_claim_floor` until its first renewal: a claim whose answer was lost finds its entry
//!   again on its next attempt, and waits for that floor, not for the watermark it wrote itself
//!   (which is a safe guard ahead, and would make it give the machine id back).
//! - A machine id beyond the claimer's machine bits, or one another entry holds, is passed over
//!   (an expired entry of cosid's too, when a second entry holds its machine id); a renewal or
//!   release checks the machine id as well as the holder.
//! - An entry that is not `"<machine id>|<stamp>"` stops every claim of the namespace with an
//!   error naming it: which machine id it holds is unknown.
//! - A claim other than of its own entry waits while the Redis server may have forgotten claims:
//!   for the longest safe guard a claimer gave (and the lead a holder's clock may have had) after
//!   the server started, when cosid has no record of it (`cosid:{<namespace>}:cosid_store`),
//!   or after it first saw another run id (a restart: from the start) or replication id (a
//!   promoted replica: from then). A Redis that lost its data without restarting (`FLUSHALL`,
//!   an eviction, a replica promoted with none of the namespace's keys) is not detected.
//!
//! Times are the claimer's wall clock, as in CosId.

use crate::cosid_jdbc::holder_text;
use crate::protocol::{
    ClaimOutcome, ClaimedHow, Holder, LeaseStore, Readiness, Renewed, StoreError,
};
use std::time::Duration;

/// What runs cosid's scripts on a Redis server.
pub trait ScriptTransport {
    /// The longest any one call may take.
    fn set_timeout(&mut self, timeout: Duration);
    /// Whether the server answers and takes writes.
    fn ping(&mut self) -> Result<(), StoreError>;
    /// Runs `script` with one key, `key`, and `args`; its answer, an integer or a list of them.
    fn eval(
        &mut self,
        script: &'static str,
        key: &str,
        args: &[String],
    ) -> Result<Vec<i64>, StoreError>;
}

/// The Lua functions every script shares: the keys, and an entry's text.
macro_rules! lua_prelude {
    () => {
        r#"
local held = 'cosid:' .. KEYS[1] .. ':itc_idx'
local released = 'cosid:' .. KEYS[1] .. ':revert'
local adder = 'cosid:' .. KEYS[1] .. ':adder'
local floors = 'cosid:' .. KEYS[1] .. ':cosid_claim_floor'
local store = 'cosid:' .. KEYS[1] .. ':cosid_store'
local function parse(entry)
    local bar = string.find(entry, '|', 1, true)
    if not bar then
        return nil, nil
    end
    return tonumber(string.sub(entry, 1, bar - 1)), tonumber(string.sub(entry, bar + 1))
end
local function hold(holder, machine_id, stamp)
    redis.call('hset', held, holder, string.format('%d|%d', machine_id, stamp))
end
local function keep_floor(holder, stamp, settles_at)
    redis.call('hset', floors, holder, string.format('%d|%d', stamp, settles_at))
end
"#
    };
}

/// ARGV: holder, the largest machine id, safeGuardAt, the watermark, the safe guard, the lead a
/// forgotten holder's clock may have had (counted into the settling). Answers the
/// machine id, the previous stamp, how (0 own, 1 released, 2 new, 3 expired), when the server's
/// settling ended (for the own entry, the one it was claimed after; 0 when unknown) and its
/// clock now (Redis's clock, Unix ms); `{-1, -1, -1}` when none is left; `{-2, settles_at,
/// now}` while the server settles.
pub const CLAIM_LUA: &str = concat!(
    lua_prelude!(),
    r#"
local holder = ARGV[1]
local max_machine_id = tonumber(ARGV[2])
local safe_guard_at = tonumber(ARGV[3])
local watermark = tonumber(ARGV[4])
local safe_guard = tonumber(ARGV[5])
local lead = tonumber(ARGV[6])
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local own = redis.call('hget', held, holder)
if own then
    local machine_id, stamp = parse(own)
    if machine_id and stamp then
        hold(holder, machine_id, math.max(stamp, watermark))
        -- The stamp is this claim's own watermark: the floor it found is kept apart, with the
        -- end of the settling it claimed after.
        local floor, settled_at = parse(redis.call('hget', floors, holder) or '')
        return {machine_id, floor or stamp, 0, settled_at or 0, now}
    end
end

-- Whether this server may have forgotten claims: it started (without its data, perhaps), or
-- took another replication history (a promoted replica) since cosid last looked. Its run id,
-- replication id, when the change was first seen and the longest safe guard a claimer gave are
-- kept in cosid's own hash; a change settles for that safe guard, as cosid's own store does,
-- and for the lead a forgotten holder's clock may have had, so that ids issued after it are
-- above every id such a holder issued.
local server = redis.call('info', 'server')
local run_id = string.match(server, 'run_id:(%x+)') or ''
-- Uptime is in whole seconds: the start this gives is the latest it can have been.
local started = now - (tonumber(string.match(server, 'uptime_in_seconds:(%d+)')) or 0) * 1000
local replid = string.match(redis.call('info', 'replication'), 'master_replid:(%x+)') or ''
local seen = redis.call('hmget', store, 'run_id', 'replid', 'changed', 'safe_guard')
local changed = tonumber(seen[3])
if not changed then
    -- No record: its data may have been lost when it started.
    changed = started
elseif seen[2] ~= replid then
    changed = now
elseif seen[1] ~= run_id then
    changed = math.max(changed, started)
end
local longest = math.max(tonumber(seen[4]) or 0, safe_guard)
redis.call('hset', store, 'run_id', run_id, 'replid', replid, 'changed', changed,
    'safe_guard', longest)
local settles_at = changed + longest + lead
if settles_at > now then
    return {-2, settles_at, now}
end

local entries = redis.call('hgetall', held)
local holders = {}
for i = 1, #entries, 2 do
    local machine_id, stamp = parse(entries[i + 1])
    if not machine_id or not stamp then
        return redis.error_reply('COSID the entry of ' .. entries[i] .. ' in ' .. held ..
            ' is not a machine id and a stamp: cosid cannot tell which machine id it holds')
    end
    holders[machine_id] = (holders[machine_id] or 0) + 1
end

local reverted = redis.call('hgetall', released)
for i = 1, #reverted, 2 do
    local machine_id = tonumber(reverted[i])
    local stamp = tonumber(reverted[i + 1])
    if machine_id and stamp and machine_id >= 0 and machine_id <= max_machine_id
            and not holders[machine_id] then
        redis.call('hdel', released, reverted[i])
        hold(holder, machine_id, math.max(stamp, watermark))
        keep_floor(holder, stamp, settles_at)
        return {machine_id, stamp, 1, settles_at, now}
    end
end

if not redis.call('get', adder) then
    redis.call('set', adder, -1)
end
while tonumber(redis.call('get', adder)) < max_machine_id do
    local machine_id = redis.call('incr', adder)
    if not holders[machine_id] then
        hold(holder, machine_id, watermark)
        keep_floor(holder, 0, settles_at)
        return {machine_id, 0, 2, settles_at, now}
    end
end

for i = 1, #entries, 2 do
    local previous = entries[i]
    local machine_id, stamp = parse(entries[i + 1])
    if stamp <= safe_guard_at and machine_id >= 0 and machine_id <= max_machine_id
            and holders[machine_id] == 1
            and string.match(previous, '^cosid%-' .. string.rep('%x', 16) .. '@') then
        redis.call('hdel', held, previous)
        redis.call('hdel', floors, previous)
        hold(holder, machine_id, watermark)
        keep_floor(holder, stamp, settles_at)
        return {machine_id, stamp, 3, settles_at, now}
    end
end

return {-1, -1, -1}
"#
);

/// ARGV: holder, machine id, watermark. Answers 1 when the entry was still this claim's.
pub const RENEW_LUA: &str = concat!(
    lua_prelude!(),
    r#"
local entry = redis.call('hget', held, ARGV[1])
if not entry then
    return 0
end
local machine_id, stamp = parse(entry)
if machine_id ~= tonumber(ARGV[2]) or not stamp then
    return 0
end
hold(ARGV[1], machine_id, math.max(stamp, tonumber(ARGV[3])))
-- A renewal follows the claim's answer: its floor is no longer needed.
redis.call('hdel', floors, ARGV[1])
return 1
"#
);

/// ARGV: holder, machine id, the stamp to release with. Answers 1 when the entry was still this
/// claim's.
pub const RELEASE_LUA: &str = concat!(
    lua_prelude!(),
    r#"
local entry = redis.call('hget', held, ARGV[1])
if not entry then
    return 0
end
local machine_id = parse(entry)
if machine_id ~= tonumber(ARGV[2]) then
    return 0
end
redis.call('hdel', held, ARGV[1])
redis.call('hdel', floors, ARGV[1])
redis.call('hset', released, machine_id, ARGV[3])
return 1
"#
);

/// How far ahead of a claimer's clock a holder's clock may have run, counted into the settling
/// after a change of the Redis server, whose end is the floor of a claim made then: the default
/// of cosid's own store (`cosid.store_settings.max_clock_lead`).
pub const FORGOTTEN_HOLDER_LEAD_MS: i64 = 1_000;

/// The key CosId passes its scripts: the namespace as a Redis Cluster hash tag.
pub fn hash_tag(namespace: &str) -> String {
    format!("{{{namespace}}}")
}

/// CosId's Redis distributor over a transport, with the claimer's clock.
pub struct CosidRedis<T> {
    pub transport: T,
    /// The wall clock, Unix ms.
    pub now_ms: fn() -> i64,
}

fn malformed(script: &str, answer: &[i64]) -> StoreError {
    StoreError::failed(format!(
        "the Redis server of cosid.lease_store answered {answer:?} to cosid's {script} script"
    ))
}

impl<T: ScriptTransport> CosidRedis<T> {
    fn one(
        &mut self,
        script: &'static str,
        name: &str,
        key: &str,
        args: &[String],
    ) -> Result<bool, StoreError> {
        match self.transport.eval(script, key, args)?.as_slice() {
            [0] => Ok(false),
            [1] => Ok(true),
            other => Err(malformed(name, other)),
        }
    }
}

impl<T: ScriptTransport> LeaseStore for CosidRedis<T> {
    fn is_remote(&self) -> bool {
        true
    }

    fn set_timeout(&mut self, timeout: Duration) {
        self.transport.set_timeout(timeout)
    }

    fn readiness(&mut self) -> Result<Readiness, StoreError> {
        match self.transport.ping() {
            Ok(()) => Ok(Readiness::Ready),
            Err(StoreError::ReadOnly) => Ok(Readiness::ReadOnly),
            Err(other) => Err(other),
        }
    }

    fn claim(
        &mut self,
        holder: &Holder,
        safe_guard_ms: u64,
        token: u64,
        watermark_ms: i64,
    ) -> Result<ClaimOutcome, StoreError> {
        let now_ms = (self.now_ms)();
        let safe_guard_at = now_ms
            .saturating_sub(safe_guard_ms.min(i64::MAX as u64) as i64)
            .max(0);
        let max_machine_id = (1u64 << holder.machine_bits) - 1;
        let args = [
            holder_text(&holder.instance_id, token),
            max_machine_id.to_string(),
            safe_guard_at.to_string(),
            watermark_ms.to_string(),
            safe_guard_ms.clamp(1, i64::MAX as u64).to_string(),
            FORGOTTEN_HOLDER_LEAD_MS.to_string(),
        ];
        let answer = self
            .transport
            .eval(CLAIM_LUA, &hash_tag(&holder.namespace), &args)?;
        // A time of the Redis server's clock, on this claimer's.
        let here = |redis_ms: i64, redis_now_ms: i64| {
            now_ms.saturating_add(redis_ms.saturating_sub(redis_now_ms))
        };
        let (how, settled_at_ms, redis_now_ms) = match *answer.as_slice() {
            [-1, -1, -1] => return Ok(ClaimOutcome::Exhausted),
            [-2, settles_at_ms, redis_now_ms] => {
                return Ok(ClaimOutcome::Settling {
                    settles_at_ms: here(settles_at_ms, redis_now_ms),
                })
            }
            [_, _, how, settled_at_ms, redis_now_ms] if settled_at_ms >= 0 => {
                let how = match how {
                    0 => ClaimedHow::Own,
                    1 => ClaimedHow::Released,
                    2 => ClaimedHow::New,
                    3 => ClaimedHow::Expired,
                    _ => return Err(malformed("claim", &answer)),
                };
                (how, settled_at_ms, redis_now_ms)
            }
            _ => return Err(malformed("claim", &answer)),
        };
        let (machine_id, previous_stamp) = (answer[0], answer[1]);
        if machine_id < 0 || machine_id as u64 > max_machine_id {
            return Err(malformed("claim", &answer));
        }
        // A holder the server forgot issued ids until its deadline, by its own clock: up to the
        // end of the settling, which counts the lead its clock may have had on this one.
        let settling_floor_ms = if settled_at_ms > 0 {
            here(settled_at_ms, redis_now_ms)
        } else {
            0
        };
        Ok(ClaimOutcome::Claimed {
            machine_id: machine_id as u32,
            how,
            previous_watermark_ms: previous_stamp.max(settling_floor_ms),
            expires_at_ms: now_ms.saturating_add(safe_guard_ms as i64),
            store_now_ms: now_ms,
        })
    }

    /// CosId's guard, writing the watermark: `None` when the entry is no longer this claim's.
    fn renew(
        &mut self,
        holder: &Holder,
        machine_id: u32,
        token: u64,
        safe_guard_ms: u64,
        watermark_ms: i64,
        _live_until_ms: u64,
    ) -> Result<Option<Renewed>, StoreError> {
        let now_ms = (self.now_ms)();
        let args = [
            holder_text(&holder.instance_id, token),
            machine_id.to_string(),
            watermark_ms.to_string(),
        ];
        let renewed = self.one(RENEW_LUA, "renewal", &hash_tag(&holder.namespace), &args)?;
        Ok(renewed.then_some(Renewed {
            expires_at_ms: now_ms.saturating_add(safe_guard_ms as i64),
            store_now_ms: now_ms,
        }))
    }

    /// CosId's revert of a claimer that is not stable, with the millisecond after the last id
    /// issued: CosId's next holder waits only until its clock reaches the stamp.
    fn release(
        &mut self,
        holder: &Holder,
        machine_id: u32,
        token: u64,
        watermark_ms: i64,
    ) -> Result<bool, StoreError> {
        let args = [
            holder_text(&holder.instance_id, token),
            machine_id.to_string(),
            watermark_ms.saturating_add(1).to_string(),
        ];
        self.one(RELEASE_LUA, "release", &hash_tag(&holder.namespace), &args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    #[derive(Default)]
    struct Scripted {
        answers: VecDeque<Result<Vec<i64>, StoreError>>,
        sent: Vec<(&'static str, String, Vec<String>)>,
    }

    impl ScriptTransport for Scripted {
        fn set_timeout(&mut self, _timeout: Duration) {}
        fn ping(&mut self) -> Result<(), StoreError> {
            Err(StoreError::ReadOnly)
        }
        fn eval(
            &mut self,
            script: &'static str,
            key: &str,
            args: &[String],
        ) -> Result<Vec<i64>, StoreError> {
            self.sent.push((script, key.to_string(), args.to_vec()));
            self.answers.pop_front().unwrap_or(Ok(Vec::new()))
        }
    }

    const NOW_MS: i64 = 1_700_000_000_000;

    fn store(answers: Vec<Result<Vec<i64>, StoreError>>) -> CosidRedis<Scripted> {
        CosidRedis {
            transport: Scripted {
                answers: answers.into(),
                sent: Vec::new(),
            },
            now_ms: || NOW_MS,
        }
    }

    fn holder(machine_bits: u32) -> Holder {
        Holder {
            namespace: "orders".into(),
            machine_bits,
            layout: String::new(),
            instance_id: "db1:5432:77".into(),
            stable: false,
        }
    }

    #[test]
    fn a_claim_passes_cosids_key_and_reads_how_it_was_claimed() {
        let settled_long_ago = NOW_MS - 60_000;
        let mut store = store(vec![
            Ok(vec![5, NOW_MS - 7, 1, settled_long_ago, NOW_MS]),
            Ok(vec![-1, -1, -1]),
        ]);
        let outcome = store
            .claim(&holder(10), 4_000, 0xab, NOW_MS + 4_000)
            .unwrap();
        assert!(matches!(
            outcome,
            ClaimOutcome::Claimed { machine_id: 5, how: ClaimedHow::Released, previous_watermark_ms, .. }
                if previous_watermark_ms == NOW_MS - 7
        ));
        let (script, key, args) = &store.transport.sent[0];
        assert_eq!(*script, CLAIM_LUA);
        assert_eq!(key, "{orders}");
        assert_eq!(
            args,
            &[
                "cosid-00000000000000ab@db1:5432:77".to_string(),
                "1023".into(),
                (NOW_MS - 4_000).to_string(),
                (NOW_MS + 4_000).to_string(),
                "4000".into(),
                FORGOTTEN_HOLDER_LEAD_MS.to_string()
            ]
        );
        assert_eq!(
            store.claim(&holder(10), 4_000, 0xab, NOW_MS).unwrap(),
            ClaimOutcome::Exhausted
        );
    }

    #[test]
    fn answers_outside_the_protocol_are_errors() {
        for answer in [
            vec![2048, 0, 2, 0, NOW_MS],
            vec![1, 0, 9, 0, NOW_MS],
            vec![1, 0, 2, -5, NOW_MS],
            vec![1, 0, 2],
            vec![-2, 0],
            vec![1],
            vec![],
        ] {
            let mut store = store(vec![Ok(answer.clone())]);
            assert!(
                matches!(
                    store.claim(&holder(10), 4_000, 1, NOW_MS),
                    Err(StoreError::Failed(_))
                ),
                "{answer:?}"
            );
        }
        let mut store = store(vec![Ok(vec![7])]);
        assert!(store.renew(&holder(10), 1, 1, 4_000, NOW_MS, 0).is_err());
    }

    #[test]
    fn a_server_that_may_have_forgotten_claims_settles_first() {
        // The Redis server's clock runs 2 s behind this claimer's.
        let redis_now = NOW_MS - 2_000;
        let mut store = store(vec![
            Ok(vec![-2, redis_now + 3_000, redis_now]),
            Ok(vec![4, NOW_MS - 50_000, 1, redis_now - 100, redis_now]),
            Ok(vec![4, NOW_MS - 50_000, 0, redis_now - 100, redis_now]),
        ]);
        assert_eq!(
            store.claim(&holder(10), 4_000, 0xab, NOW_MS).unwrap(),
            ClaimOutcome::Settling {
                settles_at_ms: NOW_MS + 3_000
            },
            "until when, on this claimer's clock"
        );
        // Settled 100 ms ago: the ids stay above the settling's end (which counts the lead a
        // forgotten holder's clock may have had), not only above the released stamp. A claim
        // whose answer was lost finds the same floor again.
        for how in [ClaimedHow::Released, ClaimedHow::Own] {
            assert!(matches!(
                store.claim(&holder(10), 4_000, 0xab, NOW_MS).unwrap(),
                ClaimOutcome::Claimed { machine_id: 4, how: claimed, previous_watermark_ms, .. }
                    if claimed == how
                        && previous_watermark_ms == NOW_MS - 100
            ));
        }
    }

    #[test]
    fn renewals_and_releases_check_the_machine_id_and_release_past_the_last_id() {
        let mut store = store(vec![Ok(vec![1]), Ok(vec![0]), Ok(vec![1])]);
        let renewed = store.renew(&holder(10), 3, 0xab, 4_000, NOW_MS + 4_000, 0);
        assert_eq!(
            renewed.unwrap().map(|r| r.expires_at_ms),
            Some(NOW_MS + 4_000)
        );
        assert_eq!(
            store
                .renew(&holder(10), 3, 0xab, 4_000, NOW_MS + 4_000, 0)
                .unwrap(),
            None
        );
        assert!(store.release(&holder(10), 3, 0xab, NOW_MS - 3).unwrap());
        let (script, _, args) = &store.transport.sent[2];
        assert_eq!(*script, RELEASE_LUA);
        assert_eq!(args[1], "3");
        assert_eq!(args[2], (NOW_MS - 2).to_string(), "past the last id issued");
        assert_eq!(store.readiness().unwrap(), Readiness::ReadOnly);
    }
}
