//! cosid: CosId-compatible Snowflake ids generated inside PostgreSQL.
//!
//! `_PG_init` only wires the pieces together; see the modules for the parts:
//! pure logic in the `cosid-core` crate (`core/`), the server side in `guc`, `shmem`,
//! `clock` and `sql`.

pub use cosid_core::{distributor, generator, layout};

mod clock;
mod error;
mod guc;
mod shmem;
mod sql;

use error::{CosidError, OrRaise};
use pgrx::prelude::*;

::pgrx::pg_module_magic!();

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    // SAFETY: PostgreSQL sets this flag while it loads shared_preload_libraries, before it forks
    // any process; reading it is a plain read of a global.
    let preloading = unsafe { pg_sys::process_shared_preload_libraries_in_progress };
    guc::init(preloading);
    if !preloading {
        return;
    }
    let settings = guc::server_settings().or_raise();
    if let Err(why) = &settings.machine {
        CosidError::prerequisite(format!(
            "cosid has no machine id in namespace \"{}\"",
            settings.namespace
        ))
        .detail(why.detail())
        .hint(why.hint())
        .log(PgLogLevel::WARNING);
    }
    shmem::init(settings);
}
