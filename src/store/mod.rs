//! The two transports of cosid's lease protocol. The protocol itself (the SQL of each call, its
//! parameters, and the one validating decoder of the answers) is `cosid_core::protocol`'s
//! `CosidProtocol`, which the session sees as a `LeaseStore`; a transport only carries a call
//! and hands back its rows.
//!
//! - [`local`]: the server's own database (`cosid.database`), through SPI.
//! - [`remote`]: a shared store in another PostgreSQL (`cosid.lease_store`), through
//!   tokio-postgres.
//!
//! CosId's own distributors are `LeaseStore`s of their own: its JDBC table
//! (`cosid_core::cosid_jdbc`) over [`remote`], and its Redis keys (`cosid_core::cosid_redis`)
//! over [`redis`].

pub mod local;
pub mod redis;
pub mod remote;

use cosid_core::cosid_jdbc::CosidJdbc;
use cosid_core::cosid_redis::CosidRedis;
use cosid_core::distributor::DistributorKind;
use cosid_core::protocol::{CosidProtocol, LeaseStore};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

/// The store the lease worker uses: the shared one `conninfo` names, or its own database;
/// with `cosid_jdbc`, CosId's table in the shared one; with `cosid_redis`, CosId's keys in the
/// Redis server `conninfo` names. `shutting_down` cuts a remote call short
/// when the server begins to shut down.
pub fn open(
    distributor: DistributorKind,
    conninfo: Option<&str>,
    shutting_down: fn() -> bool,
) -> Result<Rc<RefCell<dyn LeaseStore>>, String> {
    match conninfo {
        Some(url) if distributor == DistributorKind::CosidRedis => {
            let transport = redis::RedisStore::new(url)?;
            Ok(Rc::new(RefCell::new(CosidRedis {
                transport,
                now_ms: crate::host::unix_ms_now,
            })))
        }
        Some(conninfo) if distributor == DistributorKind::CosidJdbc => {
            let transport = remote::RemoteStore::new(conninfo, shutting_down)?;
            Ok(Rc::new(RefCell::new(CosidJdbc {
                transport,
                now_ms: crate::host::unix_ms_now,
            })))
        }
        Some(conninfo) => {
            let store = remote::RemoteStore::new(conninfo, shutting_down)?;
            Ok(Rc::new(RefCell::new(CosidProtocol(store))))
        }
        None => {
            let store = local::LocalStore {
                timeout: Duration::from_secs(1),
            };
            if let Err(why) = store.use_read_committed() {
                pgrx::warning!("cosid: could not set the lease calls' isolation level: {why}");
            }
            Ok(Rc::new(RefCell::new(CosidProtocol(store))))
        }
    }
}

/// Checks `cosid.lease_store` without connecting: a Redis URL for `cosid_redis`, a PostgreSQL
/// connection string otherwise.
pub fn check(distributor: DistributorKind, conninfo: &str) -> Result<(), String> {
    if distributor == DistributorKind::CosidRedis {
        redis::check(conninfo)
    } else {
        remote::check(conninfo)
    }
}
