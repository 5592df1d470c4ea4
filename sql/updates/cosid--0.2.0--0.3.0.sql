-- cosid 0.2.0 to 0.3.0: ALTER EXTENSION cosid UPDATE. Run it after the server was restarted
-- with the library of 0.3.0 (see "Upgrading" in the README): the library of 0.2.0 has none of
-- the functions below, so run earlier it fails and changes nothing.
\echo Use "ALTER EXTENSION cosid UPDATE" to load this file. \quit

-- <lease store>: the statements of lease_store--0.2.0--0.3.0.sql, word for word (an update
-- script cannot include a file; a test compares the two).
--@include updates/lease_store--0.2.0--0.3.0.sql
-- </lease store>

-- Named generators: their definitions, and the namespaces they used.
CREATE TABLE cosid.generator (
    name           text        PRIMARY KEY
                   CHECK (name ~ '^[A-Za-z][A-Za-z0-9_]{0,62}$' AND name <> 'default'),
    namespace      text        NOT NULL UNIQUE
                   CHECK (octet_length(namespace) BETWEEN 1 AND 63),
    epoch_ms       bigint      NOT NULL,
    time_unit      text        NOT NULL CHECK (time_unit IN ('millisecond', 'second')),
    timestamp_bits integer     NOT NULL CHECK (timestamp_bits >= 1),
    machine_bits   integer     NOT NULL CHECK (machine_bits >= 0),
    sequence_bits  integer     NOT NULL CHECK (sequence_bits >= 1),
    created_at     timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CHECK (timestamp_bits + machine_bits + sequence_bits <= 63)
);
COMMENT ON TABLE cosid.generator IS 'Named cosid generators (cosid_create_generator). Change them only through cosid_create_generator and cosid_drop_generator.';

-- Every namespace a named generator ever used, with its layout: ids of two layouts in one
-- namespace can coincide, so a namespace keeps its layout after its generator is dropped.
CREATE TABLE cosid.generator_namespace (
    namespace     text        PRIMARY KEY,
    layout        text        NOT NULL,
    first_used_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE cosid.generator_namespace IS 'The layout of every namespace a named cosid generator used. Do not delete rows: a namespace must keep its layout.';

SELECT pg_catalog.pg_extension_config_dump('cosid.generator', '');
SELECT pg_catalog.pg_extension_config_dump('cosid.generator_namespace', '');

-- Creating and dropping them: for superusers, and roles they grant it to.
CREATE  FUNCTION "cosid_create_generator"(
	"name" text, /* Option < TextArg > */
	"layout" text DEFAULT 'millisecond', /* Option < TextArg > */
	"namespace" text DEFAULT NULL, /* Option < TextArg > */
	"machine_bits" INT DEFAULT NULL, /* Option < i32 > */
	"sequence_bits" INT DEFAULT NULL, /* Option < i32 > */
	"timestamp_bits" INT DEFAULT NULL, /* Option < i32 > */
	"epoch" timestamp with time zone DEFAULT NULL, /* Option < TimestampWithTimeZone > */
	"time_unit" text DEFAULT NULL /* Option < TextArg > */
) RETURNS void
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'cosid_create_generator_wrapper';
CREATE  FUNCTION "cosid_drop_generator"(
	"name" text /* Option < TextArg > */
) RETURNS void
VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'cosid_drop_generator_wrapper';
REVOKE ALL ON FUNCTION cosid_create_generator(text, text, text, integer, integer, integer, timestamptz, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION cosid_drop_generator(text) FROM PUBLIC;

-- The user functions' forms that take a generator's name.
CREATE  FUNCTION "cosid_next"(
	"generator" text /* Option < GeneratorName > */
) RETURNS bigint /* i64 */
VOLATILE PARALLEL SAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'cosid_next_named_wrapper';
CREATE  FUNCTION "cosid_decode"(
	"id" bigint, /* i64 */
	"generator" text /* GeneratorName */
) RETURNS TABLE (
	"ts" timestamp with time zone,  /* TimestampWithTimeZone */
	"machine_id" INT,  /* i32 */
	"sequence" INT  /* i32 */
)
STRICT STABLE PARALLEL SAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'cosid_decode_named_wrapper';
CREATE  FUNCTION "cosid_timestamp"(
	"id" bigint, /* i64 */
	"generator" text /* GeneratorName */
) RETURNS timestamp with time zone /* TimestampWithTimeZone */
STRICT STABLE PARALLEL SAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'cosid_timestamp_named_wrapper';
CREATE  FUNCTION "cosid_from_timestamp"(
	"ts" timestamp with time zone, /* TimestampWithTimeZone */
	"generator" text /* GeneratorName */
) RETURNS bigint /* i64 */
STRICT STABLE PARALLEL SAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'cosid_from_timestamp_named_wrapper';
CREATE  FUNCTION "cosid_friendly"(
	"id" bigint, /* i64 */
	"generator" text /* GeneratorName */
) RETURNS TEXT /* String */
STRICT STABLE PARALLEL SAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'cosid_friendly_named_wrapper';
CREATE  FUNCTION "cosid_from_friendly"(
	"friendly" text, /* TextArg */
	"generator" text /* GeneratorName */
) RETURNS bigint /* i64 */
STRICT STABLE PARALLEL SAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'cosid_from_friendly_named_wrapper';
CREATE  FUNCTION "cosid_to_radix62"(
	"id" bigint, /* i64 */
	"generator" text /* GeneratorName */
) RETURNS TEXT /* String */
STRICT STABLE PARALLEL SAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'cosid_to_radix62_named_wrapper';
CREATE  FUNCTION "cosid_from_radix62"(
	"radix62" text, /* TextArg */
	"generator" text /* GeneratorName */
) RETURNS bigint /* i64 */
STRICT STABLE PARALLEL SAFE 
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'cosid_from_radix62_named_wrapper';

-- cosid.status gains the generators' names. Its function is a new C symbol of the 0.3.0 library.
DROP VIEW cosid.status;
DROP FUNCTION cosid.generator_status();
CREATE  FUNCTION cosid."generator_status"() RETURNS TABLE (
	"name" TEXT,  /* String */
--@-- The columns after name are 0.2.0's.
--@include updates/cosid--0.1.0--0.2.0.sql
--@from 	"namespace" TEXT,  /* String */
--@until AS 'MODULE_PATHNAME', 'generator_status_v2_wrapper';
AS 'MODULE_PATHNAME', 'generator_status_v3_wrapper';

CREATE VIEW cosid.status AS SELECT * FROM cosid.generator_status();
COMMENT ON VIEW cosid.status IS 'One row per cosid generator of this server: configuration and state.';
