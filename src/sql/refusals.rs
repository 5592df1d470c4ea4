//! Why `cosid_next()` refuses: the errors of a closed generator, a lease not held, a state file or
//! history that cannot be used, and the clock, each from one reading of the generator's status.

use super::convert::time_range_error;
use crate::error::CosidError;
use crate::settings::{self, MachineSource};
use crate::shmem;
use cosid_core::generator::GenerateError;
use cosid_core::layout::{self};
use cosid_core::lease::{GeneratorProblem, LeaseSnapshot, RefusalKind, UNKNOWN_TIME};
use pgrx::prelude::*;

/// Why the server has no machine id, when a store-less distributor gave none.
pub(super) fn no_machine_id() -> Option<&'static cosid_core::distributor::NoMachineId> {
    match settings::server().map(|settings| &settings.machine) {
        Some(MachineSource::Missing(why)) => Some(why),
        _ => None,
    }
}

pub(super) fn recovery_in_progress() -> bool {
    // SAFETY: RecoveryInProgress only reads shared state.
    unsafe { pg_sys::RecoveryInProgress() }
}

/// The lease worker's last error as `role` may see it: its text for a superuser; for any other
/// role only the kind of problem, since the text of a store's error can name its host, port,
/// user and database. Empty when there is none.
pub(super) fn lease_error_for(slot: &shmem::GeneratorSlot, superuser: bool) -> String {
    let text = slot.status.last_error.load();
    error_shown(&text, slot.status.problem(), superuser)
}

pub(super) fn error_shown(text: &str, problem: GeneratorProblem, superuser: bool) -> String {
    if superuser || text.is_empty() {
        text.to_string()
    } else {
        problem.public_summary().to_string()
    }
}

pub(super) fn is_superuser() -> bool {
    // SAFETY: superuser() only reads the current user's role, which every backend has.
    unsafe { pg_sys::superuser() }
}

/// The last renewal of a snapshot, written out; `None` before the first.
pub(super) fn renewed_text(snapshot: &LeaseSnapshot) -> Option<String> {
    let renewed = snapshot.last_renewed_at_ms;
    (renewed != UNKNOWN_TIME).then(|| layout::format_unix_ms(renewed))
}

/// The lease's state in sentences, for the DETAIL of a refusal, which any caller of
/// `cosid_next()` reads.
pub(super) fn lease_situation(slot: &shmem::GeneratorSlot) -> String {
    let snapshot = slot.status.snapshot();
    let last_error = error_shown(&snapshot.last_error, snapshot.problem, is_superuser());
    cosid_core::lease::situation(
        snapshot.state,
        renewed_text(&snapshot).as_deref(),
        &last_error,
    )
}

/// The refusal of a closed generator. Everything it says of the lease comes from one snapshot:
/// the worker may open the generator, or lose it, while it is composed.
pub(super) fn closed_error(slot: &shmem::GeneratorSlot) -> CosidError {
    let namespace = slot.namespace();
    let message = format!("cosid has no machine id in namespace \"{namespace}\"");
    if let Some(why) = no_machine_id() {
        return CosidError::prerequisite(message)
            .detail(why.detail())
            .hint(why.hint());
    }
    let snapshot = slot.status.snapshot();
    if snapshot.problem == GeneratorProblem::StateFile {
        return state_file_error(slot, &snapshot.last_error);
    }
    let superuser = is_superuser();
    let last_error = error_shown(&snapshot.last_error, snapshot.problem, superuser);
    if !slot.distributor().is_leased() {
        let detail = if last_error.is_empty() {
            "The generator is stopped.".to_string()
        } else {
            format!(
                "The generator is stopped: {}.",
                last_error.trim_end_matches('.')
            )
        };
        return CosidError::prerequisite(message)
            .detail(detail)
            .hint("A superuser sees the cause in the last_error column of cosid.status.");
    }
    let local_store = matches!(
        settings::server().map(|settings| &settings.machine),
        Some(MachineSource::Leased(lease)) if lease.lease_store.is_none()
    );
    // A shared store that is read-only is the store's problem, not this server's: the general
    // answer below, whose DETAIL says so.
    if local_store && (snapshot.problem == GeneratorProblem::Standby || recovery_in_progress()) {
        return CosidError::new(
            PgSqlErrorCode::ERRCODE_READ_ONLY_SQL_TRANSACTION,
            "cannot generate cosid ids on a hot standby",
        )
        .detail(format!(
            "Machine ids of namespace \"{namespace}\" are leased from a table in this server's own database, which is read-only during recovery."
        ))
        .hint("Generate ids on the primary. A standby leases a machine id when it is promoted.");
    }
    if snapshot.problem == GeneratorProblem::Exhausted {
        let bits = slot.config().layout.machine_bits();
        let named = !slot.is_default();
        let (bits_setting, raise) = if named {
            (
                format!("generator \"{}\"", slot.name()),
                "Create the generator under a new namespace with more machine_bits, or stop a server of the namespace",
            )
        } else {
            (
                "cosid.machine_bits".to_string(),
                "Stop a server of the namespace, or move every server to a new namespace (cosid.namespace) with more cosid.machine_bits: a namespace keeps its layout",
            )
        };
        return CosidError::new(
            PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
            format!("no machine id left in namespace \"{namespace}\""),
        )
        .detail(format!(
            "All {} machine ids of {bits} machine bits ({bits_setting}) are held by other servers of the namespace.",
            1u64 << bits
        ))
        .hint(format!("{raise}: see cosid.leases. Do not delete rows of cosid.machine_lease: their watermarks keep ids from being issued twice."));
    }
    let refusal = cosid_core::lease::no_lease_refusal(
        namespace,
        snapshot.state,
        snapshot.problem,
        renewed_text(&snapshot).as_deref(),
        &last_error,
    );
    let error = match refusal.kind {
        RefusalKind::Prerequisite => CosidError::prerequisite(refusal.message),
        RefusalKind::Unavailable => CosidError::unavailable(refusal.message),
    };
    error.detail(refusal.detail).hint(refusal.hint)
}

