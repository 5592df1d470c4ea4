//! The lease protocol as the worker sends it, written once for both stores: the SQL text of each
//! call, its parameters in order, the types of its answer's columns, and one validating decoder
//! of the answer. The stores (SPI in the server's own database, tokio-postgres to a shared one)
//! only carry a [`Call`] and hand back its rows as [`Value`]s.
//!
//! The calls name every object with its schema and contain no operator, and the stores run them
//! with `search_path = pg_catalog, pg_temp`: nothing a role with CREATE on some schema defines
//! can be picked instead. An answer that is not exactly what the protocol promises (a NULL, a
//! wrong type, a machine id beyond the machine bits, an unknown outcome) is an error, never an
//! id.

use crate::layout::Layout;
use std::fmt;
use std::time::Duration;

/// What one holder asks of the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub namespace: String,
    pub machine_bits: u32,
    /// The whole id layout, as the store compares it between the servers of a namespace.
    pub layout: String,
    pub instance_id: String,
    pub stable: bool,
}

impl Holder {
    /// The holder of a generator with `layout`, in `namespace`.
    pub fn new(namespace: &str, layout: &Layout, instance_id: &str, stable: bool) -> Holder {
        Holder {
            namespace: namespace.to_string(),
            machine_bits: layout.machine_bits(),
            layout: layout_text(layout),
            instance_id: instance_id.to_string(),
            stable,
        }
    }
}

/// The layout as the store compares it: epoch, time unit and the three widths.
pub fn layout_text(layout: &Layout) -> String {
    format!(
        "epoch {} ms, {}, {}/{}/{} bits",
        layout.epoch_ms(),
        layout.time_unit().name(),
        layout.timestamp_bits(),
        layout.machine_bits(),
        layout.sequence_bits()
    )
}

/// A parameter of a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Param {
    Text(String),
    Int(i32),
    BigInt(i64),
    Bool(bool),
    /// A boolean the store decides as it sends the call, once connected: whether the call
    /// (bounded by its round-trip timeout) ends before this time on the monotonic clock (see
    /// [`live_before`]). A renewal says so of the holder's deadline: what matters is whether the
    /// holder still generates when the store runs the call, which can be long after the session
    /// made it (a connection tried host after host).
    LiveBefore(u64),
}

/// The value of [`Param::LiveBefore`] for a call sent at `now_ms` that takes at most
/// `round_trip_ms`.
pub fn live_before(deadline_ms: u64, now_ms: u64, round_trip_ms: u64) -> bool {
    now_ms.saturating_add(round_trip_ms) < deadline_ms
}

/// The SQL type of an answer's column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Text,
    Int,
    BigInt,
    Bool,
}

/// A value of an answer, read by the store as the column's [`Kind`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Null,
    Text(String),
    Int(i32),
    BigInt(i64),
    Bool(bool),
}

/// One call of the protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    pub sql: &'static str,
    pub params: Vec<Param>,
    /// The answer's columns, in order.
    pub columns: &'static [Kind],
}

