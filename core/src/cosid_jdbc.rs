//! Machine ids from CosId's JDBC distributor table, `cosid_machine`, shared with Java services
//! that use CosId (`cosid.distributor = 'cosid_jdbc'`): a [`LeaseStore`] over the same
//! transport as cosid's own protocol.
//!
//! What Java instances can see is done as CosId does it: the same rows (`name` is the namespace,
//! a dot and the machine id padded to eight digits), the same order of a claim (a row this claim
//! holds already, then a released or expired one, then `max(machine_id) + 1`), `last_timestamp`
//! in milliseconds, `instance_id = ''` for a released row. Where they cannot see it, cosid is
//! stricter:
//! - A row is taken only by a compare-and-set on the exact row read (its holder and its
//!   `last_timestamp`), and a new one by `INSERT ... ON CONFLICT DO NOTHING`: the race between
//!   two new machine ids is a retry, not an error.
//! - The holder column carries the claim's token (`cosid-<token>@<instance id>`): a claim is
//!   never mistaken for another server's or an earlier life's that has the same instance id.
//! - A claim and each renewal write as `last_timestamp` the watermark: a time no id issued under
//!   that write reaches (the session stops generating before it). A Java instance that takes the
//!   row once it has expired by its own clock, or a release that puts back the millisecond after
//!   the last id issued, is thus past every id cosid issued under it.
//! - A row held by a Java instance is never taken when it expires, only when it is released: CosId
//!   keeps generating after its renewals fail (its guarder only reports the failure), so an
//!   expired Java row may still be in use. Rows cosid held expire as CosId's do.
//! - A machine id beyond the claimer's machine bits is passed over, not taken.
//! - A row counts only under the name CosId's key gives its machine id, and only while no other
//!   row of the namespace has that machine id: anyone with CosId's grants can rename a row or
//!   write a second one. A renewal (and a claim of its own row) checks both, so a holder whose
//!   row was renamed, or given a twin, stops at its next renewal; a claim passes such a machine
//!   id over instead of retrying it for good.
//! - The database has cosid's lease store too (`lease_store.sql`), and a row is taken (the
//!   claim's own one too) only as cosid's own store would hand one out: not while the store settles
//!   after its identity changed (a promotion, a point-in-time recovery, a restore, a start of its
//!   server: it may have forgotten claims whose holders still generate), and with the ids above
//!   the floor of that change (`cosid.cosid_machine_settles_at()`). The check is made before the
//!   claim's writes and again in each of them.
//!
//! Times are the claimer's wall clock, as in CosId: `now_ms` is read from the clock the store
//! was given, the server's.

use crate::protocol::{
    bigint, machine_id, text, token_text, Call, ClaimOutcome, ClaimedHow, Holder, Kind, LeaseStore,
    MalformedAnswer, Param, Readiness, Renewed, SqlTransport, StoreError, Value,
};
use std::time::Duration;

/// The table, with its schema: the workers run with `search_path = pg_catalog, pg_temp`.
pub const TABLE: &str = "public.cosid_machine";

/// The longest value of `cosid_machine.instance_id` (its type is `varchar(100)`).
pub const INSTANCE_ID_COLUMN_LEN: usize = 100;

/// What fixes a store without the table, for `cosid.status` and the server log.
pub const NOT_SET_UP: &str = "waiting for CosId's machine-id table public.cosid_machine in \
     cosid.lease_store: create it as the documentation \"With CosId services\" says (its seven \
     columns, and the primary key on name)";

/// What fixes a store without cosid's lease store beside the table, or whose role may not use it.
pub const NO_STORE_IDENTITY: &str = "waiting for cosid's lease store of version 0.5.0 in the \
     database of public.cosid_machine, which tells when that database may have forgotten claims \
     (cosid.cosid_machine_settles_at(bigint)): install lease_store.sql there and grant \
     cosid_lease_holder to the role of cosid.lease_store, as the documentation \"With CosId \
     services\" says";

const READINESS_SQL: &str = "SELECT pg_catalog.to_regclass('public.cosid_machine') IS NOT NULL \
     AND (SELECT pg_catalog.count(*) FROM pg_catalog.pg_attribute a \
     WHERE a.attrelid = pg_catalog.to_regclass('public.cosid_machine') AND a.attnum > 0 \
     AND NOT a.attisdropped AND a.attname = ANY (ARRAY['name', 'namespace', 'machine_id', \
     'last_timestamp', 'instance_id', 'distribute_time', 'revert_time']::pg_catalog.name[])) = 7 \
     AND EXISTS (SELECT FROM pg_catalog.pg_index i JOIN pg_catalog.pg_attribute a \
     ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] \
     WHERE i.indrelid = pg_catalog.to_regclass('public.cosid_machine') AND i.indisunique \
     AND i.indnkeyatts = 1 AND i.indpred IS NULL AND a.attname = 'name'), \
     EXISTS (SELECT FROM pg_catalog.pg_proc p \
     JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace \
     WHERE n.nspname = 'cosid' AND p.proname = 'cosid_machine_settles_at' \
     AND p.proargtypes = '20'::pg_catalog.oidvector \
     AND pg_catalog.has_schema_privilege(n.oid, 'USAGE') \
     AND pg_catalog.has_function_privilege(p.oid, 'EXECUTE'))";

