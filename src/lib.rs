//! cosid: CosId-compatible Snowflake ids generated inside PostgreSQL.
//!
//! `_PG_init` only wires the pieces together. The pure logic is the `cosid-core` crate (`core/`);
//! the server side, from the bottom up: `host` (the machine), `settings`, `local_state` (the state
//! file), `shmem` (the shared segment), `history` (the default generator's), `opening` (how a
//! generator is opened, and what is special about the default one), `clock`, `store` (the lease
//! protocol's two transports), `worker` (the workers that run the generators), `sql` (the SQL
//! surface) and `hook` (the utility hook: the guards of DROP EXTENSION and of `cosid.database`).
//! A module uses only the ones before it; `error` is used by all, `pg_list` (the elements of a
//! PostgreSQL `List`) by the hook and the SQL surface.

mod clock;
mod error;
mod history;
mod hook;
mod host;
mod local_state;
mod names;
mod opening;
mod pg_list;
mod settings;
mod shmem;
mod sql;
mod store;
mod worker;

use error::CosidError;
use pgrx::prelude::*;

::pgrx::pg_module_magic!();

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    keep_backtraces_out_of_errors();
    // SAFETY: PostgreSQL sets this flag while it loads shared_preload_libraries, before it forks
    // any process; reading it is a plain read of a global.
    let preloading = unsafe { pg_sys::process_shared_preload_libraries_in_progress };
    // SAFETY: the postmaster sets this flag from its options (pg_upgrade's -b) before it loads
    // any library, and every process it forks inherits it; reading it is a plain read.
    let binary_upgrade = unsafe { pg_sys::IsBinaryUpgrade };
    if binary_upgrade {
        // Without the mark, the upgraded server would start with no floor: pg_upgrade is
        // stopped instead.
        if let Err(why) = local_state::mark_upgraded() {
            CosidError::prerequisite(format!(
                "cosid cannot mark this data directory as made by pg_upgrade: {why}"
            ))
            .detail("pg_upgrade does not copy cosid's state files; the mark makes the upgraded server refuse to generate until they are copied.")
            .hint("Make the data directory writable by the server's user, and run pg_upgrade again.")
            .refuse_start();
        }
    }
    settings::init(preloading);
    if !preloading {
        return;
    }
    // The settings sit below the stores, so the lease store's check is handed to them.
    let server = settings::server_settings(store::check).unwrap_or_else(|why| why.refuse_start());
    let server = settings::keep_server(server);
    match &server.machine {
        settings::MachineSource::Missing(why) => CosidError::prerequisite(format!(
            "cosid has no machine id in namespace \"{}\"",
            server.namespace
        ))
        .detail(why.detail())
        .hint(why.hint())
        .log(PgLogLevel::WARNING),
        // pg_upgrade runs the server only to read or write its catalog: nothing is leased.
        _ if binary_upgrade => {}
        settings::MachineSource::Leased(_) => worker::lease::register(),
        settings::MachineSource::Fixed(_) => {
            worker::state::register();
            worker::named::register();
        }
    }
    // pg_upgrade drops and creates the new cluster's empty databases, cosid.database too, then
    // copies the old cluster's files over them: there is nothing to guard.
    if !binary_upgrade {
        hook::install();
    }
    shmem::init(opening::open_default);
}

/// pgrx raises an error that crossed a function of ours (an SPI call's, say) again with the Rust
/// backtrace its panic hook captured appended to DETAIL, which `std::backtrace` captures whenever
/// RUST_BACKTRACE is set in the server's environment (common where a Rust toolchain is
/// installed). Its own setting, RUST_LIB_BACKTRACE, wins over RUST_BACKTRACE: unless the operator
/// set it, it is turned off here, in the postmaster before it forks (or in the one backend that
/// loads the library), before anything captured a backtrace.
fn keep_backtraces_out_of_errors() {
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        std::env::set_var("RUST_LIB_BACKTRACE", "0");
    }
}