/// Which protocol the store has installed (no privilege on it needed to ask): this version's
/// claim, and the claim of cosid 0.1.0, whose store this version's servers cannot use.
/// This version's store has the claim that answers `settling` and the renewal that says whether
/// the holder still generates (0.5.0: a store whose identity changed settles first); an older
/// one has one of the claims of 0.1.0 to 0.4.0 only.
///
/// The third column says whether the functions the session will call are cosid's: SECURITY
/// DEFINER functions owned by `cosid_lease_owner`, as the extension and `lease_store.sql` make
/// them. The lease worker of a server whose store is its own database runs as a superuser:
/// where `cosid.database` has no extension, its owner could otherwise create a schema `cosid`
/// with a `lease_claim` of their own and have the worker run it. A function that is SECURITY
/// DEFINER runs as its owner, never as the worker.
const READINESS_SQL: &str = "SELECT pg_catalog.to_regprocedure(\
    'cosid.lease_renew(text,integer,text,text,bigint,bigint,boolean)'::pg_catalog.text) \
    IS NOT NULL AND pg_catalog.to_regprocedure(\
    'cosid.lease_claim(text,integer,text,boolean,bigint,text,bigint,text,boolean)'::pg_catalog.text) \
    IS NOT NULL, pg_catalog.to_regprocedure(\
    'cosid.lease_claim(text,integer,text,boolean,bigint,text,bigint)'::pg_catalog.text) \
    IS NOT NULL, COALESCE((SELECT pg_catalog.bool_and(p.prosecdef \
    AND pg_catalog.nameeq(r.rolname, 'cosid_lease_owner')) \
    AND pg_catalog.int8eq(pg_catalog.count(p.oid), 3::pg_catalog.int8) \
    FROM pg_catalog.unnest(ARRAY[\
    pg_catalog.to_regprocedure('cosid.lease_claim(text,integer,text,boolean,bigint,text,bigint,text,boolean)'::pg_catalog.text), \
    pg_catalog.to_regprocedure('cosid.lease_renew(text,integer,text,text,bigint,bigint,boolean)'::pg_catalog.text), \
    pg_catalog.to_regprocedure('cosid.lease_release(text,integer,text,text,bigint)'::pg_catalog.text)\
    ]) f(oid) \
    JOIN pg_catalog.pg_proc p ON pg_catalog.oideq(p.oid, f.oid::pg_catalog.oid) \
    JOIN pg_catalog.pg_roles r ON pg_catalog.oideq(r.oid, p.proowner)), false)";
const READINESS_COLUMNS: &[Kind] = &[Kind::Bool, Kind::Bool, Kind::Bool];

/// What the store offers, as the readiness check finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreProtocol {
    /// This version's protocol.
    Current,
    /// Only an older version's protocol: the store needs its update script.
    Older,
    /// This version's functions, but not cosid's own: not SECURITY DEFINER functions of
    /// `cosid_lease_owner`. Never called.
    Untrusted,
    /// No protocol at all.
    Absent,
}

const CLAIM_SQL: &str = "SELECT outcome, machine_id, previous_watermark_ms, expires_at_ms, \
    store_now_ms FROM cosid.lease_claim($1, $2, $3, $4, $5, $6, $7, $8, $9)";
const CLAIM_COLUMNS: &[Kind] = &[
    Kind::Text,
    Kind::Int,
    Kind::BigInt,
    Kind::BigInt,
    Kind::BigInt,
];
const RENEW_SQL: &str =
    "SELECT expires_at_ms, store_now_ms FROM cosid.lease_renew($1, $2, $3, $4, $5, $6, $7)";
const RENEW_COLUMNS: &[Kind] = &[Kind::BigInt, Kind::BigInt];
const RELEASE_SQL: &str = "SELECT cosid.lease_release($1, $2, $3, $4, $5)";
const RELEASE_COLUMNS: &[Kind] = &[Kind::Bool];

/// The claim token as the store keeps it.
pub fn token_text(token: u64) -> String {
    format!("{token:016x}")
}

/// Which protocol the store has (see [`decode_readiness`]).
pub fn readiness() -> Call {
    Call {
        sql: READINESS_SQL,
        params: Vec::new(),
        columns: READINESS_COLUMNS,
    }
}

pub fn claim(holder: &Holder, safe_guard_ms: u64, token: u64, watermark_ms: i64) -> Call {
    Call {
        sql: CLAIM_SQL,
        params: vec![
            Param::Text(holder.namespace.clone()),
            Param::Int(holder.machine_bits as i32),
            Param::Text(holder.instance_id.clone()),
            Param::Bool(holder.stable),
            Param::BigInt(safe_guard_ms.min(i64::MAX as u64) as i64),
            Param::Text(token_text(token)),
            Param::BigInt(watermark_ms),
            Param::Text(holder.layout.clone()),
            // This version knows the outcome `settling`.
            Param::Bool(true),
        ],
        columns: CLAIM_COLUMNS,
    }
}