/// Until when the store settles, the floor of a row taken now, the store's clock, and how far
/// ahead of it a holder's clock may run.
const SETTLES_SQL: &str = "SELECT s.settles_at_ms, s.floor_ms, s.now_ms, s.max_clock_lead_ms \
     FROM cosid.cosid_machine_settles_at($1::pg_catalog.int8) s";

/// The store's check inside a write, given the parameters of the safe guard, the watermark and
/// whether the holder still generates: nothing is written from a clock further ahead of the
/// store's than it allows (the floor of a settling counts on that bound), nor while the store
/// settles, unless the holder still generates under renewals the store acknowledged (nobody
/// could take its row meanwhile), as `cosid.lease_renew()` decides for cosid's own leases.
macro_rules! store_allows {
    ($safe_guard:literal, $watermark:literal, $live:literal) => {
        concat!(
            "EXISTS (SELECT FROM cosid.cosid_machine_settles_at(",
            $safe_guard,
            "::pg_catalog.int8) s WHERE ",
            $watermark,
            "::pg_catalog.int8 - ",
            $safe_guard,
            "::pg_catalog.int8 - s.now_ms <= s.max_clock_lead_ms AND (",
            $live,
            "::pg_catalog.bool OR s.settles_at_ms <= s.now_ms))"
        )
    };
}

/// That the row `m` is the one CosId's key names for its machine id, and the only row of its
/// namespace with that machine id. Anyone with CosId's grants (`SELECT, INSERT, UPDATE` on the
/// table) can rename a row, or write a second one for a machine id: a holder whose row is no
/// longer so stops at its next renewal, and a claim passes such a machine id over, since which
/// row tells its history is unknown.
macro_rules! row_alone {
    () => {
        "m.name = m.namespace || '.' || CASE WHEN m.machine_id BETWEEN 0 AND 99999999 \
         THEN pg_catalog.lpad(m.machine_id::pg_catalog.text, 8, '0') \
         ELSE m.machine_id::pg_catalog.text END \
         AND NOT EXISTS (SELECT FROM public.cosid_machine o WHERE o.namespace = m.namespace \
         AND o.machine_id = m.machine_id AND o.name <> m.name)"
    };
}

const OWN_SQL: &str = concat!(
    "SELECT m.machine_id::pg_catalog.int4, m.last_timestamp::pg_catalog.int8 \
     FROM public.cosid_machine m WHERE m.namespace = $1::pg_catalog.text \
     AND m.instance_id = $2::pg_catalog.text AND m.last_timestamp > $3::pg_catalog.int8 AND ",
    row_alone!()
);

const GUARD_SQL: &str = concat!(
    "UPDATE public.cosid_machine m SET last_timestamp = $1::pg_catalog.int8 \
     WHERE m.namespace = $2::pg_catalog.text AND m.instance_id = $3::pg_catalog.text \
     AND m.machine_id = $4::pg_catalog.int4 AND ",
    row_alone!(),
    " AND ",
    store_allows!("$5", "$1", "$6"),
    " RETURNING m.machine_id::pg_catalog.int4"
);

const FREE_SQL: &str = concat!(
    "SELECT m.machine_id::pg_catalog.int4, m.last_timestamp::pg_catalog.int8, \
     m.instance_id::pg_catalog.text FROM public.cosid_machine m \
     WHERE m.namespace = $1::pg_catalog.text \
     AND (m.instance_id = '' OR m.last_timestamp <= $2::pg_catalog.int8) AND ",
    row_alone!(),
    " ORDER BY m.machine_id"
);

const TAKE_SQL: &str = concat!(
    "UPDATE public.cosid_machine m \
     SET instance_id = $1::pg_catalog.text, last_timestamp = $2::pg_catalog.int8, \
     distribute_time = $3::pg_catalog.int8 WHERE m.name = $4::pg_catalog.text \
     AND (m.instance_id = '' OR m.last_timestamp <= $5::pg_catalog.int8) \
     AND m.instance_id = $6::pg_catalog.text AND m.last_timestamp = $7::pg_catalog.int8 AND ",
    row_alone!(),
    " AND ",
    store_allows!("$8", "$2", "false"),
    " RETURNING m.machine_id::pg_catalog.int4"
);

const NEXT_SQL: &str = "SELECT COALESCE(pg_catalog.max(machine_id) + 1, 0)::pg_catalog.int8 \
     FROM public.cosid_machine WHERE namespace = $1::pg_catalog.text";

