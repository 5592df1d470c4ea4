//! The guard of `DROP EXTENSION cosid`.
//!
//! Dropping the extension drops its tables with their rows. A machine id without a row of
//! `cosid.machine_lease` counts as never used, so a later claim would wait for no watermark and
//! could issue ids again; the named generators' definitions (`cosid.generator`) would go too, and
//! the records of every name and namespace a generator had (`cosid.generator_name`,
//! `cosid.generator_namespace`), which keep a name from being defined again in a way that could
//! repeat its ids.
//! And `CASCADE` strips every `DEFAULT cosid_next()` of the database without a word.
//!
//! An event trigger cannot guard this: one that belongs to the extension is dropped with it before
//! `sql_drop` fires, and `ddl_command_start` does not say which extension is dropped. So every
//! statement that can drop the extension (`DROP EXTENSION`, `DROP ... CASCADE`, `DROP OWNED`) is
//! looked at by the hook: what it would lose is read here before it runs ([`at_risk`]), and if the
//! extension is gone after it ran, the statement is refused ([`AtRisk::refusal`]; the ERROR rolls
//! the drop back). A database without rows (one that has the extension only for its functions)
//! loses nothing, and its drop goes through.

use crate::error::CosidError;
use cosid_core::uninstall::{drop_refusal, DropLoss, DropRefusal};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

/// Whether the statement can drop the extension: `Some(cascade)`, or `None`.
///
/// # Safety
/// `node` is a utility statement's parse tree, or null.
pub(super) unsafe fn may_drop_extension(node: *mut pg_sys::Node) -> Option<bool> {
    if node.is_null() {
        return None;
    }
    // SAFETY: a non-null node starts with its tag, and the tag says which struct it is.
    unsafe {
        match (*node).type_ {
            pg_sys::NodeTag::T_DropStmt => {
                let drop = &*(node as *mut pg_sys::DropStmt);
                let cascade = drop.behavior == pg_sys::DropBehavior::DROP_CASCADE;
                (cascade || drop.removeType == pg_sys::ObjectType::OBJECT_EXTENSION)
                    .then_some(cascade)
            }
            pg_sys::NodeTag::T_DropOwnedStmt => {
                let drop = &*(node as *mut pg_sys::DropOwnedStmt);
                Some(drop.behavior == pg_sys::DropBehavior::DROP_CASCADE)
            }
            _ => None,
        }
    }
}

pub(super) fn extension_exists() -> bool {
    // SAFETY: a catalog lookup by name inside a transaction; missing_ok returns InvalidOid.
    unsafe { pg_sys::get_extension_oid(c"cosid".as_ptr(), true) != pg_sys::InvalidOid }
}

/// What dropping the extension would lose, read before the statement runs.
pub(super) struct AtRisk {
    lease_rows: i64,
    namespaces: Vec<String>,
    generators: Vec<String>,
    /// Rows of cosid.generator_name and cosid.generator_namespace (counted: a row that cannot be
    /// read as text still counts), and what they say: "name" (namespace "namespace"), then the
    /// namespaces recorded without a name.
    recorded_names: i64,
    names: Vec<String>,
    /// Columns whose default (or generation expression) calls a function of the extension:
    /// (table oid, column number, "table.column").
    defaults: Vec<(pg_sys::Oid, i16, String)>,
}