/// The local state file could not be read exactly when the generator was to be opened (fixed
/// machine id) or a machine id claimed (stable instance): the floor it holds is unknown.
/// `error` is the text the lease status holds (the snapshot's).
pub(super) fn state_file_error(slot: &shmem::GeneratorSlot, error: &str) -> CosidError {
    let leased = slot.distributor().is_leased();
    let then = if leased {
        "delete the file: the background worker then claims a machine id within a second"
    } else {
        "delete the file and restart the server"
    };
    // The file's path and the system's error name the data directory, which only superusers and
    // members of pg_read_all_settings may know: any other role is told only what happened.
    // SAFETY: superuser() only reads the current user's role, which every backend has.
    let (message, why) = if unsafe { pg_sys::superuser() } {
        let message = format!(
            "cosid cannot use its state file \"{}\"",
            crate::local_state::path(&crate::opening::state_file(slot))
        );
        (message, error.to_string())
    } else {
        let why = "the state file cannot be used; its path and error are shown to superusers only";
        (
            "cosid cannot use its state file".to_string(),
            why.to_string(),
        )
    };
    let why_sentence = crate::error::sentence_case(&why);
    CosidError::prerequisite(message)
        .detail(format!(
            "{why_sentence}. The file holds the floor that keeps ids issued before a restart or a \
         crash from being issued again, so namespace \"{}\" generates no id without it.",
            slot.namespace()
        ))
        .hint(
            if crate::local_state::missing_after_upgrade(&crate::opening::state_file(slot)) {
                let then = if leased {
                    ": the background worker then claims a machine id within a second"
                } else {
                    ", and restart the server"
                };
                format!(
                    "Copy {files} from the data directory pg_upgrade upgraded from into this \
             one{then}; then delete {marker}, last. If that directory is lost, delete {marker} \
             once you are sure this server's clock is past the timestamp of every id the old \
             server issued.",
                    files = crate::local_state::copied_after_upgrade(),
                    marker = crate::local_state::UPGRADE_MARKER
                )
            } else {
                format!(
                "Restore the file from a backup of the data directory. Or, once you are sure this \
             server's clock is past the timestamp of every id it issued, {then}."
            )
            },
        )
}

/// The refusal when the server's record of its named generators' names (`cosid.names`) cannot
/// be used: `detail` says why, as a sentence.
pub(super) fn names_file_error(detail: &str) -> CosidError {
    CosidError::prerequisite("cosid cannot use the server's record of its generators' names")
        .detail(format!(
            "{}. The file keeps every name a named generator of this server had with its namespace, and every namespace with its layout and last id, so that no generator issues their ids again; without it none that depends on it runs.",
            detail.trim_end_matches('.')
        ))
        .hint(if crate::local_state::missing_after_upgrade(crate::local_state::NAMES_FILE) {
            format!(
                "Copy {files} from the data directory pg_upgrade upgraded from into this one, and restart the server; then delete {marker}, last. If the old directory has no {names} (no named generator ever ran there), delete {marker} once the other files are in place, and restart the server.",
                files = crate::local_state::copied_after_upgrade(),
                names = crate::local_state::NAMES_FILE,
                marker = crate::local_state::UPGRADE_MARKER
            )
        } else {
            format!(
                "Make the file {names} in the data directory readable and writable by the server (free disk space, permissions), and restart the server. Never put back an older copy of it, and never delete it or {generation}: the names and namespaces it would forget could repeat their ids (an older copy is refused). If the last one is lost, see \"What a server remembers of the ids it issued\" in the documentation on leases.",
                names = crate::local_state::NAMES_FILE,
                generation = crate::history::GENERATION_FILE
            )
        })
}