/// A renewal; `live_until_ms` is the holder's deadline on the monotonic clock (0 when it does
/// not generate): the store tells it whether the holder still generates when the call runs,
/// under renewals some store acknowledged (see `lease_renew` in lease_store.sql).
pub fn renew(
    holder: &Holder,
    machine_id: u32,
    token: u64,
    safe_guard_ms: u64,
    watermark_ms: i64,
    live_until_ms: u64,
) -> Call {
    Call {
        sql: RENEW_SQL,
        params: vec![
            Param::Text(holder.namespace.clone()),
            Param::Int(machine_id as i32),
            Param::Text(holder.instance_id.clone()),
            Param::Text(token_text(token)),
            Param::BigInt(safe_guard_ms.min(i64::MAX as u64) as i64),
            Param::BigInt(watermark_ms),
            Param::LiveBefore(live_until_ms),
        ],
        columns: RENEW_COLUMNS,
    }
}

pub fn release(holder: &Holder, machine_id: u32, token: u64, watermark_ms: i64) -> Call {
    Call {
        sql: RELEASE_SQL,
        params: vec![
            Param::Text(holder.namespace.clone()),
            Param::Int(machine_id as i32),
            Param::Text(holder.instance_id.clone()),
            Param::Text(token_text(token)),
            Param::BigInt(watermark_ms),
        ],
        columns: RELEASE_COLUMNS,
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// A machine id; the claimer must wait until its clock passes `previous_watermark_ms`.
    Claimed {
        machine_id: u32,
        how: ClaimedHow,
        previous_watermark_ms: i64,
        expires_at_ms: i64,
        store_now_ms: i64,
    },
    /// This instance's own lease is still live under another claim: it may be taken once it
    /// expires, at `expires_at_ms` by the store's clock.
    Busy { machine_id: u32, expires_at_ms: i64 },
    /// Every machine id of the namespace is held.
    Exhausted,
    /// Other claims kept changing the rows this one chose; try again.
    Contended,
    /// The store's identity changed (a promotion, a point-in-time recovery, a restore, a start
    /// of its server) and it
    /// hands out no machine id until `settles_at_ms`, by its clock: it may have forgotten
    /// claims whose holders still generate.
    Settling { settles_at_ms: i64 },
    /// A live lease of the namespace uses another layout (machine bits, or the rest).
    LayoutMismatch,
    /// The claimer's clock runs further ahead of the store's (`store_now_ms`) than the store
    /// allows (`allowed_ms`, its `max_clock_lead`).
    ClockAhead { allowed_ms: i64, store_now_ms: i64 },
}

/// Which kind of lease a claim took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimedHow {
    Own,
    Released,
    New,
    Expired,
}

impl ClaimedHow {
    pub fn name(self) -> &'static str {
        match self {
            ClaimedHow::Own => "own",
            ClaimedHow::Released => "released",
            ClaimedHow::New => "new",
            ClaimedHow::Expired => "expired",
        }
    }
}

impl fmt::Display for ClaimedHow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Renewed {
    pub expires_at_ms: i64,
    pub store_now_ms: i64,
}

/// An answer that is not what the protocol promises.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MalformedAnswer(String);

impl fmt::Display for MalformedAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the lease store answered {} ", self.0)?;
        f.write_str("(is the store's lease protocol the one of this version of cosid?)")
    }
}

impl MalformedAnswer {
    /// What was answered instead, without the hint about cosid's protocol.
    pub fn what(&self) -> &str {
        &self.0
    }
}

fn malformed(what: impl Into<String>) -> MalformedAnswer {
    MalformedAnswer(what.into())
}

/// The single row of a call's answer, with as many values as the call has columns.
fn single_row<'a>(
    call: &'static str,
    rows: &'a [Vec<Value>],
    columns: usize,
) -> Result<&'a [Value], MalformedAnswer> {
    match rows {
        [row] if row.len() == columns => Ok(row),
        [row] => Err(malformed(format!(
            "{call} with {} columns instead of {columns}",
            row.len()
        ))),
        _ => Err(malformed(format!(
            "{call} with {} rows instead of one",
            rows.len()
        ))),
    }
}

pub(crate) fn text<'a>(value: &'a Value, what: &str) -> Result<&'a str, MalformedAnswer> {
    match value {
        Value::Text(text) => Ok(text),
        Value::Null => Err(malformed(format!("no {what}"))),
        other => Err(malformed(format!("{what} {other:?}, not text"))),
    }
}

