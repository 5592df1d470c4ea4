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
//! - A renewal (and a claim that finds its own entry) checks that no other entry holds its
//!   machine id: anyone who may write CosId's keys can add one (or put a deleted entry back
//!   after another claim took the machine id), and then both holders stop at their next
//!   renewal, never both renew. A released entry for the machine id it holds is deleted.
//! - An entry that is not `"<machine id>|<stamp>"` stops every claim and renewal of the
//!   namespace with an error naming it: which machine id it holds is unknown (a holder then
//!   stops at its deadline).
//! - A claim (of its own entry too) waits while the Redis server may have forgotten claims, and a
//!   renewal goes through then only for a holder that still generates: for the longest safe
//!   guard a claimer gave, at most a day (and the lead a holder's clock may have had) after
//!   the server started, when cosid has no record of it (`cosid:{<namespace>}:cosid_store`),
//!   or after it first saw another run id (a restart: from the start) or replication id (a
//!   promoted replica: from then). A Redis that lost its data without restarting (`FLUSHALL`,
//!   an eviction, a replica promoted with none of the namespace's keys) is not detected.
//!
//! Times are the claimer's wall clock, as in CosId.

use crate::cosid_jdbc::holder_text;
use crate::lease::LONGEST_SAFE_GUARD_MS;
use crate::protocol::{
    ClaimOutcome, ClaimedHow, Holder, LeaseStore, Param, Readiness, Renewed, StoreError,
};
use std::time::Duration;

/// What runs cosid's scripts on a Redis server.
pub trait ScriptTransport {
    /// The longest any one call may take.
    fn set_timeout(&mut self, timeout: Duration);
    /// Whether the server answers and takes writes.
    fn ping(&mut self) -> Result<(), StoreError>;
    /// Runs `script` with one key, `key`, and `args` (each as [`script_arg`] writes it); its
    /// answer, an integer or a list of them.
    fn eval(
        &mut self,
        script: &'static str,
        key: &str,
        args: &[Param],
    ) -> Result<Vec<i64>, StoreError>;
}

/// An argument of a script as Redis takes it, a string; whether a holder still generates
/// ([`Param::LiveBefore`]) is decided by `live` as the call is sent, "1" or "0".
pub fn script_arg(param: &Param, live: impl Fn(u64) -> bool) -> String {
    match param {
        Param::Text(text) => text.clone(),
        Param::Int(number) => number.to_string(),
        Param::BigInt(number) => number.to_string(),
        Param::Bool(flag) => u8::from(*flag).to_string(),
        Param::LiveBefore(deadline_ms) => u8::from(live(*deadline_ms)).to_string(),
    }
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
-- The error of an entry that is not "<machine id>|<stamp>": which machine id it holds is unknown.
local function unreadable(entry_holder)
    return redis.error_reply('COSID the entry of ' .. entry_holder .. ' in ' .. held ..
        ' is not a machine id and a stamp: cosid cannot tell which machine id it holds')
end
-- Whether an entry other than `holder`'s holds `machine_id`, and the holder of the first entry
-- that cannot be read, if any. Anyone who may write CosId's keys can add one: a holder that
-- finds one stops, since the other may have issued ids under it.
local function held_elsewhere(holder, machine_id)
    local entries = redis.call('hgetall', held)
    local elsewhere = false
    for i = 1, #entries, 2 do
        local other = parse(entries[i + 1])
        if other == nil then
            return true, entries[i]
        end
        if entries[i] ~= holder and other == machine_id then
            elsewhere = true
        end
    end
    return elsewhere, nil
end
local function keep_floor(holder, stamp, settles_at)
    redis.call('hset', floors, holder, string.format('%d|%d', stamp, settles_at))
end
-- The Redis server's clock, Unix ms.
local function clock_now()
    local time = redis.call('time')
    return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
-- Whether a holder's clock runs further ahead of this server's than the lead the settling's
-- floor counts on (its watermark is its clock plus its safe guard).
local function too_far_ahead(watermark, safe_guard, now, lead)
    return watermark - safe_guard - now > lead
end
-- Until when this server may have forgotten claims (Redis's clock, Unix ms; nil when it does
-- not say its run id or its replication id): it started (without its data, perhaps), or took another replication
-- history (a promoted replica) since cosid last looked. Its run id, replication id, when the
-- change was first seen and the longest safe guard a claimer gave (at most a day) are kept in
-- cosid's own hash; a change settles for that safe guard, as cosid's own store does, and for
-- the lead a forgotten holder's clock may have had, so that ids issued after it are above
-- every id such a holder issued.
local function store_settles_at(now, safe_guard, lead)
    local server = redis.call('info', 'server')
    local run_id = string.match(server, 'run_id:(%x+)')
    if not run_id then
        return nil
    end
    -- Uptime is in whole seconds: the start this gives is the latest it can have been.
    local started = now - (tonumber(string.match(server, 'uptime_in_seconds:(%d+)')) or 0) * 1000
    local replid = string.match(redis.call('info', 'replication'), 'master_replid:(%x+)')
    if not replid then
        return nil
    end
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
    local longest = math.min(math.max(tonumber(seen[4]) or 0, safe_guard), 86400000)
    redis.call('hset', store, 'run_id', run_id, 'replid', replid,
        'changed', string.format('%d', changed), 'safe_guard', string.format('%d', longest))
    return changed + longest + lead
end
local no_run_id = 'COSID the Redis server of cosid.lease_store does not say its run id ' ..
    '(INFO server) or replication id (INFO replication): cosid cannot tell when it ' ..
    'restarted or took another history, and may have forgotten claims'
"#
    };
}