const INSERT_SQL: &str = concat!(
    "INSERT INTO public.cosid_machine (name, namespace, machine_id, \
     last_timestamp, instance_id, distribute_time, revert_time) \
     SELECT $1::pg_catalog.text, $2::pg_catalog.text, $3::pg_catalog.int4, \
     $4::pg_catalog.int8, $5::pg_catalog.text, $6::pg_catalog.int8, 0 WHERE NOT EXISTS \
     (SELECT FROM public.cosid_machine o WHERE o.namespace = $2::pg_catalog.text \
     AND o.machine_id = $3::pg_catalog.int4) AND ",
    store_allows!("$7", "$4", "false"),
    " ON CONFLICT (name) DO NOTHING \
     RETURNING machine_id::pg_catalog.int4"
);

const RELEASE_SQL: &str = "UPDATE public.cosid_machine \
     SET instance_id = '', last_timestamp = $1::pg_catalog.int8, revert_time = $2::pg_catalog.int8 \
     WHERE namespace = $3::pg_catalog.text AND instance_id = $4::pg_catalog.text \
     RETURNING machine_id::pg_catalog.int4";

/// The row's key, as CosId makes it: the namespace, a dot, the machine id padded to 8 digits.
pub fn row_name(namespace: &str, machine_id: u32) -> String {
    format!("{namespace}.{machine_id:08}")
}

/// What this claim writes as `instance_id`: the token, then as much of the instance id as fits.
pub fn holder_text(instance_id: &str, token: u64) -> String {
    let mut text = format!("cosid-{}@", token_text(token));
    for c in instance_id.chars() {
        if text.len() + c.len_utf8() > INSTANCE_ID_COLUMN_LEN {
            break;
        }
        text.push(c);
    }
    text
}

/// Whether a holder of `cosid_machine` is a claim of cosid's (see [`holder_text`]).
pub fn held_by_cosid(instance_id: &str) -> bool {
    instance_id
        .strip_prefix("cosid-")
        .and_then(|rest| rest.get(..17))
        .is_some_and(|token| {
            token.ends_with('@') && token[..16].bytes().all(|b| b.is_ascii_hexdigit())
        })
}

/// CosId's JDBC distributor table over a transport, with the claimer's clock.
pub struct CosidJdbc<T> {
    pub transport: T,
    /// The wall clock, Unix ms.
    pub now_ms: fn() -> i64,
}

/// A row a claim may take: released, or expired and held by cosid.
struct FreeRow {
    machine_id: u32,
    last_timestamp: i64,
    holder: String,
}

impl<T: SqlTransport> CosidJdbc<T> {
    fn rows(&mut self, sql: &'static str, params: Vec<Param>, columns: &'static [Kind]) -> Answer {
        self.transport.run(&Call {
            sql,
            params,
            columns,
        })
    }

    /// The row this claim holds already (its answer was lost): renewed, as CosId does, once
    /// the store has settled. Not before: that it has not expired is judged by this claimer's
    /// clock, and a claimer whose clock runs ahead of it may have taken it in a history the
    /// store forgot.
    fn own(
        &mut self,
        holder: &Holder,
        held_by: &str,
        safe_guard_ms: u64,
        safe_guard_at: i64,
        watermark_ms: i64,
    ) -> Result<Option<(u32, i64)>, StoreError> {
        let rows = self.rows(
            OWN_SQL,
            vec![
                Param::Text(holder.namespace.clone()),
                Param::Text(held_by.to_string()),
                Param::BigInt(safe_guard_at),
            ],
            &[Kind::Int, Kind::BigInt],
        )?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let machine_id = machine_id(&row[0], holder.machine_bits).map_err(unexpected)?;
        let last_timestamp = bigint(&row[1], "last_timestamp").map_err(unexpected)?;
        let guarded = self.rows(
            GUARD_SQL,
            vec![
                Param::BigInt(watermark_ms.max(last_timestamp)),
                Param::Text(holder.namespace.clone()),
                Param::Text(held_by.to_string()),
                Param::Int(machine_id as i32),
                Param::BigInt(bounded_ms(safe_guard_ms)),
                Param::Bool(false),
            ],
            &[Kind::Int],
        )?;
        Ok((!guarded.is_empty()).then_some((machine_id, last_timestamp)))
    }

    fn free_rows(
        &mut self,
        holder: &Holder,
        safe_guard_at: i64,
    ) -> Result<Vec<FreeRow>, StoreError> {
        let max = max_machine_id(holder.machine_bits);
        let rows = self.rows(
            FREE_SQL,
            vec![
                Param::Text(holder.namespace.clone()),
                Param::BigInt(safe_guard_at),
            ],
            &[Kind::Int, Kind::BigInt, Kind::Text],
        )?;
        let mut free = Vec::new();
        for row in &rows {
            let (Value::Int(id), last_timestamp, holder_text) = (&row[0], &row[1], &row[2]) else {
                return Err(malformed("a machine id that is not an integer"));
            };
            let holder_text = text(holder_text, "instance_id").map_err(unexpected)?;
            let takeable = holder_text.is_empty() || held_by_cosid(holder_text);
            if *id >= 0 && (*id as u64) <= max && takeable {
                free.push(FreeRow {
                    machine_id: *id as u32,
                    last_timestamp: bigint(last_timestamp, "last_timestamp").map_err(unexpected)?,
                    holder: holder_text.to_string(),
                });
            }
        }
        Ok(free)
    }