/// The refusal of a default generator whose history forbids its definition, or whose ids must
/// still wait to be above those of its previous definition (`crate::history`).
pub(super) fn history_error(slot: &shmem::GeneratorSlot) -> Option<CosidError> {
    if !slot.is_default() {
        return None;
    }
    const SETTINGS: &str = "cosid.namespace, cosid.epoch, cosid.time_unit, cosid.timestamp_bits, \
                            cosid.machine_bits and cosid.sequence_bits";
    if slot.status.problem() == GeneratorProblem::HistoryFile {
        // The file's path and the system's error name the data directory: superusers only.
        // SAFETY: superuser() only reads the current user's role, which every backend has.
        let why = lease_error_for(slot, unsafe { pg_sys::superuser() });
        let detail = crate::error::sentence_case(&why);
        if crate::history::read().is_ok() && crate::names::read().is_err() {
            return Some(names_file_error(&detail));
        }
        return Some(
            CosidError::prerequisite("cosid cannot use the default generator's history file")
                .detail(format!(
                    "{}. The file records the namespace and layout of the ids cosid_next() issued, so that a change of them never repeats one; without it no id is issued.",
                    detail.trim_end_matches('.')
                ))
                .hint(if crate::local_state::missing_after_upgrade(crate::history::HISTORY_FILE) {
                    format!(
                        "Copy {files} from the data directory pg_upgrade upgraded from into this one, and restart the server; then delete {marker}, last. If the old directory has no {file} (cosid before 0.5.0), delete {marker} once the other files are in place, and restart the server. If it is lost, so are the last ids the history records: delete {marker} only once you are sure this server's clock is past the timestamp of every id the old server issued, with cosid.namespace and the layout settings as they were before the upgrade.",
                        files = crate::local_state::copied_after_upgrade(),
                        file = crate::history::HISTORY_FILE,
                        marker = crate::local_state::UPGRADE_MARKER
                    )
                } else {
                    format!(
                        "Make the file {history} in the data directory readable and writable by the server (free disk space, permissions), and restart the server. Never put back an older copy of it, and never delete it or {generation}: the definitions it would forget could repeat their ids (an older copy is refused). If the last one is lost, see \"Changing the default generator's namespace or layout\" in the documentation on operations.",
                        history = crate::history::HISTORY_FILE,
                        generation = crate::history::GENERATION_FILE
                    )
                }),
        );
    }
    if slot.status.problem() == GeneratorProblem::History {
        // SAFETY: superuser() only reads the current user's role, which every backend has.
        let why = lease_error_for(slot, unsafe { pg_sys::superuser() });
        let settings = settings::server()?;
        let previous = crate::history::read().ok().flatten();
        let verdict = cosid_core::history::verdict(
            previous.as_ref(),
            &settings.namespace,
            &settings.config.layout,
            crate::host::unix_ms_now(),
        );
        let hint = match verdict {
            _ if crate::history::leases_left_behind().is_some() => format!(
                "Restart the server with cosid.database = '{}' and without cosid.lease_store, \
                 wait until cosid.status shows the default generator UP, and stop the server \
                 cleanly (pg_ctl stop -m fast): the last ids are then recorded, and the server \
                 can lease elsewhere.",
                crate::history::leases_left_behind().unwrap_or_default()
            ),
            cosid_core::history::Verdict::LastIdUnknown { .. } => format!(
                "Restart the server with the settings it had before ({SETTINGS}), wait until \
                 cosid.status shows the default generator UP, and stop the server cleanly \
                 (pg_ctl stop -m fast): the last id is then recorded, and at the next start the \
                 new settings issue ids above it. For a new layout in new columns, create a \
                 named generator instead (cosid_create_generator)."
            ),
            _ if crate::names::read().is_ok_and(|record| {
                record
                    .namespaces
                    .get(&settings.namespace)
                    .is_some_and(|used| {
                        used.layout != cosid_core::protocol::layout_text(&settings.config.layout)
                    })
            }) =>
            {
                format!(
                    "Give the default generator a namespace no generator of this server used \
                     ({SETTINGS}) and restart, or set its layout back to the namespace's."
                )
            }
            _ => format!(
                "Set {SETTINGS} back to what the history records and restart. For a new layout \
                 in new columns, create a named generator instead (cosid_create_generator)."
            ),
        };
        let detail = crate::error::sentence_case(&why);
        if crate::history::leases_left_behind().is_some() {
            return Some(
                CosidError::prerequisite(
                    "cosid_next() refuses: the leases of the server's last run are in another database",
                )
                .detail(format!(
                    "{}. Ids issued here could repeat those issued before the crash, so none is issued.",
                    detail.trim_end_matches('.')
                ))
                .hint(hint),
            );
        }
        return Some(
            CosidError::prerequisite("cosid_next() refuses: the default generator's definition changed")
                .detail(format!(
                    "{}. Ids of the new definition could repeat those issued before, so none is issued.",
                    detail.trim_end_matches('.')
                ))
                .hint(hint),
        );
    }
    let floor_ms = crate::history::floor_ahead_ms(slot)?;
    Some(
        CosidError::unavailable(format!(
            "the default generator issues no id before {}",
            layout::format_unix_ms(floor_ms)
        ))
        .detail(format!(
            "Every id it issues (namespace \"{}\") is above every id this server issued that it \
             could equal: under the default generator's previous namespace or layout \
             ({history}), by named generators of its namespace ({names}), or before a \
             crash-restart; the first such id is dated after {}.",
            slot.namespace(),
            layout::format_unix_ms(floor_ms),
            history = crate::history::HISTORY_FILE,
            names = crate::local_state::NAMES_FILE
        ))
        .hint(format!(
            "Retry after that time. If the namespace or layout changed at the last start, \
             setting {SETTINGS} back to the previous definition (recorded in {} in the data \
             directory) and restarting also ends the wait.",
            crate::history::HISTORY_FILE
        )),
    )
}