pub(crate) fn bigint(value: &Value, what: &str) -> Result<i64, MalformedAnswer> {
    match value {
        Value::BigInt(number) => Ok(*number),
        Value::Null => Err(malformed(format!("no {what}"))),
        other => Err(malformed(format!("{what} {other:?}, not a bigint"))),
    }
}

fn boolean(value: &Value, what: &str) -> Result<bool, MalformedAnswer> {
    match value {
        Value::Bool(flag) => Ok(*flag),
        Value::Null => Err(malformed(format!("no {what}"))),
        other => Err(malformed(format!("{what} {other:?}, not a boolean"))),
    }
}

/// A machine id that fits `machine_bits`.
pub(crate) fn machine_id(value: &Value, machine_bits: u32) -> Result<u32, MalformedAnswer> {
    let max = (1u64 << machine_bits) - 1;
    match value {
        Value::Int(id) if *id >= 0 && (*id as u64) <= max => Ok(*id as u32),
        Value::Int(id) => Err(malformed(format!(
            "machine id {id}, outside 0 to {max} ({machine_bits} machine bits)"
        ))),
        Value::Null => Err(malformed("no machine id")),
        other => Err(malformed(format!("machine id {other:?}, not an integer"))),
    }
}

/// The outcome of a claim made with `machine_bits`.
pub fn decode_claim(
    rows: &[Vec<Value>],
    machine_bits: u32,
) -> Result<ClaimOutcome, MalformedAnswer> {
    let row = single_row("the claim", rows, CLAIM_COLUMNS.len())?;
    let how = match text(&row[0], "claim outcome")? {
        "exhausted" => return Ok(ClaimOutcome::Exhausted),
        "contended" => return Ok(ClaimOutcome::Contended),
        "settling" => {
            return Ok(ClaimOutcome::Settling {
                settles_at_ms: bigint(&row[3], "end of the settling")?,
            })
        }
        "layout" => return Ok(ClaimOutcome::LayoutMismatch),
        "clock_ahead" => {
            return Ok(ClaimOutcome::ClockAhead {
                allowed_ms: bigint(&row[2], "clock lead allowed")?,
                store_now_ms: bigint(&row[4], "store time")?,
            })
        }
        "busy" => {
            return Ok(ClaimOutcome::Busy {
                machine_id: machine_id(&row[1], machine_bits)?,
                expires_at_ms: bigint(&row[3], "expiry")?,
            })
        }
        "own" => ClaimedHow::Own,
        "released" => ClaimedHow::Released,
        "new" => ClaimedHow::New,
        "expired" => ClaimedHow::Expired,
        other => {
            let shown: String = other.chars().take(40).collect();
            return Err(malformed(format!("the unknown claim outcome \"{shown}\"")));
        }
    };
    Ok(ClaimOutcome::Claimed {
        machine_id: machine_id(&row[1], machine_bits)?,
        how,
        previous_watermark_ms: bigint(&row[2], "previous watermark")?,
        expires_at_ms: bigint(&row[3], "expiry")?,
        store_now_ms: bigint(&row[4], "store time")?,
    })
}

/// A renewal: `None` when it matched no row (the lease is lost).
pub fn decode_renew(rows: &[Vec<Value>]) -> Result<Option<Renewed>, MalformedAnswer> {
    if rows.is_empty() {
        return Ok(None);
    }
    let row = single_row("the renewal", rows, RENEW_COLUMNS.len())?;
    Ok(Some(Renewed {
        expires_at_ms: bigint(&row[0], "expiry")?,
        store_now_ms: bigint(&row[1], "store time")?,
    }))
}

/// Whether the lease released was still this holder's.
pub fn decode_release(rows: &[Vec<Value>]) -> Result<bool, MalformedAnswer> {
    let row = single_row("the release", rows, RELEASE_COLUMNS.len())?;
    boolean(&row[0], "release result")
}