    /// What cosid's lease store beside the table says of a released, new or expired row taken
    /// now with this watermark: not while this claimer's clock runs further ahead of the
    /// store's than it allows, nor while the store may have forgotten claims; else the floor
    /// its ids must stay above (0: none), or else the claim's outcome. A floor ahead of this
    /// claimer's clock settles for it too: every row taken now would be given back, and the next
    /// claim take another.
    fn settled(
        &mut self,
        safe_guard_ms: u64,
        watermark_ms: i64,
        now_ms: i64,
    ) -> Result<Result<i64, ClaimOutcome>, StoreError> {
        let rows = self.rows(
            SETTLES_SQL,
            vec![Param::BigInt(bounded_ms(safe_guard_ms))],
            &[Kind::BigInt, Kind::BigInt, Kind::BigInt, Kind::BigInt],
        )?;
        let [row] = rows.as_slice() else {
            return Err(store_identity_malformed("no settling answer"));
        };
        let number = |index: usize, what| {
            row.get(index)
                .ok_or_else(|| store_identity_malformed("a short settling answer"))
                .and_then(|value| {
                    bigint(value, what).map_err(|why| store_identity_malformed(why.what()))
                })
        };
        let (settles_at_ms, floor_ms, store_now_ms, allowed_lead_ms) = (
            number(0, "settles_at_ms")?,
            number(1, "floor_ms")?,
            number(2, "now_ms")?,
            number(3, "max_clock_lead_ms")?,
        );
        let lead_ms = watermark_ms
            .saturating_sub(bounded_ms(safe_guard_ms))
            .saturating_sub(store_now_ms);
        Ok(if lead_ms > allowed_lead_ms {
            Err(ClaimOutcome::ClockAhead {
                allowed_ms: allowed_lead_ms,
                store_now_ms,
            })
        } else if settles_at_ms > store_now_ms {
            Err(ClaimOutcome::Settling { settles_at_ms })
        } else if floor_ms > now_ms {
            Err(ClaimOutcome::Settling {
                settles_at_ms: store_now_ms.saturating_add(floor_ms - now_ms),
            })
        } else {
            Ok(floor_ms)
        })
    }

    fn take(
        &mut self,
        holder: &Holder,
        held_by: &str,
        row: &FreeRow,
        now_ms: i64,
        safe_guard_ms: u64,
        watermark_ms: i64,
    ) -> Result<bool, StoreError> {
        let safe_guard_at = safe_guard_at(now_ms, safe_guard_ms);
        let taken = self.rows(
            TAKE_SQL,
            vec![
                Param::Text(held_by.to_string()),
                Param::BigInt(watermark_ms),
                Param::BigInt(now_ms),
                Param::Text(row_name(&holder.namespace, row.machine_id)),
                Param::BigInt(safe_guard_at),
                Param::Text(row.holder.clone()),
                Param::BigInt(row.last_timestamp),
                Param::BigInt(bounded_ms(safe_guard_ms)),
            ],
            &[Kind::Int],
        )?;
        Ok(!taken.is_empty())
    }

    /// A new machine id, `max(machine_id) + 1` of the namespace.
    fn insert_next(
        &mut self,
        holder: &Holder,
        held_by: &str,
        now_ms: i64,
        safe_guard_ms: u64,
        watermark_ms: i64,
    ) -> Result<NewMachineId, StoreError> {
        let rows = self.rows(
            NEXT_SQL,
            vec![Param::Text(holder.namespace.clone())],
            &[Kind::BigInt],
        )?;
        let next = match rows.as_slice() {
            [row] => bigint(&row[0], "next machine id").map_err(unexpected)?,
            _ => return Err(malformed("no next machine id")),
        };
        if next < 0 || next as u64 > max_machine_id(holder.machine_bits) {
            return Ok(NewMachineId::NoneLeft);
        }
        let machine_id = next as u32;
        let inserted = self.rows(
            INSERT_SQL,
            vec![
                Param::Text(row_name(&holder.namespace, machine_id)),
                Param::Text(holder.namespace.clone()),
                Param::Int(machine_id as i32),
                Param::BigInt(watermark_ms),
                Param::Text(held_by.to_string()),
                Param::BigInt(now_ms),
                Param::BigInt(bounded_ms(safe_guard_ms)),
            ],
            &[Kind::Int],
        )?;
        Ok(if inserted.is_empty() {
            NewMachineId::Raced
        } else {
            NewMachineId::Inserted(machine_id)
        })
    }
}

type Answer = Result<Vec<Vec<Value>>, StoreError>;

enum NewMachineId {
    Inserted(u32),
    /// `max(machine_id) + 1` is past the machine bits.
    NoneLeft,
    /// Another claim inserted the same one first.
    Raced,
}

fn max_machine_id(machine_bits: u32) -> u64 {
    (1u64 << machine_bits) - 1
}