pub(super) fn generate_error(slot: &shmem::GeneratorSlot, why: GenerateError) -> CosidError {
    if let Some(refusal) = history_error(slot) {
        return refusal;
    }
    match why {
        GenerateError::Closed => closed_error(slot),
        GenerateError::ClockBackwards {
            last_unix_ms,
            now_unix_ms,
            broken_threshold_ms,
        } => CosidError::unavailable(format!(
            "clock moved backwards by {} ms",
            last_unix_ms - now_unix_ms
        ))
        .detail(format!(
            "The last id of namespace \"{}\" has timestamp {}, and the clock now reads {}, more \
             than cosid.clock_backwards_broken_threshold ({broken_threshold_ms} ms) behind.",
            slot.namespace(),
            layout::format_unix_ms(last_unix_ms),
            layout::format_unix_ms(now_unix_ms)
        ))
        .hint(
            "Retry in a moment: ids are issued again once the clock passes the last issued \
             timestamp. If this lasts, check the server's time synchronisation.",
        ),
        GenerateError::ClockStalled { waited_ms } => {
            CosidError::unavailable("the clock did not advance").detail(format!(
                "cosid waited {waited_ms} ms for the clock to reach the next tick of namespace \
                 \"{}\".",
                slot.namespace()
            ))
            .hint("Retry at once. If this lasts, check the server's clock.")
        }
        GenerateError::TimeRange(range) => {
            time_range_error(&slot.config().layout, range, "the current time")
        }
        GenerateError::DeadlinePassed => {
            let of_machine_id = slot
                .status
                .held()
                .map(|(machine_id, _)| format!(" of machine id {machine_id}"))
                .unwrap_or_default();
            CosidError::unavailable(format!(
                "cosid lease{of_machine_id} in namespace \"{}\" was not renewed in time",
                slot.namespace()
            ))
            .detail(format!(
                "{} Without a renewal, generation stops cosid.safe_guard_duration minus its margin after the last successful one was sent.",
                lease_situation(slot)
            ))
            .hint("Retry in a moment: ids are generated again as soon as a renewal succeeds. If this lasts, check the lease table's database and the cosid background worker (cosid.status).")
        }
        GenerateError::BoundReached { bound_unix_ms } => {
            CosidError::unavailable("cosid reached the watermark of its lease").detail(format!(
                "No id of namespace \"{}\" may have a timestamp at or after {} until the lease is \
             renewed.",
                slot.namespace(),
                layout::format_unix_ms(bound_unix_ms)
            ))
            .hint("Retry in a moment: the background worker renews the lease and moves the watermark ahead. If this lasts, see cosid.status.")
        }
    }
}