/// Which protocol is installed in the store.
pub fn decode_readiness(rows: &[Vec<Value>]) -> Result<StoreProtocol, MalformedAnswer> {
    let row = single_row("the protocol check", rows, READINESS_COLUMNS.len())?;
    let current = boolean(&row[0], "protocol check result")?;
    let older = boolean(&row[1], "older protocol check result")?;
    let cosids_own = boolean(&row[2], "protocol owner check result")?;
    Ok(match (current, older, cosids_own) {
        (true, _, true) => StoreProtocol::Current,
        (true, _, false) => StoreProtocol::Untrusted,
        (false, true, _) => StoreProtocol::Older,
        (false, false, _) => StoreProtocol::Absent,
    })
}

/// Why a call to the store brought no usable answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreError {
    /// No host of the store takes writes: it is read-only, not unreachable, and waiting for a
    /// writable primary is the fix.
    ReadOnly,
    /// Not reached, timed out, or the call failed; the sentence says why (never a password).
    Failed(String),
    /// It answered, but not as the protocol promises.
    Malformed(MalformedAnswer),
}

impl StoreError {
    pub fn failed(why: impl Into<String>) -> StoreError {
        StoreError::Failed(why.into())
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::ReadOnly => f.write_str(
                "every host of cosid.lease_store is read-only (a hot standby, or default_transaction_read_only on)",
            ),
            StoreError::Failed(why) => f.write_str(why),
            StoreError::Malformed(why) => why.fmt(f),
        }
    }
}

impl From<MalformedAnswer> for StoreError {
    fn from(why: MalformedAnswer) -> StoreError {
        StoreError::Malformed(why)
    }
}

/// Whether the store can be used yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    /// This server is a hot standby, and the store is its own (read-only) database.
    ReadOnly,
    /// `CREATE EXTENSION cosid` has not run in the database yet.
    NoExtension,
    /// The store has an older version's protocol: its update script has not run yet.
    Outdated,
    /// The store's protocol functions are not cosid's (see [`StoreProtocol::Untrusted`]).
    Untrusted,
    /// A store of another distributor lacks what it needs: the sentence says what, and how to
    /// make it.
    NotSetUp(&'static str),
}

/// A lease store as the lease session sees it, by meaning: whether it can be used, a claim of a
/// machine id, its renewal and its release. The session is the one home of the timing rules; a
/// store only answers. cosid's own protocol ([`CosidProtocol`]) is one implementation, carried
/// over SPI or the network by a [`SqlTransport`].
pub trait LeaseStore {
    /// Whether the store is another server's database.
    fn is_remote(&self) -> bool;
    /// The longest any one call may take.
    fn set_timeout(&mut self, timeout: Duration);
    /// What the store passed over since it was last asked, for the server log: a host of the
    /// connection string refused (an old primary). `None` when nothing was.
    fn take_notice(&mut self) -> Option<String> {
        None
    }
    /// Whether the store can be claimed from yet.
    fn readiness(&mut self) -> Result<Readiness, StoreError>;
    fn claim(
        &mut self,
        holder: &Holder,
        safe_guard_ms: u64,
        token: u64,
        watermark_ms: i64,
    ) -> Result<ClaimOutcome, StoreError>;
    /// `Ok(None)`: the lease is lost.
    fn renew(
        &mut self,
        holder: &Holder,
        machine_id: u32,
        token: u64,
        safe_guard_ms: u64,
        watermark_ms: i64,
        live_until_ms: u64,
    ) -> Result<Option<Renewed>, StoreError>;
    /// Whether the lease was still this holder's.
    fn release(
        &mut self,
        holder: &Holder,
        machine_id: u32,
        token: u64,
        watermark_ms: i64,
    ) -> Result<bool, StoreError>;
}

/// What carries cosid's protocol: its own database through SPI, or a shared one over the
/// network. A transport only carries a [`Call`] and hands back its rows, each value read as the
/// call's column says; the calls and the decoding of their answers are written once, here.
pub trait SqlTransport {
    /// Whether the store is another server's database.
    fn is_remote(&self) -> bool;
    /// The longest any one call may take.
    fn set_timeout(&mut self, timeout: Duration);
    /// Runs one call; its rows, each value read as the call's column says.
    fn run(&mut self, call: &Call) -> Result<Vec<Vec<Value>>, StoreError>;
    /// Whether the transport knows, without a call, that the store takes no writes (this
    /// server's own database during recovery).
    fn known_read_only(&mut self) -> bool {
        false
    }
    /// See [`LeaseStore::take_notice`].
    fn take_notice(&mut self) -> Option<String> {
        None
    }
}

