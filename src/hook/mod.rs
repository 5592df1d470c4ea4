//! The utility hook (`ProcessUtility_hook`), installed when the library is preloaded: it looks at
//! every utility statement before and after it runs, for the guards of cosid's data and for what
//! it says after a statement succeeded.
//!
//! - [`drop_extension`]: the guard of `DROP EXTENSION cosid` (and of every statement that can drop
//!   it: `DROP ... CASCADE`, `DROP OWNED`), which reads what the drop would lose before it runs and
//!   refuses it after, if the extension is gone and something was lost.
//! - [`lease_database`]: the refusal of `DROP DATABASE`, `ALTER DATABASE ... RENAME` and
//!   `ALLOW_CONNECTIONS false` of `cosid.database`, before they run.
//! - [`notices`]: the NOTICE after `CREATE EXTENSION cosid` saying where the leases live, and the
//!   WARNING after `CREATE SUBSCRIPTION` or `ALTER SUBSCRIPTION ... ENABLE` when this server's
//!   machine ids are coordinated with no other server.
//!
//! This file installs the hook and carries what it read before a statement to after it.

mod drop_extension;
mod lease_database;
mod notices;

use drop_extension::{at_risk, extension_exists, may_drop_extension, AtRisk};
use lease_database::{cuts_off_the_lease_database, drops_the_lease_database};
use notices::{
    creates_the_extension, say_where_the_leases_live, starts_a_subscription,
    warn_of_uncoordinated_machine_ids,
};
use pgrx::prelude::*;

static mut PREVIOUS_HOOK: pg_sys::ProcessUtility_hook_type = None;

/// Installs the hook; called once from `_PG_init` while the library is preloaded.
pub fn install() {
    // SAFETY: _PG_init runs in the postmaster before any backend exists, single-threaded; the
    // previous hook is kept and called, as every ProcessUtility hook must.
    unsafe {
        PREVIOUS_HOOK = pg_sys::ProcessUtility_hook;
        pg_sys::ProcessUtility_hook = Some(cosid_process_utility);
        pg_sys::RegisterSubXactCallback(Some(forget_aborted_statements), std::ptr::null_mut());
        pg_sys::RegisterXactCallback(
            Some(forget_statements_of_the_transaction),
            std::ptr::null_mut(),
        );
    }
}

// PostgreSQL's own function, not pgrx's guarded wrapper of it: an error it raises longjmps
// straight through the hook to the caller's handler, unchanged (pgrx's wrapper would turn it
// into a Rust panic and raise it again: without its table, column and constraint names, and with
// a Rust backtrace in DETAIL when RUST_BACKTRACE is set). The signature is that of PostgreSQL 14
// and later.
extern "C-unwind" {
    #[link_name = "standard_ProcessUtility"]
    fn standard_process_utility(
        pstmt: *mut pg_sys::PlannedStmt,
        query_string: *const std::ffi::c_char,
        read_only_tree: bool,
        context: pg_sys::ProcessUtilityContext::Type,
        params: pg_sys::ParamListInfo,
        query_env: *mut pg_sys::QueryEnvironment,
        dest: *mut pg_sys::DestReceiver,
        qc: *mut pg_sys::QueryCompletion,
    );
}

/// What the hook read before a statement ran, for after it ran, under a number of its own that
/// the hook's frame keeps: statements nest (an extension's script, a function running DDL), and
/// a nested one can have the same parse tree as the one around it. A statement that failed
/// leaves its entry behind: entries of a subtransaction are dropped when it aborts, all of them
/// when the transaction does, and those above a statement when it finishes.
struct Pending {
    number: u64,
    subtransaction: pg_sys::SubTransactionId,
    at_risk: Option<AtRisk>,
    cascade: Option<bool>,
    creating: bool,
    subscribing: bool,
}

thread_local! {
    static PENDING: std::cell::RefCell<Vec<Pending>> = const { std::cell::RefCell::new(Vec::new()) };
    static NEXT_NUMBER: std::cell::Cell<u64> = const { std::cell::Cell::new(1) };
}

/// Drops the entries of statements that failed with their subtransaction.
#[pg_guard]
unsafe extern "C-unwind" fn forget_aborted_statements(
    event: pg_sys::SubXactEvent::Type,
    aborted: pg_sys::SubTransactionId,
    _parent: pg_sys::SubTransactionId,
    _arg: *mut std::ffi::c_void,
) {
    if event == pg_sys::SubXactEvent::SUBXACT_EVENT_ABORT_SUB {
        // Subtransaction ids only grow within a transaction: the aborted one's statements and
        // those of its children have ids from it up.
        PENDING.with(|stack| {
            stack
                .borrow_mut()
                .retain(|entry| entry.subtransaction < aborted)
        });
    }
}