/// ARGV: holder, the largest machine id, safeGuardAt, the watermark, the safe guard, the lead a
/// holder's clock may have on the Redis server's (counted into the settling, and refused
/// beyond). Answers the machine id, the previous stamp, how (0 own, 1 released, 2 new, 3
/// expired), when the server's settling ended (for the own entry, the later of the one it was
/// claimed after and the last) and its clock now (Redis's clock, Unix ms); `{-1, -1, -1}` when none
/// is left; `{-2, settles_at, now}` while the server settles; `{-3, lead, now}` when the
/// claimer's clock runs further ahead than the lead.
pub const CLAIM_LUA: &str = concat!(
    lua_prelude!(),
    r#"
local holder = ARGV[1]
local max_machine_id = tonumber(ARGV[2])
local safe_guard_at = tonumber(ARGV[3])
local watermark = tonumber(ARGV[4])
local safe_guard = tonumber(ARGV[5])
local lead = tonumber(ARGV[6])
local now = clock_now()
if too_far_ahead(watermark, safe_guard, now, lead) then
    return {-3, lead, now}
end

local settles_at = store_settles_at(now, safe_guard, lead)
if not settles_at then
    return redis.error_reply(no_run_id)
end
if settles_at > now then
    return {-2, settles_at, now}
end

-- Every entry, and how many hold each machine id: an entry that cannot be read stops the
-- claim, since which machine id it holds is unknown.
local entries = redis.call('hgetall', held)
local holders = {}
for i = 1, #entries, 2 do
    local machine_id, stamp = parse(entries[i + 1])
    if not machine_id or not stamp then
        return unreadable(entries[i])
    end
    holders[machine_id] = (holders[machine_id] or 0) + 1
end

-- The claim's own entry (its answer was lost) while it has not expired, once the server has
-- settled, and while no other entry holds its machine id: that it has not expired is this
-- claimer's judgement, and a claimer whose clock runs ahead may have taken it in a history
-- the server forgot.
local own = redis.call('hget', held, holder)
local own_machine_id, own_stamp
if own then
    own_machine_id, own_stamp = parse(own)
    if own_stamp > safe_guard_at and holders[own_machine_id] == 1 then
        hold(holder, own_machine_id, math.max(own_stamp, watermark))
        -- The stamp is this claim's own watermark: the floor it found is kept apart, with the
        -- end of the settling it claimed after (or this one's, if later).
        local floor, settled_at = parse(redis.call('hget', floors, holder) or '')
        return {own_machine_id, floor or own_stamp, 0, math.max(settled_at or 0, settles_at), now}
    end
end

-- An own entry that expired is released (its claim issued no id: its answer never came), and
-- the claim goes on as any other; one whose machine id another entry holds too is only dropped.
if own_machine_id then
    redis.call('hdel', held, holder)
    redis.call('hdel', floors, holder)
    local others = holders[own_machine_id] - 1
    if others > 0 then
        holders[own_machine_id] = others
    else
        holders[own_machine_id] = nil
        local kept = tonumber(redis.call('hget', released, own_machine_id)) or 0
        redis.call('hset', released, string.format('%d', own_machine_id),
            string.format('%d', math.max(kept, own_stamp)))
    end
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
    if previous ~= holder and stamp <= safe_guard_at and machine_id >= 0
            and machine_id <= max_machine_id
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

/// ARGV: holder, machine id, watermark, safe guard, the lead a holder's clock may have, whether
/// the holder still generates ("1" or "0"). Answers 1 when the entry was still this claim's and
/// is renewed: not from a clock further ahead than the lead, and while the server settles, only
/// for a holder that still generates (one that stopped may have been followed by one the server
/// forgot), as `cosid.lease_renew()` decides for cosid's own leases.
pub const RENEW_LUA: &str = concat!(
    lua_prelude!(),
    r#"
local now = clock_now()
local safe_guard = tonumber(ARGV[4])
local lead = tonumber(ARGV[5])
if too_far_ahead(tonumber(ARGV[3]), safe_guard, now, lead) then
    return 0
end
local settles_at = store_settles_at(now, safe_guard, lead)
if not settles_at then
    return redis.error_reply(no_run_id)
end
if settles_at > now and ARGV[6] ~= '1' then
    return 0
end
local entry = redis.call('hget', held, ARGV[1])
if not entry then
    return 0
end
local machine_id, stamp = parse(entry)
if machine_id ~= tonumber(ARGV[2]) or not stamp then
    return 0
end
local elsewhere, unknown = held_elsewhere(ARGV[1], machine_id)
if unknown then
    return unreadable(unknown)
end
if elsewhere then
    return 0
end
-- A release of a machine id this claim holds is not one: taken, it would be used twice.
redis.call('hdel', released, string.format('%d', machine_id))
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

/// How far ahead of the Redis server's clock a holder's clock may run: counted into the
/// settling after a change of the server, whose end is the floor of a claim made then, and
/// refused beyond (a claim answers that the clock is ahead, a renewal is lost). The default of
/// cosid's own store (`cosid.store_settings.max_clock_lead`).
pub const MAX_CLOCK_LEAD_MS: i64 = 1_000;

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

/// A safe guard as the scripts take it: 1 ms to a day.
fn bounded_safe_guard(safe_guard_ms: u64) -> i64 {
    safe_guard_ms.clamp(1, LONGEST_SAFE_GUARD_MS) as i64
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
        args: &[Param],
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
            Param::Text(holder_text(&holder.instance_id, token)),
            Param::BigInt(max_machine_id as i64),
            Param::BigInt(safe_guard_at),
            Param::BigInt(watermark_ms),
            Param::BigInt(bounded_safe_guard(safe_guard_ms)),
            Param::BigInt(MAX_CLOCK_LEAD_MS),
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
            [-2, settles_at_ms, _] => return Ok(ClaimOutcome::Settling { settles_at_ms }),
            [-3, allowed_ms, redis_now_ms] => {
                return Ok(ClaimOutcome::ClockAhead {
                    allowed_ms,
                    store_now_ms: redis_now_ms,
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
        // end of the settling, which counts the lead its clock may have had on the server's
        // (and it may have no more). Where this claimer's clock runs ahead of the server's, the
        // same moment on its clock is later: the floor is the later of the two.
        let settling_floor_ms = if settled_at_ms > 0 {
            settled_at_ms.max(here(settled_at_ms, redis_now_ms))
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
        live_until_ms: u64,
    ) -> Result<Option<Renewed>, StoreError> {
        let now_ms = (self.now_ms)();
        let args = [
            Param::Text(holder_text(&holder.instance_id, token)),
            Param::Int(machine_id as i32),
            Param::BigInt(watermark_ms),
            Param::BigInt(bounded_safe_guard(safe_guard_ms)),
            Param::BigInt(MAX_CLOCK_LEAD_MS),
            Param::LiveBefore(live_until_ms),
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
            Param::Text(holder_text(&holder.instance_id, token)),
            Param::Int(machine_id as i32),
            Param::BigInt(watermark_ms.saturating_add(1)),
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
        /// Whether a holder still generates is decided here against a deadline of 1000.
        fn eval(
            &mut self,
            script: &'static str,
            key: &str,
            args: &[Param],
        ) -> Result<Vec<i64>, StoreError> {
            let args = args
                .iter()
                .map(|arg| script_arg(arg, |deadline_ms| deadline_ms > 1_000))
                .collect();
            self.sent.push((script, key.to_string(), args));
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
                MAX_CLOCK_LEAD_MS.to_string()
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
                settles_at_ms: redis_now + 3_000
            },
            "until when, on the server's clock"
        );
        // Settled 100 ms ago: the ids stay above the settling's end (which counts the lead a
        // forgotten holder's clock may have had), not only above the released stamp; this
        // claimer's clock being ahead of the server's, above the same moment on its clock. A
        // claim whose answer was lost finds the same floor again.
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
    fn a_claimer_far_ahead_or_behind_the_server_is_answered_on_the_servers_clock() {
        // Refused from too far ahead: the lead is the server's answer.
        let mut store = store(vec![
            Ok(vec![-3, MAX_CLOCK_LEAD_MS, NOW_MS - 1_500]),
            Ok(vec![2, 0, 2, NOW_MS + 60_000, NOW_MS + 61_000]),
        ]);
        assert_eq!(
            store
                .claim(&holder(10), 4_000, 0xab, NOW_MS + 4_000)
                .unwrap(),
            ClaimOutcome::ClockAhead {
                allowed_ms: MAX_CLOCK_LEAD_MS,
                store_now_ms: NOW_MS - 1_500
            }
        );
        // A server a minute ahead settled a second ago: the floor is its own time of that.
        assert!(matches!(
            store.claim(&holder(10), 4_000, 0xab, NOW_MS + 4_000).unwrap(),
            ClaimOutcome::Claimed { how: ClaimedHow::New, previous_watermark_ms, .. }
                if previous_watermark_ms == NOW_MS + 60_000
        ));
        // A safe guard is passed as the server settles for it: a day at most.
        store
            .claim(&holder(10), u64::MAX, 0xab, NOW_MS + 4_000)
            .unwrap_err();
        assert_eq!(store.transport.sent[2].2[4], "86400000");
    }

    #[test]
    fn renewals_and_releases_check_the_machine_id_and_release_past_the_last_id() {
        let mut store = store(vec![Ok(vec![1]), Ok(vec![0]), Ok(vec![1])]);
        let renewed = store.renew(&holder(10), 3, 0xab, 4_000, NOW_MS + 4_000, 5_000);
        assert_eq!(
            renewed.unwrap().map(|r| r.expires_at_ms),
            Some(NOW_MS + 4_000)
        );
        // The server decides on the lead and the settling: it is given both, and whether the
        // holder still generates, decided as the call is sent.
        assert_eq!(
            store.transport.sent[0].2,
            [
                "cosid-00000000000000ab@db1:5432:77",
                "3",
                &(NOW_MS + 4_000).to_string(),
                "4000",
                &MAX_CLOCK_LEAD_MS.to_string(),
                "1"
            ]
        );
        assert_eq!(
            store
                .renew(&holder(10), 3, 0xab, 4_000, NOW_MS + 4_000, 0)
                .unwrap(),
            None
        );
        assert_eq!(store.transport.sent[1].2[5], "0", "a holder that stopped");
        assert!(store.release(&holder(10), 3, 0xab, NOW_MS - 3).unwrap());
        let (script, _, args) = &store.transport.sent[2];
        assert_eq!(*script, RELEASE_LUA);
        assert_eq!(args[1], "3");
        assert_eq!(args[2], (NOW_MS - 2).to_string(), "past the last id issued");
        assert_eq!(store.readiness().unwrap(), Readiness::ReadOnly);
    }
}