impl AtRisk {
    pub(super) fn refusal(&self, cascade: bool) -> Option<CosidError> {
        // Only the columns whose table is still there lost their default (a table dropped with
        // the statement took its column with it).
        let stripped: Vec<&str> = self
            .defaults
            .iter()
            .filter(|(table, attnum, _)| cascade && column_exists(*table, *attnum))
            .map(|(_, _, label)| label.as_str())
            .collect();
        let loss = DropLoss {
            lease_rows: self.lease_rows.max(0) as u64,
            generators: self.generators.len() as u64,
            recorded_names: self.recorded_names.max(0) as u64,
            stripped_defaults: stripped.len() as u64,
        };
        let refusal = match drop_refusal(loss, cascade)? {
            DropRefusal::LeaseRows => CosidError::new(
                PgSqlErrorCode::ERRCODE_OBJECT_IN_USE,
                "cannot drop extension cosid while its lease table has rows",
            )
            .detail(format!(
                "cosid.machine_lease has {} row{} (namespace{} {}). Each row's watermark keeps the ids of its machine id from being issued twice; dropped with the extension, the machine id would count as never used.",
                self.lease_rows,
                if self.lease_rows == 1 { "" } else { "s" },
                if self.namespaces.len() == 1 { "" } else { "s" },
                quoted_list(&self.namespaces),
            ))
            .hint("Stop generating ids with these leases (restart the server with cosid.distributor = 'manual' and no cosid.machine_id: the lease worker releases its leases at shutdown), drop the named generators, retire the rows with cosid.lease_retire(namespace) once their watermarks are a minute in the past, then drop the extension. See the documentation on uninstalling."),
            DropRefusal::Generators => CosidError::new(
                PgSqlErrorCode::ERRCODE_OBJECT_IN_USE,
                "cannot drop extension cosid while named generators are defined",
            )
            .detail(format!(
                "cosid.generator defines {}; their definitions would be lost with the extension.",
                quoted_list(&self.generators)
            ))
            .hint("Drop them first with cosid_drop_generator(name), then retire their leases with cosid.lease_retire(namespace)."),
            DropRefusal::RecordedNames => CosidError::new(
                PgSqlErrorCode::ERRCODE_OBJECT_IN_USE,
                "cannot drop extension cosid while it records generator names and namespaces",
            )
            .detail(format!(
                "cosid.generator_name and cosid.generator_namespace have {} row{}: {}. A name keeps its namespace, and a namespace its layout, after its generator is dropped, so that the name defined again cannot repeat the ids called under it; dropped with the extension, these records would be lost.",
                self.recorded_names,
                if self.recorded_names == 1 { "" } else { "s" },
                shown_of(&self.names),
            ))
            .hint("Keep the extension while ids called under these names are kept anywhere. Otherwise forget the records as the documentation on uninstalling says, then drop the extension."),
            DropRefusal::StrippedDefaults => {
                let shown = stripped.iter().take(10).copied().collect::<Vec<_>>().join(", ");
                let more = match stripped.len() {
                    0..=10 => String::new(),
                    n => format!(" and {} more", n - 10),
                };
                CosidError::new(
                    PgSqlErrorCode::ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST,
                    "cannot drop extension cosid with CASCADE while columns take their default from it",
                )
                .detail(format!(
                    "CASCADE would remove the default of {} column{}: {shown}{more}. Inserts that rely on it would then fail or store NULL.",
                    stripped.len(),
                    if stripped.len() == 1 { "" } else { "s" },
                ))
                .hint("Give each of these columns another default (ALTER TABLE ... ALTER COLUMN ... SET DEFAULT ..., or DROP DEFAULT), then drop the extension.")
            }
        };
        Some(refusal)
    }
}

/// The first ten of `items`, and how many more.
fn shown_of(items: &[String]) -> String {
    let shown = items
        .iter()
        .take(10)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    match items.len() {
        0..=10 => shown,
        n => format!("{shown} and {} more", n - 10),
    }
}