/// A duration in milliseconds as the store's bigint.
fn bounded_ms(ms: u64) -> i64 {
    ms.min(i64::MAX as u64) as i64
}

/// CosId's `safeGuardAt`: rows last written at or before it have expired, by this clock.
fn safe_guard_at(now_ms: i64, safe_guard_ms: u64) -> i64 {
    now_ms.saturating_sub(bounded_ms(safe_guard_ms)).max(0)
}

fn store_identity_malformed(what: &str) -> StoreError {
    StoreError::failed(format!(
        "cosid.cosid_machine_settles_at() in the database of public.cosid_machine answered {what} \
         (is it cosid's lease store of version 0.5.0?)"
    ))
}

fn malformed(what: &str) -> StoreError {
    StoreError::failed(format!(
        "CosId's table public.cosid_machine answered {what} (is it CosId's machine-id table?)"
    ))
}

/// An answer of the table that is not what its columns promise, said as CosId's table's.
fn unexpected(why: MalformedAnswer) -> StoreError {
    malformed(why.what())
}

impl<T: SqlTransport> LeaseStore for CosidJdbc<T> {
    fn is_remote(&self) -> bool {
        self.transport.is_remote()
    }

    fn set_timeout(&mut self, timeout: Duration) {
        self.transport.set_timeout(timeout)
    }

    fn take_notice(&mut self) -> Option<String> {
        self.transport.take_notice()
    }

    fn readiness(&mut self) -> Result<Readiness, StoreError> {
        match self.rows(READINESS_SQL, Vec::new(), &[Kind::Bool, Kind::Bool]) {
            Ok(rows) => match rows.as_slice() {
                [row] => match row.as_slice() {
                    [Value::Bool(false), _] => Ok(Readiness::NotSetUp(NOT_SET_UP)),
                    [Value::Bool(true), Value::Bool(false)] => {
                        Ok(Readiness::NotSetUp(NO_STORE_IDENTITY))
                    }
                    [Value::Bool(true), Value::Bool(true)] => Ok(Readiness::Ready),
                    _ => Err(malformed("its readiness check with no answer")),
                },
                _ => Err(malformed("its readiness check with no answer")),
            },
            Err(StoreError::ReadOnly) => Ok(Readiness::ReadOnly),
            Err(other) => Err(other),
        }
    }

    /// CosId's order: the row this claim holds already, then a released or expired one (the
    /// lowest machine id first), then a new one. Expiry is by this claimer's clock, as in CosId.
    /// Before any of them, cosid's lease store is asked whether it settled (a read Java
    /// instances cannot see).
    fn claim(
        &mut self,
        holder: &Holder,
        safe_guard_ms: u64,
        token: u64,
        watermark_ms: i64,
    ) -> Result<ClaimOutcome, StoreError> {
        let now_ms = (self.now_ms)();
        let safe_guard_at = safe_guard_at(now_ms, safe_guard_ms);
        let held_by = holder_text(&holder.instance_id, token);
        let claimed = |machine_id, how, previous_watermark_ms| ClaimOutcome::Claimed {
            machine_id,
            how,
            previous_watermark_ms,
            expires_at_ms: now_ms.saturating_add(safe_guard_ms as i64),
            store_now_ms: now_ms,
        };
        let floor_ms = match self.settled(safe_guard_ms, watermark_ms, now_ms)? {
            Ok(floor_ms) => floor_ms,
            Err(outcome) => return Ok(outcome),
        };
        if let Some((machine_id, last_timestamp)) =
            self.own(holder, &held_by, safe_guard_ms, safe_guard_at, watermark_ms)?
        {
            return Ok(claimed(
                machine_id,
                ClaimedHow::Own,
                last_timestamp.max(floor_ms),
            ));
        }
        let free = self.free_rows(holder, safe_guard_at)?;
        for row in &free {
            if self.take(holder, &held_by, row, now_ms, safe_guard_ms, watermark_ms)? {
                let how = if row.holder.is_empty() {
                    ClaimedHow::Released
                } else {
                    ClaimedHow::Expired
                };
                return Ok(claimed(
                    row.machine_id,
                    how,
                    row.last_timestamp.max(floor_ms),
                ));
            }
        }
        if !free.is_empty() {
            // Taken by other claims between the read and the writes.
            return Ok(ClaimOutcome::Contended);
        }
        match self.insert_next(holder, &held_by, now_ms, safe_guard_ms, watermark_ms)? {
            NewMachineId::Inserted(machine_id) => {
                Ok(claimed(machine_id, ClaimedHow::New, floor_ms))
            }
            NewMachineId::NoneLeft => Ok(ClaimOutcome::Exhausted),
            NewMachineId::Raced => Ok(ClaimOutcome::Contended),
        }
    }

