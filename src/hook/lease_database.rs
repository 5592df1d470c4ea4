//! The guards of `cosid.database` itself: a `DROP DATABASE` of it, and an `ALTER DATABASE` that
//! would keep the workers out of it or move it away, are refused before they run.

use crate::error::CosidError;
use crate::pg_list;
use pgrx::prelude::*;

/// The refusal of `DROP DATABASE` of `cosid.database`. It cannot be looked into from the
/// database the statement runs in, and `WITH (FORCE)` ends the lease worker's connection: it holds
/// the lease table (unless `cosid.lease_store` is set) and the named generators' definitions, so
/// it is refused outright while this server uses it.
///
/// # Safety
/// `node` is a utility statement's parse tree, or null.
pub(super) unsafe fn drops_the_lease_database(node: *mut pg_sys::Node) -> Option<CosidError> {
    if node.is_null() {
        return None;
    }
    // SAFETY: a non-null node starts with its tag; a DropdbStmt's dbname is a NUL-terminated
    // name from the parser.
    let name = unsafe {
        if (*node).type_ != pg_sys::NodeTag::T_DropdbStmt {
            return None;
        }
        let drop = &*(node as *mut pg_sys::DropdbStmt);
        if drop.dbname.is_null() {
            return None;
        }
        std::ffi::CStr::from_ptr(drop.dbname)
            .to_string_lossy()
            .into_owned()
    };
    let settings = crate::settings::server()?;
    (name == settings.database).then(|| {
        CosidError::new(
            PgSqlErrorCode::ERRCODE_OBJECT_IN_USE,
            format!("cannot drop database \"{name}\" while it is cosid.database"),
        )
        .detail("It holds cosid's lease table, whose rows' watermarks keep ids from being issued twice, and the named generators' definitions; this server's cosid uses it.")
        .hint("Uninstall cosid there first as the documentation on uninstalling says, then set cosid.database to another database and restart the server.")
    })
}

/// The refusal of `ALTER DATABASE` statements that would keep the workers out of
/// `cosid.database` or move it away: `ALLOW_CONNECTIONS false` (after the next restart no worker
/// can connect, and `DROP DATABASE` no longer meets a connection of theirs) and `RENAME` (the
/// name the drop guard and the workers go by would then be another database's, or none). Its
/// owner may do either without being a superuser.
///
/// # Safety
/// `node` is a utility statement's parse tree, or null.
pub(super) unsafe fn cuts_off_the_lease_database(node: *mut pg_sys::Node) -> Option<CosidError> {
    if node.is_null() {
        return None;
    }
    let settings = crate::settings::server()?;
    let name_of = |name: *const std::ffi::c_char| {
        // SAFETY: a non-null name from the parser is NUL-terminated.
        (!name.is_null()).then(|| {
            unsafe { std::ffi::CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned()
        })
    };
    // SAFETY: a non-null node starts with its tag, and the tag says which struct it is.
    let (name, what) = unsafe {
        match (*node).type_ {
            pg_sys::NodeTag::T_AlterDatabaseStmt => {
                let alter = &*(node as *mut pg_sys::AlterDatabaseStmt);
                let refuses = pg_list::pointers::<pg_sys::DefElem>(alter.options).any(|option| {
                    !(*option).defname.is_null()
                        && std::ffi::CStr::from_ptr((*option).defname) == c"allow_connections"
                        && !pg_sys::defGetBoolean(option)
                });
                if !refuses {
                    return None;
                }
                (name_of(alter.dbname)?, "refuse connections")
            }
            pg_sys::NodeTag::T_RenameStmt => {
                let rename = &*(node as *mut pg_sys::RenameStmt);
                if rename.renameType != pg_sys::ObjectType::OBJECT_DATABASE {
                    return None;
                }
                (name_of(rename.subname)?, "be renamed")
            }
            _ => return None,
        }
    };
    (name == settings.database).then(|| {
        CosidError::new(
            PgSqlErrorCode::ERRCODE_OBJECT_IN_USE,
            format!("database \"{name}\" cannot {what} while it is cosid.database"),
        )
        .detail("It holds cosid's lease table, whose rows' watermarks keep ids from being issued twice, and the named generators' definitions; cosid's background workers must be able to connect to it by this name.")
        .hint("To move cosid elsewhere, set cosid.database to another database and restart the server first.")
    })
}