fn quoted_list(names: &[String]) -> String {
    names
        .iter()
        .map(|name| format!("\"{name}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

fn column_exists(table: pg_sys::Oid, attnum: i16) -> bool {
    let args = vec![table.into(), attnum.into()];
    as_bootstrap_superuser(|| {
        Spi::connect(|client| {
            client
                .select(
                    "SELECT 1 FROM pg_catalog.pg_attribute a WHERE a.attrelid OPERATOR(pg_catalog.=) $1 AND a.attnum OPERATOR(pg_catalog.=) $2 AND NOT a.attisdropped",
                    None,
                    &args,
                )
                .map(|rows| !rows.is_empty())
                .unwrap_or(true)
        })
    })
}

/// Reads what the drop would lose. The tables are private to cosid_lease_owner, and a schema's
/// owner can drop the extension with `DROP SCHEMA ... CASCADE`, so they are read as the
/// bootstrap superuser, by fixed queries only.
pub(super) fn at_risk() -> AtRisk {
    as_bootstrap_superuser(|| {
        Spi::connect(|client| {
            let mut at_risk = AtRisk {
                lease_rows: 0,
                namespaces: Vec::new(),
                generators: Vec::new(),
                recorded_names: 0,
                names: Vec::new(),
                defaults: Vec::new(),
            };
            if table_exists(client, "cosid.machine_lease") {
                at_risk.namespaces = strings(
                    client,
                    "SELECT DISTINCT namespace FROM cosid.machine_lease ORDER BY 1",
                );
                at_risk.lease_rows = client
                    .select(
                        "SELECT pg_catalog.count(*) FROM cosid.machine_lease",
                        None,
                        &[],
                    )
                    .ok()
                    .and_then(|rows| rows.first().get::<i64>(1).ok().flatten())
                    // Unreadable: presumed to have rows, so that the drop is refused.
                    .unwrap_or(1);
            }
            if table_exists(client, "cosid.generator") {
                at_risk.generators = strings(client, "SELECT name FROM cosid.generator ORDER BY 1");
            }
            if table_exists(client, "cosid.generator_name")
                && table_exists(client, "cosid.generator_namespace")
            {
                (at_risk.recorded_names, at_risk.names) = recorded_names(client);
            }
            if let Ok(rows) = client.select(
                r#"
SELECT d.adrelid, d.adnum,
       pg_catalog.format('%s.%I', d.adrelid::pg_catalog.regclass, a.attname)
  FROM pg_catalog.pg_attrdef d
  JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) d.adrelid
                                AND a.attnum OPERATOR(pg_catalog.=) d.adnum
 WHERE EXISTS (
       SELECT FROM pg_catalog.pg_depend f
         JOIN pg_catalog.pg_depend m
           ON m.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
          AND m.objid OPERATOR(pg_catalog.=) f.refobjid
          AND m.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
          AND m.deptype OPERATOR(pg_catalog.=) 'e'
         JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) m.refobjid
        WHERE f.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_attrdef'::pg_catalog.regclass
          AND f.objid OPERATOR(pg_catalog.=) d.oid
          AND f.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
          AND e.extname OPERATOR(pg_catalog.=) 'cosid')
 ORDER BY 3
"#,
                None,
                &[],
            ) {
                for row in rows {
                    let table = row.get::<pg_sys::Oid>(1).ok().flatten();
                    let attnum = row.get::<i16>(2).ok().flatten();
                    let label = row.get::<String>(3).ok().flatten();
                    if let (Some(table), Some(attnum), Some(label)) = (table, attnum, label) {
                        at_risk.defaults.push((table, attnum, label));
                    }
                }
            }
            at_risk
        })
    })
}

/// The rows of cosid.generator_name and cosid.generator_namespace, counted, and shown as
/// `"name" (namespace "namespace")` and `namespace "namespace"` for a namespace recorded without a
/// name. Read as UTF-8 through the server encoding; unreadable, the rows are presumed to be there,
/// so that the drop is refused.
fn recorded_names(client: &SpiClient<'_>) -> (i64, Vec<String>) {
    let count = client
        .select(
            "SELECT (SELECT pg_catalog.count(*) FROM cosid.generator_name)              OPERATOR(pg_catalog.+) (SELECT pg_catalog.count(*) FROM cosid.generator_namespace)",
            None,
            &[],
        )
        .ok()
        .and_then(|rows| rows.first().get::<i64>(1).ok().flatten())
        .unwrap_or(1);
    // SAFETY: reads the encoding of the database this backend is connected to.
    let escape = unsafe { pg_sys::GetDatabaseEncoding() } != pg_sys::pg_enc::PG_UTF8 as i32;
    let quoted = |bytes: Option<Vec<u8>>| {
        cosid_core::layout::quote_for_message(
            &String::from_utf8_lossy(&bytes.unwrap_or_default()),
            escape,
        )
    };
    let shown = client
        .select(
            "SELECT pg_catalog.convert_to(n.name, 'UTF8'), pg_catalog.convert_to(n.namespace, 'UTF8')              FROM cosid.generator_name n              UNION ALL              SELECT NULL, pg_catalog.convert_to(s.namespace, 'UTF8') FROM cosid.generator_namespace s              WHERE NOT EXISTS (SELECT FROM cosid.generator_name n WHERE n.namespace OPERATOR(pg_catalog.=) s.namespace)              ORDER BY 1 NULLS LAST, 2",
            None,
            &[],
        )
        .map(|rows| {
            rows.map(|row| {
                let name = row.get::<Vec<u8>>(1).ok().flatten();
                let namespace = quoted(row.get::<Vec<u8>>(2).ok().flatten());
                match name {
                    Some(name) => format!("{} (namespace {namespace})", quoted(Some(name))),
                    None => format!("namespace {namespace}"),
                }
            })
            .collect()
        })
        .unwrap_or_default();
    (count, shown)
}

fn table_exists(client: &SpiClient<'_>, name: &str) -> bool {
    let args = vec![name.into()];
    client
        .select("SELECT pg_catalog.to_regclass($1) IS NOT NULL", None, &args)
        .ok()
        .and_then(|rows| rows.first().get::<bool>(1).ok().flatten())
        .unwrap_or(false)
}

fn strings(client: &SpiClient<'_>, query: &str) -> Vec<String> {
    client
        .select(query, None, &[])
        .map(|rows| {
            rows.filter_map(|row| row.get::<String>(1).ok().flatten())
                .collect()
        })
        .unwrap_or_default()
}

/// Runs `read` as the bootstrap superuser in a restricted security context, then switches back.
/// An error inside unwinds to the transaction's abort, which restores the user itself.
fn as_bootstrap_superuser<T>(read: impl FnOnce() -> T) -> T {
    let mut user = pg_sys::InvalidOid;
    let mut context: std::ffi::c_int = 0;
    // SAFETY: plain reads and writes of the backend's current user and security context, as
    // PostgreSQL's own commands do around code that must run as another role.
    unsafe {
        pg_sys::GetUserIdAndSecContext(&mut user, &mut context);
        pg_sys::SetUserIdAndSecContext(
            pg_sys::Oid::from(pg_sys::BOOTSTRAP_SUPERUSERID),
            context
                | pg_sys::SECURITY_LOCAL_USERID_CHANGE as std::ffi::c_int
                | pg_sys::SECURITY_RESTRICTED_OPERATION as std::ffi::c_int,
        );
    }
    let result = read();
    // SAFETY: as above; restores what was read.
    unsafe { pg_sys::SetUserIdAndSecContext(user, context) };
    result
}
