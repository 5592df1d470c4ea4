//! `cosid.status`: one row per generator of this server, from shared memory, in the shape the
//! calling SQL declares. Each version's SQL binds `cosid.generator_status()` to a C symbol of its
//! own (so that the SQL of a version cannot be bound to the function of an older library still
//! loaded in a running server); all of them fill the columns their SQL declares, by name, from
//! the one declaration of the columns (`status_row.rs`), as pg_stat_statements serves the shapes
//! of its versions.

use super::status_row::{status_rows, Column, COLUMNS};
use crate::error::CosidError;
use pgrx::heap_tuple::PgHeapTuple;
use pgrx::prelude::*;
use pgrx::{AllocatedByRust, PgTupleDesc};

/// Rows of the caller's shape: of a `cosid.status` of some version.
type StatusRows = SetOfIterator<'static, PgHeapTuple<'static, AllocatedByRust>>;

#[pg_schema]
mod cosid {
    use super::rows_in_callers_shape;
    use pgrx::composite_type;
    use pgrx::prelude::*;

    /// The rows of the view `cosid.status`, in the shape of this version's SQL (below). Its C
    /// symbol is new in 0.5.0.
    #[pg_extern(sql = false, volatile, parallel_safe)]
    fn generator_status_v5(
        fcinfo: pg_sys::FunctionCallInfo,
    ) -> SetOfIterator<'static, composite_type!('static, "cosid.status")> {
        rows_in_callers_shape(fcinfo)
    }

    /// For the SQL of 0.4.0, which calls this symbol until `ALTER EXTENSION cosid UPDATE`.
    #[pg_extern(sql = false, volatile, parallel_safe)]
    fn generator_status_v4(
        fcinfo: pg_sys::FunctionCallInfo,
    ) -> SetOfIterator<'static, composite_type!('static, "cosid.status")> {
        rows_in_callers_shape(fcinfo)
    }

    /// For the SQL of 0.3.0: a server restarted onto this library serves `cosid.status` until
    /// `ALTER EXTENSION cosid UPDATE`.
    #[pg_extern(sql = false, volatile, parallel_safe)]
    fn generator_status_v3(
        fcinfo: pg_sys::FunctionCallInfo,
    ) -> SetOfIterator<'static, composite_type!('static, "cosid.status")> {
        rows_in_callers_shape(fcinfo)
    }

    /// For the SQL of 0.2.0, as for 0.3.0.
    #[pg_extern(sql = false, volatile, parallel_safe)]
    fn generator_status_v2(
        fcinfo: pg_sys::FunctionCallInfo,
    ) -> SetOfIterator<'static, composite_type!('static, "cosid.status")> {
        rows_in_callers_shape(fcinfo)
    }

    /// For the SQL of 0.1.0, as for 0.3.0.
    #[pg_extern(sql = false, volatile, parallel_safe)]
    fn generator_status(
        fcinfo: pg_sys::FunctionCallInfo,
    ) -> SetOfIterator<'static, composite_type!('static, "cosid.status")> {
        rows_in_callers_shape(fcinfo)
    }
}

/// Every row of `cosid.status`, each with the columns the calling function's result type
/// declares, by name. A declared column this library does not make, or makes with another type,
/// is refused rather than filled with something else.
fn rows_in_callers_shape(fcinfo: pg_sys::FunctionCallInfo) -> StatusRows {
    let tupdesc = callers_tupdesc(fcinfo);
    let columns: Vec<Option<&'static Column>> = tupdesc
        .iter()
        .map(|attribute| {
            if attribute.attisdropped {
                return None;
            }
            let name = attribute.name();
            let column = COLUMNS.iter().find(|column| column.name == name);
            match column {
                Some(column) if (column.type_oid)() == attribute.atttypid => Some(column),
                Some(_) => shape_error(format!("its column \"{name}\" has another type")).raise(),
                None => {
                    shape_error(format!("it has a column \"{name}\" cosid does not make")).raise()
                }
            }
        })
        .collect();
    // The columns of one version, in their order: those of the latest version declared, and
    // the ones before it.
    let declared: Vec<&str> = columns.iter().flatten().map(|column| column.name).collect();
    if let Some(version) = columns.iter().flatten().map(|column| column.since).max() {
        let of_version: Vec<&str> = COLUMNS
            .iter()
            .filter(|column| column.since <= version)
            .map(|column| column.name)
            .collect();
        if declared != of_version {
            shape_error(format!(
                "its columns are not those of cosid {} ({})",
                version.name(),
                of_version.join(", ")
            ))
            .raise();
        }
    }
    let tuples: Vec<_> = status_rows()
        .iter()
        .map(|row| {
            let datums = columns
                .iter()
                .map(|column| column.and_then(|column| (column.value)(row)));
            // SAFETY: the descriptor is the blessed copy made for this call, in the memory
            // context of the whole call (pgrx runs the first call of a set-returning function
            // there), which outlives every tuple; each datum is of its attribute's type, checked
            // above, or NULL.
            let tupdesc = unsafe { PgTupleDesc::from_pg_unchecked(tupdesc.as_ptr()) };
            // SAFETY: as above.
            unsafe { PgHeapTuple::from_datums(tupdesc, datums) }
                .unwrap_or_else(|why| shape_error(format!("{why}")).raise())
        })
        .collect();
    SetOfIterator::new(tuples)
}

