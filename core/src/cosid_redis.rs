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
"#
    };
}

/// ARGV: holder, the largest machine id, safeGuardAt, the watermark. Answers the machine id, the
/// previous stamp and how (0 own, 1 released, 2 new, 3 expired), or `{-1, -1, -1}`.
pub const CLAIM_LUA: &str = concat!(
    lua_prelude!(),
    r#"
local holder = ARGV[1]
local max_machine_id = tonumber(ARGV[2])
local safe_guard_at = tonumber(ARGV[3])
local watermark = tonumber(ARGV[4])

local own = redis.call('hget', held, holder)
if own then
    local machine_id, stamp = parse(own)
    if machine_id and stamp then
        hold(holder, machine_id, math.max(stamp, watermark))
        -- The stamp is this claim's own watermark: the floor it found is kept apart.
        return {machine_id, tonumber(redis.call('hget', floors, holder)) or stamp, 0}
    end
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
        redis.call('hset', floors, holder, stamp)
        return {machine_id, stamp, 1}
    end
end

if not redis.call('get', adder) then
    redis.call('set', adder, -1)
end
while tonumber(redis.call('get', adder)) < max_machine_id do
    local machine_id = redis.call('incr', adder)
    if not holders[machine_id] then
        hold(holder, machine_id, watermark)
        redis.call('hset', floors, holder, 0)
        return {machine_id, 0, 2}
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
        redis.call('hset', floors, holder, stamp)
        return {machine_id, stamp, 3}
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
        ];
        let answer = self
            .transport
            .eval(CLAIM_LUA, &hash_tag(&holder.namespace), &args)?;
        let how = match answer.as_slice() {
            [-1, -1, -1] => return Ok(ClaimOutcome::Exhausted),
            [_, _, 0] => ClaimedHow::Own,
            [_, _, 1] => ClaimedHow::Released,
            [_, _, 2] => ClaimedHow::New,
            [_, _, 3] => ClaimedHow::Expired,
            other => return Err(malformed("claim", other)),
        };
        let (machine_id, previous_stamp) = (answer[0], answer[1]);
        if machine_id < 0 || machine_id as u64 > max_machine_id {
            return Err(malformed("claim", &answer));
        }
        Ok(ClaimOutcome::Claimed {
            machine_id: machine_id as u32,
            how,
            previous_watermark_ms: previous_stamp,
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
        let mut store = store(vec![Ok(vec![5, NOW_MS - 7, 1]), Ok(vec![-1, -1, -1])]);
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
                (NOW_MS + 4_000).to_string()
            ]
        );
        assert_eq!(
            store.claim(&holder(10), 4_000, 0xab, NOW_MS).unwrap(),
            ClaimOutcome::Exhausted
        );
    }

    #[test]
    fn answers_outside_the_protocol_are_errors() {
        for answer in [vec![2048, 0, 2], vec![1, 0, 9], vec![1], vec![]] {
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