/// cosid's own lease protocol (the functions `sql/lease_store.sql` installs) over a transport.
pub struct CosidProtocol<T>(pub T);

impl<T: SqlTransport> CosidProtocol<T> {
    /// Which version's protocol the store has.
    fn installed_protocol(&mut self) -> Result<Readiness, StoreError> {
        Ok(match decode_readiness(&self.0.run(&readiness())?)? {
            StoreProtocol::Current => Readiness::Ready,
            StoreProtocol::Older => Readiness::Outdated,
            StoreProtocol::Absent => Readiness::NoExtension,
            StoreProtocol::Untrusted => Readiness::Untrusted,
        })
    }
}

impl<T: SqlTransport> LeaseStore for CosidProtocol<T> {
    fn is_remote(&self) -> bool {
        self.0.is_remote()
    }

    fn set_timeout(&mut self, timeout: Duration) {
        self.0.set_timeout(timeout)
    }

    fn take_notice(&mut self) -> Option<String> {
        self.0.take_notice()
    }

    /// A store that takes no writes is read-only, not unreachable: `cosid.status` says so.
    fn readiness(&mut self) -> Result<Readiness, StoreError> {
        if self.0.known_read_only() {
            return Ok(Readiness::ReadOnly);
        }
        match self.installed_protocol() {
            Err(StoreError::ReadOnly) => Ok(Readiness::ReadOnly),
            other => other,
        }
    }

    fn claim(
        &mut self,
        holder: &Holder,
        safe_guard_ms: u64,
        token: u64,
        watermark_ms: i64,
    ) -> Result<ClaimOutcome, StoreError> {
        let rows = self
            .0
            .run(&claim(holder, safe_guard_ms, token, watermark_ms))?;
        Ok(decode_claim(&rows, holder.machine_bits)?)
    }

    fn renew(
        &mut self,
        holder: &Holder,
        machine_id: u32,
        token: u64,
        safe_guard_ms: u64,
        watermark_ms: i64,
        live_until_ms: u64,
    ) -> Result<Option<Renewed>, StoreError> {
        let call = renew(
            holder,
            machine_id,
            token,
            safe_guard_ms,
            watermark_ms,
            live_until_ms,
        );
        Ok(decode_renew(&self.0.run(&call)?)?)
    }

    fn release(
        &mut self,
        holder: &Holder,
        machine_id: u32,
        token: u64,
        watermark_ms: i64,
    ) -> Result<bool, StoreError> {
        let call = release(holder, machine_id, token, watermark_ms);
        Ok(decode_release(&self.0.run(&call)?)?)
    }
}