/// The calling function's result type, as its SQL declares it, blessed so that its rows can be
/// returned one at a time.
fn callers_tupdesc(fcinfo: pg_sys::FunctionCallInfo) -> PgTupleDesc<'static> {
    let mut tupdesc: pg_sys::TupleDesc = std::ptr::null_mut();
    // SAFETY: PostgreSQL passes a valid fcinfo for this call. For a function with OUT columns,
    // get_call_result_type makes a descriptor of them in the current memory context (the
    // call's, see above).
    let class = unsafe { pg_sys::get_call_result_type(fcinfo, std::ptr::null_mut(), &mut tupdesc) };
    if class != pg_sys::TypeFuncClass::TYPEFUNC_COMPOSITE || tupdesc.is_null() {
        shape_error("it does not return rows of columns".to_string()).raise();
    }
    // SAFETY: tupdesc is the descriptor made above; blessing registers it as a record type of
    // this backend, which the rows returned name.
    unsafe {
        pg_sys::BlessTupleDesc(tupdesc);
        PgTupleDesc::from_pg_unchecked(tupdesc)
    }
}

fn shape_error(why: String) -> CosidError {
    CosidError::new(
        PgSqlErrorCode::ERRCODE_DATATYPE_MISMATCH,
        "cosid.generator_status() is not declared as any version of cosid declares it",
    )
    .detail(format!(
        "The result type of cosid.generator_status() was changed: {why}."
    ))
    .hint("If the extension is of an older version than the library, update it (ALTER EXTENSION cosid UPDATE); otherwise drop it and create it again.")
}

extension_sql!(
    r#"
CREATE  FUNCTION cosid."generator_status"() RETURNS TABLE (
	"name" TEXT,
	"namespace" text,
	"distributor" TEXT,
	"instance_id" TEXT,
	"state" TEXT,
	"machine_id" INT,
	"expires_at" timestamp with time zone,
	"last_renewed_at" timestamp with time zone,
	"last_error" TEXT,
	"watermark" timestamp with time zone,
	"epoch" timestamp with time zone,
	"time_unit" TEXT,
	"timestamp_bits" INT,
	"machine_bits" INT,
	"sequence_bits" INT,
	"sequence_reset_threshold" bigint,
	"last_timestamp" timestamp with time zone,
	"ids_issued" bigint,
	"next_tick_waits" bigint,
	"clock_backwards_waits" bigint,
	"clock_backwards_errors" bigint,
	"safe_guard_duration" interval,
	"guarder_delay" interval,
	"clock_backwards_spin_threshold" interval,
	"clock_backwards_broken_threshold" interval,
	"deadline" timestamp with time zone,
	"safe_guard_margin" interval,
	"renewal_failures" bigint,
	"problem" TEXT
)
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'generator_status_v5_wrapper';
CREATE VIEW cosid.status AS SELECT * FROM cosid.generator_status();
COMMENT ON VIEW cosid.status IS 'One row per cosid generator of this server: configuration and state.';
COMMENT ON COLUMN cosid.status.deadline IS 'When cosid_next() starts refusing unless a lease renewal succeeds first; NULL when the generator has no machine id or no deadline.';
COMMENT ON COLUMN cosid.status.safe_guard_margin IS 'The part of safe_guard_duration kept back for clock skew: the deadline is the last successful renewal''s sending plus safe_guard_duration minus this.';
COMMENT ON COLUMN cosid.status.last_error IS 'Why the generator is not UP; to roles that are not superusers only the kind of problem, since a store error can name hosts and users.';
COMMENT ON COLUMN cosid.status.problem IS 'Why the generator is not UP, as a code for machines: exhausted, store_error, store_read_only, store_settling, lost, clock_behind, clock_ahead, history, state_file, settings, ...; NULL when UP or when the kind is not known.';
COMMENT ON COLUMN cosid.status.renewal_failures IS 'Lease renewals that did not renew since the server started: the store failed (DOWN) or no longer showed the lease (LOST); NULL without a lease.';
-- Monitoring, as PostgreSQL's own statistics views: members of pg_monitor read the view (the
-- function hides what only superusers may see); nobody else calls the function.
REVOKE ALL ON FUNCTION cosid.generator_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION cosid.generator_status() TO pg_monitor;
GRANT SELECT ON TABLE cosid.status TO pg_monitor;
"#,
    name = "status_view",
    requires = ["lease_store"]
);
