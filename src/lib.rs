//! cosid: CosId-compatible Snowflake ids generated inside PostgreSQL.
//!
//! `_PG_init` only wires the pieces together; see the modules for the parts:
//! pure logic in the `cosid-core` crate (`core/`), the server side in `settings`, `shmem`, `clock`,
//! `sql`, `local_state` and `state_worker` (the durable floor of a fixed machine id), and for
//! leased machine ids `worker`, `lease_store` (local) and `remote_store` (shared).

pub use cosid_core::{conninfo, distributor, generator, layout, lease, protocol, state_file};

mod clock;
mod error;
mod lease_store;
mod local_state;
mod remote_store;
mod settings;
mod shmem;
mod sql;
mod state_worker;
mod text_arg;
mod worker;

use error::CosidError;
use pgrx::prelude::*;

::pgrx::pg_module_magic!();

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    // SAFETY: PostgreSQL sets this flag while it loads shared_preload_libraries, before it forks
    // any process; reading it is a plain read of a global.
    let preloading = unsafe { pg_sys::process_shared_preload_libraries_in_progress };
    settings::init(preloading);
    if !preloading {
        return;
    }
    // The settings sit below the stores, so the lease store's check is handed to them.
    let server =
        settings::server_settings(remote_store::check).unwrap_or_else(|why| why.refuse_start());
    let server = settings::keep_server(server);
    match &server.machine {
        settings::MachineSource::Missing(why) => CosidError::prerequisite(format!(
            "cosid has no machine id in namespace \"{}\"",
            server.namespace
        ))
        .detail(why.detail())
        .hint(why.hint())
        .log(PgLogLevel::WARNING),
        settings::MachineSource::Leased(_) => worker::register(),
        settings::MachineSource::Fixed(_) => state_worker::register(),
    }
    shmem::init();
}