/// Drops every entry when the transaction aborts.
#[pg_guard]
unsafe extern "C-unwind" fn forget_statements_of_the_transaction(
    event: pg_sys::XactEvent::Type,
    _arg: *mut std::ffi::c_void,
) {
    if event == pg_sys::XactEvent::XACT_EVENT_ABORT
        || event == pg_sys::XactEvent::XACT_EVENT_PARALLEL_ABORT
    {
        PENDING.with(|stack| {
            let mut stack = stack.borrow_mut();
            stack.clear();
            stack.shrink_to_fit();
        });
    }
}

/// Not `#[pg_guard]`: this frame holds nothing to drop (raw pointers and plain values only), so
/// PostgreSQL's longjmp out of the statement may pass it. What can raise cosid's own errors runs
/// in the guarded functions before and after.
#[allow(clippy::too_many_arguments)]
unsafe extern "C-unwind" fn cosid_process_utility(
    pstmt: *mut pg_sys::PlannedStmt,
    query_string: *const std::ffi::c_char,
    read_only_tree: bool,
    context: pg_sys::ProcessUtilityContext::Type,
    params: pg_sys::ParamListInfo,
    query_env: *mut pg_sys::QueryEnvironment,
    dest: *mut pg_sys::DestReceiver,
    qc: *mut pg_sys::QueryCompletion,
) {
    // SAFETY: PostgreSQL passes a valid planned utility statement; the arguments are passed on
    // unchanged to the previous hook or the standard one, as every ProcessUtility hook must.
    unsafe {
        let statement = (*pstmt).utilityStmt;
        let number = before_statement(statement);
        match PREVIOUS_HOOK {
            Some(previous) => previous(
                pstmt,
                query_string,
                read_only_tree,
                context,
                params,
                query_env,
                dest,
                qc,
            ),
            None => standard_process_utility(
                pstmt,
                query_string,
                read_only_tree,
                context,
                params,
                query_env,
                dest,
                qc,
            ),
        }
        after_statement(number);
    }
}

/// Refuses a `DROP DATABASE` of `cosid.database`; reads what a drop of the extension would lose
/// while it is still there.
///
/// # Safety
/// `statement` is the utility statement's parse tree, or null.
#[pg_guard]
unsafe extern "C-unwind" fn before_statement(statement: *mut pg_sys::Node) -> u64 {
    // SAFETY: the caller's promise.
    if let Some(refusal) = unsafe { drops_the_lease_database(statement) } {
        refusal.raise();
    }
    // SAFETY: the caller's promise.
    if let Some(refusal) = unsafe { cuts_off_the_lease_database(statement) } {
        refusal.raise();
    }
    // SAFETY: the caller's promise.
    let cascade = unsafe { may_drop_extension(statement) };
    let at_risk = cascade.filter(|_| extension_exists()).map(|_| at_risk());
    let number = NEXT_NUMBER.with(|next| next.replace(next.get() + 1));
    let pending = Pending {
        number,
        // SAFETY: reads the id of the subtransaction the statement runs in.
        subtransaction: unsafe { pg_sys::GetCurrentSubTransactionId() },
        at_risk,
        cascade,
        // SAFETY: the caller's promise.
        creating: unsafe { creates_the_extension(statement) } && !extension_exists(),
        // SAFETY: the caller's promise.
        subscribing: unsafe { starts_a_subscription(statement) },
    };
    PENDING.with(|stack| stack.borrow_mut().push(pending));
    number
}

/// After the statement `before_statement` numbered ran: the NOTICE and WARNING it calls for, and
/// the refusal of a drop that lost something (the ERROR rolls the drop back).
#[pg_guard]
extern "C-unwind" fn after_statement(number: u64) {
    let Some(pending) = PENDING.with(|stack| {
        let mut stack = stack.borrow_mut();
        // Entries above this statement's are of nested statements that failed.
        let position = stack.iter().rposition(|entry| entry.number == number)?;
        let pending = stack.swap_remove(position);
        stack.truncate(position);
        Some(pending)
    }) else {
        return;
    };
    if pending.creating && extension_exists() {
        say_where_the_leases_live();
    }
    if pending.subscribing {
        warn_of_uncoordinated_machine_ids();
    }
    if let Some(at_risk) = pending.at_risk {
        if !extension_exists() {
            if let Some(refusal) = at_risk.refusal(pending.cascade == Some(true)) {
                refusal.raise();
            }
        }
    }
}