/// One store shared by the sessions of several generators in one process: each call borrows it
/// for its duration, and the process makes one call at a time.
impl<S: LeaseStore + ?Sized> LeaseStore for std::rc::Rc<std::cell::RefCell<S>> {
    fn is_remote(&self) -> bool {
        self.borrow().is_remote()
    }
    fn set_timeout(&mut self, timeout: Duration) {
        self.borrow_mut().set_timeout(timeout)
    }
    fn take_notice(&mut self) -> Option<String> {
        self.borrow_mut().take_notice()
    }
    fn readiness(&mut self) -> Result<Readiness, StoreError> {
        self.borrow_mut().readiness()
    }
    fn claim(
        &mut self,
        holder: &Holder,
        safe_guard_ms: u64,
        token: u64,
        watermark_ms: i64,
    ) -> Result<ClaimOutcome, StoreError> {
        self.borrow_mut()
            .claim(holder, safe_guard_ms, token, watermark_ms)
    }
    fn renew(
        &mut self,
        holder: &Holder,
        machine_id: u32,
        token: u64,
        safe_guard_ms: u64,
        watermark_ms: i64,
        live_until_ms: u64,
    ) -> Result<Option<Renewed>, StoreError> {
        self.borrow_mut().renew(
            holder,
            machine_id,
            token,
            safe_guard_ms,
            watermark_ms,
            live_until_ms,
        )
    }
    fn release(
        &mut self,
        holder: &Holder,
        machine_id: u32,
        token: u64,
        watermark_ms: i64,
    ) -> Result<bool, StoreError> {
        self.borrow_mut()
            .release(holder, machine_id, token, watermark_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder() -> Holder {
        Holder {
            namespace: "orders".into(),
            machine_bits: 3,
            layout: "1577203200000 millisecond 41/3/12".into(),
            instance_id: "db1:5432:7".into(),
            stable: false,
        }
    }

    fn claim_row(outcome: Value, machine_id: Value) -> Vec<Vec<Value>> {
        vec![vec![
            outcome,
            machine_id,
            Value::BigInt(100),
            Value::BigInt(5_000),
            Value::BigInt(1_000),
        ]]
    }

    #[test]
    fn calls_carry_their_parameters_in_order_and_no_operator() {
        let call = claim(&holder(), 4_000, 0xab, 9_000);
        assert_eq!(call.params.len(), 9);
        assert_eq!(call.params[8], Param::Bool(true));
        assert_eq!(call.params[5], Param::Text("00000000000000ab".into()));
        assert_eq!(call.params[6], Param::BigInt(9_000));
        let renewal = renew(&holder(), 5, 1, 4_000, 9_000, 12_345);
        assert_eq!(renewal.params.len(), 7);
        assert_eq!(renewal.params[6], Param::LiveBefore(12_345));
        // Decided as the call is sent: it must end before the deadline.
        assert!(live_before(12_345, 10_000, 2_000));
        assert!(!live_before(12_345, 10_345, 2_000));
        assert!(!live_before(12_345, 13_000, 0));
        assert!(!live_before(0, 0, 0));
        assert!(live_before(u64::MAX, u64::MAX - 1, 0));
        assert_eq!(release(&holder(), 5, 1, 9_000).params.len(), 5);
        for sql in [CLAIM_SQL, RENEW_SQL, RELEASE_SQL, READINESS_SQL] {
            for operator in ['*', '+', '-', '/', '<', '>', '=', '|', '~'] {
                assert!(!sql.contains(operator), "{sql} has {operator}");
            }
        }
        for (sql, count) in [(CLAIM_SQL, 9), (RENEW_SQL, 7), (RELEASE_SQL, 5)] {
            assert!(sql.contains(&format!("${count})")), "{sql}");
        }
    }

    #[test]
    fn claims_decode_every_outcome() {
        let rows = claim_row(Value::Text("new".into()), Value::Int(7));
        assert_eq!(
            decode_claim(&rows, 3),
            Ok(ClaimOutcome::Claimed {
                machine_id: 7,
                how: ClaimedHow::New,
                previous_watermark_ms: 100,
                expires_at_ms: 5_000,
                store_now_ms: 1_000
            })
        );
        for (text, how) in [
            ("own", ClaimedHow::Own),
            ("released", ClaimedHow::Released),
            ("expired", ClaimedHow::Expired),
        ] {
            let rows = claim_row(Value::Text(text.into()), Value::Int(1));
            assert!(matches!(
                decode_claim(&rows, 3),
                Ok(ClaimOutcome::Claimed { how: h, .. }) if h == how
            ));
        }
        let busy = claim_row(Value::Text("busy".into()), Value::Int(2));
        assert_eq!(
            decode_claim(&busy, 3),
            Ok(ClaimOutcome::Busy {
                machine_id: 2,
                expires_at_ms: 5_000
            })
        );
        for (text, outcome) in [
            ("exhausted", ClaimOutcome::Exhausted),
            ("contended", ClaimOutcome::Contended),
            ("layout", ClaimOutcome::LayoutMismatch),
        ] {
            let rows = vec![vec![
                Value::Text(text.into()),
                Value::Null,
                Value::Null,
                Value::Null,
                Value::BigInt(1),
            ]];
            assert_eq!(decode_claim(&rows, 3), Ok(outcome));
        }
        let settling = vec![vec![
            Value::Text("settling".into()),
            Value::Null,
            Value::Null,
            Value::BigInt(7_000),
            Value::BigInt(1),
        ]];
        assert_eq!(
            decode_claim(&settling, 3),
            Ok(ClaimOutcome::Settling {
                settles_at_ms: 7_000
            })
        );
        let clock_ahead = vec![vec![
            Value::Text("clock_ahead".into()),
            Value::Null,
            Value::BigInt(1_000),
            Value::Null,
            Value::BigInt(5_000),
        ]];
        assert_eq!(
            decode_claim(&clock_ahead, 3),
            Ok(ClaimOutcome::ClockAhead {
                allowed_ms: 1_000,
                store_now_ms: 5_000
            })
        );
        let settling_without_end = vec![vec![
            Value::Text("settling".into()),
            Value::Null,
            Value::Null,
            Value::Null,
            Value::BigInt(1),
        ]];
        assert!(decode_claim(&settling_without_end, 3).is_err());
    }

    #[test]
    fn malformed_claims_are_errors_not_ids() {
        let cases = [
            claim_row(Value::Text("new".into()), Value::Null),
            claim_row(Value::Text("new".into()), Value::Int(8)),
            claim_row(Value::Text("new".into()), Value::Int(-1)),
            claim_row(Value::Text("new".into()), Value::BigInt(1)),
            claim_row(Value::Text("busy".into()), Value::Int(9)),
            claim_row(Value::Text("stolen".into()), Value::Int(1)),
            claim_row(Value::Null, Value::Int(1)),
            claim_row(Value::Int(3), Value::Int(1)),
            vec![],
            vec![vec![Value::Text("new".into())]],
        ];
        for rows in cases {
            assert!(decode_claim(&rows, 3).is_err(), "{rows:?}");
        }
        let mut no_watermark = claim_row(Value::Text("released".into()), Value::Int(1));
        no_watermark[0][2] = Value::Null;
        let error = decode_claim(&no_watermark, 3).unwrap_err().to_string();
        assert!(error.contains("no previous watermark"), "{error}");
        let twice = [
            claim_row(Value::Text("new".into()), Value::Int(1)),
            claim_row(Value::Text("new".into()), Value::Int(2)),
        ]
        .concat();
        assert!(decode_claim(&twice, 3).is_err());
        let long = "x".repeat(10_000);
        let error = decode_claim(&claim_row(Value::Text(long), Value::Int(1)), 3)
            .unwrap_err()
            .to_string();
        assert!(error.len() < 300, "{error}");
    }

    #[test]
    fn renewals_and_releases() {
        assert_eq!(decode_renew(&[]), Ok(None));
        assert_eq!(
            decode_renew(&[vec![Value::BigInt(5), Value::BigInt(1)]]),
            Ok(Some(Renewed {
                expires_at_ms: 5,
                store_now_ms: 1
            }))
        );
        assert!(decode_renew(&[vec![Value::Null, Value::BigInt(1)]]).is_err());
        assert!(decode_renew(&[vec![Value::BigInt(5)]]).is_err());
        assert_eq!(decode_release(&[vec![Value::Bool(true)]]), Ok(true));
        assert_eq!(decode_release(&[vec![Value::Bool(false)]]), Ok(false));
        assert!(decode_release(&[vec![Value::Null]]).is_err());
        assert!(decode_release(&[]).is_err());
        let readiness = |current, older, own| {
            decode_readiness(&[vec![
                Value::Bool(current),
                Value::Bool(older),
                Value::Bool(own),
            ]])
        };
        assert_eq!(readiness(true, true, true), Ok(StoreProtocol::Current));
        assert_eq!(readiness(true, false, true), Ok(StoreProtocol::Current));
        assert_eq!(readiness(true, false, false), Ok(StoreProtocol::Untrusted));
        assert_eq!(readiness(false, true, false), Ok(StoreProtocol::Older));
        assert_eq!(readiness(false, false, false), Ok(StoreProtocol::Absent));
        assert!(decode_readiness(&[vec![Value::Bool(true)]]).is_err());
        assert!(
            decode_readiness(&[vec![Value::Null, Value::Bool(true), Value::Bool(true)]]).is_err()
        );
    }
}