    /// CosId's guard, writing the watermark: `None` when the row is no longer this claim's, or
    /// when cosid's lease store beside the table refuses it (see [`store_allows`]).
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
        let rows = self.rows(
            GUARD_SQL,
            vec![
                Param::BigInt(watermark_ms),
                Param::Text(holder.namespace.clone()),
                Param::Text(holder_text(&holder.instance_id, token)),
                Param::Int(machine_id as i32),
                Param::BigInt(bounded_ms(safe_guard_ms)),
                Param::LiveBefore(live_until_ms),
            ],
            &[Kind::Int],
        )?;
        Ok((!rows.is_empty()).then_some(Renewed {
            expires_at_ms: now_ms.saturating_add(safe_guard_ms as i64),
            store_now_ms: now_ms,
        }))
    }

    /// CosId's revert of a claimer that is not stable, with the millisecond after the last id
    /// issued: CosId's next holder waits only until its clock reaches `last_timestamp`, and may
    /// issue ids in that very millisecond.
    fn release(
        &mut self,
        holder: &Holder,
        _machine_id: u32,
        token: u64,
        watermark_ms: i64,
    ) -> Result<bool, StoreError> {
        let rows = self.rows(
            RELEASE_SQL,
            vec![
                Param::BigInt(watermark_ms.saturating_add(1)),
                Param::BigInt((self.now_ms)()),
                Param::Text(holder.namespace.clone()),
                Param::Text(holder_text(&holder.instance_id, token)),
            ],
            &[Kind::Int],
        )?;
        Ok(!rows.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// A transport that answers each statement from a script and records them.
    #[derive(Default)]
    struct Scripted {
        answers: VecDeque<Answer>,
        sent: Vec<Call>,
    }

    impl SqlTransport for Scripted {
        fn is_remote(&self) -> bool {
            true
        }
        fn set_timeout(&mut self, _timeout: Duration) {}
        fn run(&mut self, call: &Call) -> Answer {
            self.sent.push(call.clone());
            self.answers.pop_front().unwrap_or(Ok(Vec::new()))
        }
    }

    const NOW_MS: i64 = 1_700_000_000_000;

    fn store(answers: Vec<Answer>) -> CosidJdbc<Scripted> {
        CosidJdbc {
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

    fn free(rows: &[(i32, i64, &str)]) -> Answer {
        Ok(rows
            .iter()
            .map(|(id, ts, by)| {
                vec![
                    Value::Int(*id),
                    Value::BigInt(*ts),
                    Value::Text(by.to_string()),
                ]
            })
            .collect())
    }

    fn returned(id: i32) -> Answer {
        Ok(vec![vec![Value::Int(id)]])
    }

    /// cosid's lease store beside the table: settled since long ago (or never changed).
    fn settled() -> Answer {
        settling(0, 0, NOW_MS)
    }

    /// The store's answer, with its default clock lead of 1 s.
    fn settling(settles_at_ms: i64, floor_ms: i64, store_now_ms: i64) -> Answer {
        Ok(vec![vec![
            Value::BigInt(settles_at_ms),
            Value::BigInt(floor_ms),
            Value::BigInt(store_now_ms),
            Value::BigInt(1_000),
        ]])
    }

    fn claim(store: &mut CosidJdbc<Scripted>, machine_bits: u32) -> ClaimOutcome {
        store
            .claim(&holder(machine_bits), 4_000, 0xab, NOW_MS + 4_000)
            .unwrap()
    }

    #[test]
    fn names_and_holders_are_written_as_cosid_reads_them() {
        assert_eq!(row_name("cosid", 1), "cosid.00000001");
        assert_eq!(row_name("cosid", 123_456_789), "cosid.123456789");
        let held = holder_text("db1:5432:77", 0xab);
        assert_eq!(held, "cosid-00000000000000ab@db1:5432:77");
        assert!(held_by_cosid(&held));
        let long = holder_text(&"é".repeat(100), u64::MAX);
        assert!(long.len() <= INSTANCE_ID_COLUMN_LEN && long.len() >= 98);
        assert!(held_by_cosid(&long));
        for java in [
            "10.0.0.5:4242",
            "",
            "cosid-xyz@a",
            "cosid-00000000000000ab",
            "Cosid-00000000000000ab@x",
        ] {
            assert!(!held_by_cosid(java), "{java}");
        }
    }

    #[test]
    fn a_claim_follows_cosids_order_own_then_free_then_new() {
        // No own row, no free row: max + 1 = 3, inserted.
        let mut new = store(vec![
            settled(),
            Ok(vec![]),
            free(&[]),
            Ok(vec![vec![Value::BigInt(3)]]),
            returned(3),
        ]);
        assert!(matches!(
            claim(&mut new, 10),
            ClaimOutcome::Claimed {
                machine_id: 3,
                how: ClaimedHow::New,
                previous_watermark_ms: 0,
                ..
            }
        ));
        let sent: Vec<_> = new.transport.sent.iter().map(|call| call.sql).collect();
        assert_eq!(sent, [SETTLES_SQL, OWN_SQL, FREE_SQL, NEXT_SQL, INSERT_SQL]);
        let insert = &new.transport.sent[4].params;
        assert_eq!(insert[0], Param::Text("orders.00000003".into()));
        assert_eq!(
            insert[3],
            Param::BigInt(NOW_MS + 4_000),
            "the watermark as last_timestamp"
        );
        assert_eq!(
            insert[4],
            Param::Text("cosid-00000000000000ab@db1:5432:77".into())
        );
        assert_eq!(
            insert[6],
            Param::BigInt(4_000),
            "checked again with the safe guard"
        );
        // The own row is renewed and kept, with its last timestamp to wait past.
        let mut own = store(vec![
            settled(),
            Ok(vec![vec![Value::Int(2), Value::BigInt(NOW_MS + 9)]]),
            returned(2),
        ]);
        assert!(matches!(
            claim(&mut own, 10),
            ClaimOutcome::Claimed { machine_id: 2, how: ClaimedHow::Own, previous_watermark_ms, .. }
                if previous_watermark_ms == NOW_MS + 9
        ));
        assert_eq!(
            own.transport.sent[1].params[2],
            Param::BigInt(NOW_MS - 4_000),
            "expiry by this clock"
        );
        assert_eq!(
            own.transport.sent[2].params[5],
            Param::Bool(false),
            "renewed only if the store settled"
        );
    }

    #[test]
    fn rows_java_holds_and_machine_ids_beyond_the_bits_are_passed_over() {
        let java_expired = (0, NOW_MS - 60_000, "10.0.0.5:4242");
        let too_wide = (9, NOW_MS - 60_000, "");
        let cosid_expired = (4, NOW_MS - 50_000, "cosid-00000000000000cd@db2");
        let mut store = store(vec![
            settled(),
            Ok(vec![]),
            free(&[java_expired, cosid_expired, too_wide]),
            returned(4),
        ]);
        assert!(matches!(
            claim(&mut store, 3),
            ClaimOutcome::Claimed { machine_id: 4, how: ClaimedHow::Expired, previous_watermark_ms, .. }
                if previous_watermark_ms == NOW_MS - 50_000
        ));
        let take = &store.transport.sent[3];
        assert_eq!(take.sql, TAKE_SQL);
        assert_eq!(take.params[3], Param::Text("orders.00000004".into()));
        assert_eq!(
            take.params[5],
            Param::Text("cosid-00000000000000cd@db2".into()),
            "the exact holder read"
        );
        assert_eq!(
            take.params[6],
            Param::BigInt(NOW_MS - 50_000),
            "and its exact last timestamp"
        );
    }

    #[test]
    fn lost_races_are_contended_and_a_full_namespace_exhausted() {
        let mut raced = store(vec![settled(), Ok(vec![]), free(&[(1, 5, "")]), Ok(vec![])]);
        assert_eq!(claim(&mut raced, 10), ClaimOutcome::Contended);
        let mut inserted_first = store(vec![
            settled(),
            Ok(vec![]),
            free(&[]),
            Ok(vec![vec![Value::BigInt(0)]]),
            Ok(vec![]),
        ]);
        assert_eq!(claim(&mut inserted_first, 10), ClaimOutcome::Contended);
        let mut full = store(vec![
            settled(),
            Ok(vec![]),
            free(&[(0, NOW_MS - 60_000, "10.0.0.5:4242")]),
            Ok(vec![vec![Value::BigInt(8)]]),
        ]);
        assert_eq!(claim(&mut full, 3), ClaimOutcome::Exhausted);
        assert_eq!(
            full.transport.sent.len(),
            4,
            "nothing inserted past the machine bits"
        );
    }

    #[test]
    fn renewals_and_releases_are_this_claims_only() {
        let mut store = store(vec![returned(2), Ok(vec![]), returned(2)]);
        let renewed = store
            .renew(&holder(10), 2, 0xab, 4_000, NOW_MS + 4_000, 77_000)
            .unwrap();
        assert_eq!(renewed.map(|r| r.store_now_ms), Some(NOW_MS));
        // The store decides, as the renewal runs, whether it comes from too far ahead or while
        // it settles from a holder that no longer generates.
        let guard = &store.transport.sent[0];
        assert_eq!(guard.sql, GUARD_SQL);
        assert_eq!(guard.params[4], Param::BigInt(4_000));
        assert_eq!(guard.params[5], Param::LiveBefore(77_000));
        assert!(GUARD_SQL.contains(
            "$1::pg_catalog.int8 - $5::pg_catalog.int8 - s.now_ms <= s.max_clock_lead_ms \
             AND ($6::pg_catalog.bool OR s.settles_at_ms <= s.now_ms)"
        ));
        assert_eq!(
            store
                .renew(&holder(10), 2, 0xab, 4_000, NOW_MS + 4_000, 0)
                .unwrap(),
            None
        );
        assert!(store.release(&holder(10), 2, 0xab, NOW_MS - 3).unwrap());
        let release = &store.transport.sent[2];
        assert_eq!(release.sql, RELEASE_SQL);
        assert_eq!(
            release.params[0],
            Param::BigInt(NOW_MS - 2),
            "the millisecond after the last id issued"
        );
        assert_eq!(
            release.params[3],
            Param::Text("cosid-00000000000000ab@db1:5432:77".into())
        );
    }

    #[test]
    fn a_store_without_the_table_or_cosids_store_says_how_to_make_it() {
        let mut store = store(vec![
            Ok(vec![vec![Value::Bool(false), Value::Bool(true)]]),
            Ok(vec![vec![Value::Bool(true), Value::Bool(false)]]),
            Ok(vec![vec![Value::Bool(true), Value::Bool(true)]]),
            Ok(vec![vec![Value::Bool(true)]]),
            Err(StoreError::ReadOnly),
        ]);
        assert_eq!(store.readiness().unwrap(), Readiness::NotSetUp(NOT_SET_UP));
        assert_eq!(
            store.readiness().unwrap(),
            Readiness::NotSetUp(NO_STORE_IDENTITY)
        );
        assert_eq!(store.readiness().unwrap(), Readiness::Ready);
        assert!(store.readiness().is_err(), "a short answer is not ready");
        assert_eq!(store.readiness().unwrap(), Readiness::ReadOnly);
    }

    #[test]
    fn while_the_store_settles_no_row_is_taken_not_even_the_claims_own() {
        // Settling: nothing read or written further, the claim's own row neither (that it has
        // not expired is this claimer's judgement, and a claimer ahead of it may have taken it
        // in the history the store forgot).
        let mut settling_store = store(vec![settling(NOW_MS + 3_000, NOW_MS + 4_000, NOW_MS - 50)]);
        assert_eq!(
            claim(&mut settling_store, 10),
            ClaimOutcome::Settling {
                settles_at_ms: NOW_MS + 3_000
            }
        );
        assert_eq!(settling_store.transport.sent.len(), 1);
        // Settled: the own row waits for the floor too.
        let mut own = store(vec![
            settling(NOW_MS - 2_000, NOW_MS - 1_000, NOW_MS),
            Ok(vec![vec![Value::Int(2), Value::BigInt(NOW_MS - 3_000)]]),
            returned(2),
        ]);
        assert!(matches!(
            claim(&mut own, 10),
            ClaimOutcome::Claimed { how: ClaimedHow::Own, previous_watermark_ms, .. }
                if previous_watermark_ms == NOW_MS - 1_000
        ));
        // Settled, but the floor is ahead of this claimer's clock: it waits until its clock
        // is past it, counted on the store's clock.
        let mut floor_ahead = store(vec![settling(NOW_MS - 10, NOW_MS + 990, NOW_MS - 5)]);
        assert_eq!(
            claim(&mut floor_ahead, 10),
            ClaimOutcome::Settling {
                settles_at_ms: NOW_MS + 985
            }
        );
        // Settled and past: a new row and a released one wait for the floor.
        let mut new = store(vec![
            settling(NOW_MS - 2_000, NOW_MS - 1_000, NOW_MS),
            Ok(vec![]),
            free(&[]),
            Ok(vec![vec![Value::BigInt(0)]]),
            returned(0),
        ]);
        assert!(matches!(
            claim(&mut new, 10),
            ClaimOutcome::Claimed { how: ClaimedHow::New, previous_watermark_ms, .. }
                if previous_watermark_ms == NOW_MS - 1_000
        ));
        let mut released = store(vec![
            settling(NOW_MS - 2_000, NOW_MS - 1_000, NOW_MS),
            Ok(vec![]),
            free(&[(1, NOW_MS - 5_000, "")]),
            returned(1),
        ]);
        assert!(matches!(
            claim(&mut released, 10),
            ClaimOutcome::Claimed { how: ClaimedHow::Released, previous_watermark_ms, .. }
                if previous_watermark_ms == NOW_MS - 1_000
        ));
        // A claimer whose clock runs further ahead of the store's than it allows takes nothing.
        let mut ahead = store(vec![settling(0, 0, NOW_MS - 1_001)]);
        assert_eq!(
            claim(&mut ahead, 10),
            ClaimOutcome::ClockAhead {
                allowed_ms: 1_000,
                store_now_ms: NOW_MS - 1_001
            }
        );
        assert_eq!(ahead.transport.sent.len(), 1);
        let mut within = store(vec![
            settling(0, 0, NOW_MS - 1_000),
            Ok(vec![]),
            free(&[(1, NOW_MS - 5_000, "")]),
            returned(1),
        ]);
        assert!(matches!(
            claim(&mut within, 10),
            ClaimOutcome::Claimed { machine_id: 1, .. }
        ));
        // The writes check both again, for a holder that does not generate yet.
        for sql in [TAKE_SQL, INSERT_SQL] {
            assert!(sql.contains("::pg_catalog.int8 - s.now_ms <= s.max_clock_lead_ms"));
            assert!(sql.contains("(false::pg_catalog.bool OR s.settles_at_ms <= s.now_ms)"));
        }
        // An answer that is not the store's is an error, never a claim.
        let mut odd = store(vec![Ok(vec![vec![Value::Null]])]);
        assert!(odd.claim(&holder(10), 4_000, 0xab, NOW_MS).is_err());
    }
}
