//! The SQL surface. Each function converts between SQL types and the pure modules, and turns
//! their refusals into SQL errors; none has logic of its own.
//!
//! User-facing functions go into the schema `CREATE EXTENSION` installs into (public by
//! default), so that `DEFAULT cosid_next()` works unqualified; internal objects go into `cosid`.
//!
//! Volatility: `cosid_next()` is volatile. The decode and format functions are stable, not
//! immutable, because their result depends on the layout settings, which a restart can change;
//! stable is enough for `WHERE id >= cosid_from_timestamp(...)` to be an index range scan. Radix62
//! depends on nothing but its argument, so it is immutable.
//!
//! Versions: the SQL of a released version names the C symbols it calls, and a server restarted
//! onto a newer library serves that SQL until `ALTER EXTENSION cosid UPDATE`. So a function whose
//! arguments or result change gets a new symbol, named with a suffix `_vN` for the 0.N.0 release
//! that introduced it (`cosid_decode_v4`, `cosid_create_generator_v5`, `generator_status_v5`),
//! and the symbol the older SQL calls stays, answering as that SQL expects (or refusing with a
//! clear error where it cannot).

mod comments;
mod convert;
mod generator_checks;
mod generator_rows;
mod generators;
mod ids;
mod named_forms;
mod refusals;
mod status;
mod status_row;
mod text_arg;

use pgrx::prelude::*;

extension_sql_file!("../../sql/lease_store.sql", name = "lease_store");

// The lease rows are dumped with the database (pg_dump, pg_restore): a machine id without a row
// counts as never used, so a restored database must keep them.
extension_sql!(
    r#"
SELECT pg_catalog.pg_extension_config_dump('cosid.machine_lease', '');
"#,
    name = "lease_rows_dumped",
    requires = ["lease_store"]
);

// Switching a sequence-fed key column to cosid (the migration guide's first step).
extension_sql_file!("../../sql/convert_column.sql", name = "convert_column");
