//! What the hook says after a statement succeeded: where the leases live after `CREATE EXTENSION
//! cosid`, and a warning when a subscription may replicate ids of the same machine ids.

use crate::error::CosidError;
use crate::pg_list;
use crate::settings::{self, MachineSource};
use pgrx::prelude::*;
use pgrx::PgLogLevel;

/// Whether the statement is `CREATE EXTENSION cosid`.
///
/// # Safety
/// `node` is a utility statement's parse tree, or null.
pub(super) unsafe fn creates_the_extension(node: *mut pg_sys::Node) -> bool {
    // SAFETY: a non-null node starts with its tag; a CreateExtensionStmt's extname is a
    // NUL-terminated name from the parser.
    unsafe {
        if node.is_null() || (*node).type_ != pg_sys::NodeTag::T_CreateExtensionStmt {
            return false;
        }
        let create = &*(node as *mut pg_sys::CreateExtensionStmt);
        !create.extname.is_null() && std::ffi::CStr::from_ptr(create.extname) == c"cosid"
    }
}

/// Whether the statement makes logical replication apply rows here: `CREATE SUBSCRIPTION`, or
/// `ALTER SUBSCRIPTION ... ENABLE`.
///
/// # Safety
/// `node` is a utility statement's parse tree, or null.
pub(super) unsafe fn starts_a_subscription(node: *mut pg_sys::Node) -> bool {
    if node.is_null() {
        return false;
    }
    // SAFETY: a non-null node starts with its tag, and the tag says which struct it is.
    unsafe {
        match (*node).type_ {
            pg_sys::NodeTag::T_CreateSubscriptionStmt => true,
            pg_sys::NodeTag::T_AlterSubscriptionStmt => {
                // ENABLE and DISABLE are both this kind, with the option `enabled` saying which.
                let alter = &*(node as *mut pg_sys::AlterSubscriptionStmt);
                alter.kind == pg_sys::AlterSubscriptionType::ALTER_SUBSCRIPTION_ENABLED
                    && pg_list::pointers::<pg_sys::DefElem>(alter.options).any(|option| {
                        !(*option).defname.is_null()
                            && std::ffi::CStr::from_ptr((*option).defname) == c"enabled"
                            && pg_sys::defGetBoolean(option)
                    })
            }
            _ => false,
        }
    }
}

/// Says, once, where the leases are, when the server's machine id is leased and they are not in
/// this database: here `cosid.leases` shows none of them while `cosid.status` says UP. The
/// utility hook calls this after `CREATE EXTENSION cosid` succeeded, under the session's own
/// `client_min_messages` (the extension's script runs with it at `warning` at least, which would
/// hide a NOTICE, or show one to a session that asked for warnings only if it were lowered).
pub(super) fn say_where_the_leases_live() {
    let Some(settings) = settings::server() else {
        return;
    };
    let MachineSource::Leased(lease) = &settings.machine else {
        return;
    };
    let notice = if lease
        .lease_store
        .as_deref()
        .is_some_and(|store| !store.is_empty())
    {
        CosidError::new(
            PgSqlErrorCode::ERRCODE_SUCCESSFUL_COMPLETION,
            "cosid leases its machine ids from the shared lease store of cosid.lease_store",
        )
        .detail("The leases of this server are in cosid.leases of the store's database; cosid.leases in this database shows none of them.")
        .hint("See the leases with SELECT * FROM cosid.leases in the store's database, and this server's generators with SELECT * FROM cosid.status.")
    } else {
        // SAFETY: get_database_name reads the catalog inside the transaction of CREATE
        // EXTENSION, for this backend's own database, which exists while it is connected; the
        // name it returns is a NUL-terminated palloc'd string.
        let here = unsafe {
            let name = pg_sys::get_database_name(pg_sys::MyDatabaseId);
            if name.is_null() {
                return;
            }
            std::ffi::CStr::from_ptr(name)
                .to_string_lossy()
                .into_owned()
        };
        if here == settings.database {
            return;
        }
        let database = &settings.database;
        CosidError::new(
            PgSqlErrorCode::ERRCODE_SUCCESSFUL_COMPLETION,
            format!("cosid leases its machine ids in database \"{database}\" (cosid.database), not in this one"),
        )
        .detail("cosid.leases in this database shows no lease; cosid.status shows the generators of the whole server in every database.")
        .hint(format!("See the leases with SELECT * FROM cosid.leases in database \"{database}\"."))
    };
    notice.log(PgLogLevel::NOTICE);
}

/// After `CREATE SUBSCRIPTION` or `ALTER SUBSCRIPTION ... ENABLE`: a WARNING when this server
/// leases its machine ids from its own lease table. Another server (the publisher, say) then
/// holds machine ids of the same namespace independently, and the ids it issued can equal this
/// server's: rows replicated into a table this server also fills collide, and the apply worker
/// stops on the duplicate key.
pub(super) fn warn_of_uncoordinated_machine_ids() {
    let Some(settings) = settings::server() else {
        return;
    };
    let MachineSource::Leased(lease) = &settings.machine else {
        return;
    };
    if lease
        .lease_store
        .as_deref()
        .is_some_and(|store| !store.is_empty())
    {
        return;
    }
    CosidError::new(
        PgSqlErrorCode::ERRCODE_WARNING,
        "cosid's machine ids on this server are coordinated with no other server",
    )
    .detail(format!(
        "This server leases its machine ids from its own lease table (database \"{}\"; cosid.lease_store is not set), so a server this subscription replicates from can hold the same machine ids and issue the same ids: rows it sends into a table that this server also fills with cosid_next() can collide, and the apply worker stops on the duplicate key.",
        settings.database
    ))
    .hint("Let every server that writes the same tables lease from one shared store (cosid.lease_store, same cosid.namespace), or give each a distinct fixed machine id (cosid.distributor = 'manual', cosid.machine_id).")
    .log(PgLogLevel::WARNING);
}
