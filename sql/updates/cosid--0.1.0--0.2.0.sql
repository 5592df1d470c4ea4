-- cosid 0.1.0 to 0.2.0: ALTER EXTENSION cosid UPDATE. Run it after the server was restarted
-- with the library of 0.2.0 (see "Upgrading" in the README): the library of 0.1.0 has no
-- function for the new cosid.status, so run earlier it fails and changes nothing.
\echo Use "ALTER EXTENSION cosid UPDATE" to load this file. \quit

-- <lease store>: the statements of lease_store--0.1.0--0.2.0.sql, word for word (an update
-- script cannot include a file; a test compares the two).
--@include updates/lease_store--0.1.0--0.2.0.sql
-- </lease store>

-- The lease rows are dumped with the database (pg_dump, pg_restore): a machine id without a row
-- counts as never used, so a restored database must keep them.
SELECT pg_catalog.pg_extension_config_dump('cosid.machine_lease', '');

-- cosid.status gains the timings in force. Its function is a new C symbol of the 0.2.0 library.
DROP VIEW cosid.status;
DROP FUNCTION cosid.generator_status();
CREATE  FUNCTION cosid."generator_status"() RETURNS TABLE (
	"namespace" TEXT,  /* String */
	"distributor" TEXT,  /* String */
	"instance_id" TEXT,  /* Option < String > */
	"state" TEXT,  /* String */
	"machine_id" INT,  /* Option < i32 > */
	"expires_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"last_renewed_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"last_error" TEXT,  /* Option < String > */
	"watermark" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"epoch" timestamp with time zone,  /* TimestampWithTimeZone */
	"time_unit" TEXT,  /* String */
	"timestamp_bits" INT,  /* i32 */
	"machine_bits" INT,  /* i32 */
	"sequence_bits" INT,  /* i32 */
	"sequence_reset_threshold" bigint,  /* i64 */
	"last_timestamp" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"ids_issued" bigint,  /* i64 */
	"next_tick_waits" bigint,  /* i64 */
	"clock_backwards_waits" bigint,  /* i64 */
	"clock_backwards_errors" bigint,  /* i64 */
	"safe_guard_duration" interval,  /* Option < Interval > */
	"guarder_delay" interval,  /* Option < Interval > */
	"clock_backwards_spin_threshold" interval,  /* Interval */
	"clock_backwards_broken_threshold" interval  /* Interval */
)
STRICT VOLATILE PARALLEL SAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'generator_status_v2_wrapper';

CREATE VIEW cosid.status AS SELECT * FROM cosid.generator_status();
COMMENT ON VIEW cosid.status IS 'One row per cosid generator of this server: configuration and state.';
