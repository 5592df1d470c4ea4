//! The catalog comments of the extension's objects (`\df+ cosid*`, `\dv+ cosid.*`), in one place:
//! pgrx 0.18.1 writes no `COMMENT ON` for a function's doc comment.
//!
//! The lease store's objects are commented here, after `lease_store.sql` ran, rather than in
//! that file: `lease_store.sql` is also a shared store's install script, and a change to it is a
//! new store version, which every fleet would have to apply. A shared store installed with
//! `psql -f lease_store.sql` therefore has no comments on its functions.
//!
//! Objects created elsewhere in `src/` with a `COMMENT` next to them (the tables
//! `cosid.generator` and `cosid.generator_namespace`, the view `cosid.status`, the lease tables
//! of `lease_store.sql`) are not repeated here.

use pgrx::prelude::*;

extension_sql!(
    r#"
COMMENT ON SCHEMA cosid IS 'Internal objects of the extension cosid: the machine-id lease table and its protocol, the named generators'' definitions, and the views status and leases.';
COMMENT ON FUNCTION cosid_next() IS 'The next id of the server''s default cosid generator: a unique, time-ordered, non-negative bigint.';
COMMENT ON FUNCTION cosid_next(text) IS 'The next id of the named cosid generator (''default'' is the server''s own).';
COMMENT ON FUNCTION cosid_decode(bigint) IS 'The parts of a cosid id: its timestamp, machine id and sequence; NULL for a NULL id.';
COMMENT ON FUNCTION cosid_decode(bigint, text) IS 'The parts of an id of the named cosid generator: its timestamp, machine id and sequence; NULL for a NULL id.';
COMMENT ON FUNCTION cosid_timestamp(bigint) IS 'The timestamp of a cosid id.';
COMMENT ON FUNCTION cosid_timestamp(bigint, text) IS 'The timestamp of an id of the named cosid generator.';
COMMENT ON FUNCTION cosid_from_timestamp(timestamptz) IS 'The smallest cosid id at that instant (machine id 0, sequence 0): a lower bound for range scans.';
COMMENT ON FUNCTION cosid_from_timestamp(timestamptz, text) IS 'The smallest id of the named cosid generator at that instant (machine id 0, sequence 0): a lower bound for range scans.';
COMMENT ON FUNCTION cosid_friendly(bigint) IS 'CosId''s friendly form of an id in UTC: yyyyMMddHHmmssSSS-machine-sequence (yyyyMMddHHmmss-machine-sequence for the second unit).';
COMMENT ON FUNCTION cosid_friendly(bigint, text) IS 'CosId''s friendly form in UTC of an id of the named cosid generator.';
COMMENT ON FUNCTION cosid_from_friendly(text) IS 'The cosid id of a friendly form, padded (20220320053617924-0005-0000) or not (20220320053617924-5-0).';
COMMENT ON FUNCTION cosid_from_friendly(text, text) IS 'The id of a friendly form, in the layout of the named cosid generator.';
COMMENT ON FUNCTION cosid_to_radix62(bigint) IS 'CosId''s Radix62 form of an id: 11 characters of 0-9, A-Z and a-z.';
COMMENT ON FUNCTION cosid_to_radix62(bigint, text) IS 'CosId''s Radix62 form of an id, checked to fit the named cosid generator''s layout.';
COMMENT ON FUNCTION cosid_from_radix62(text) IS 'The cosid id of a Radix62 form, padded to 11 characters or not.';
COMMENT ON FUNCTION cosid_from_radix62(text, text) IS 'The id of a Radix62 form, checked to fit the named cosid generator''s layout.';
COMMENT ON FUNCTION cosid_create_generator(text, text, text, integer, integer, integer, timestamptz, text, integer) IS 'Defines a named cosid generator, in the database cosid.database; usable from every database of the server within about a second. Superusers only.';
COMMENT ON FUNCTION cosid_drop_generator(text) IS 'Drops a named cosid generator at commit: its calls are refused at once, and its machine id is released. Superusers only.';
COMMENT ON TYPE cosid.decoded IS 'The parts of a cosid id, as cosid_decode returns them.';
COMMENT ON COLUMN cosid.decoded.ts IS 'The id''s timestamp.';
COMMENT ON COLUMN cosid.decoded.machine_id IS 'The machine id of the server that issued the id.';
COMMENT ON COLUMN cosid.decoded.sequence IS 'The id''s sequence number within its timestamp and machine id.';
COMMENT ON FUNCTION cosid.generator_status() IS 'The rows of the view cosid.status.';
COMMENT ON VIEW cosid.leases IS 'The machine-id leases of this database''s lease table, without claim tokens: holder, status, time left and watermark. Superusers only.';
COMMENT ON FUNCTION cosid.lease_rows() IS 'The rows of the view cosid.leases.';
COMMENT ON FUNCTION cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint, text, boolean) IS 'Lease protocol: claims a machine id of a namespace for a holder, which then waits for the returned watermark; answers settling while the store settles after its identity changed. Called by the cosid background worker.';
COMMENT ON FUNCTION cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint, text) IS 'Lease protocol: the claim as servers of cosid 0.2.0 to 0.4.0 call it, answering contended while the store settles.';
COMMENT ON FUNCTION cosid.lease_claim(text, integer, text, boolean, bigint, text, bigint) IS 'Lease protocol: the claim as servers of cosid 0.1.0 call it, without a layout.';
COMMENT ON FUNCTION cosid.lease_renew(text, integer, text, text, bigint, bigint, boolean) IS 'Lease protocol: renews a lease this holder holds and raises its watermark; no row means the lease is lost. While the store settles, a lease it shows expired only for a holder still generating.';
COMMENT ON FUNCTION cosid.lease_renew(text, integer, text, text, bigint, bigint) IS 'Lease protocol: the renewal as servers of cosid 0.1.0 to 0.4.0 call it.';
COMMENT ON FUNCTION cosid.store_identity_now() IS 'Lease protocol: this database''s identity now (system identifier, database oid, lease table oid, timeline, start of the server).';
COMMENT ON FUNCTION cosid.store_of(text) IS 'Lease protocol: the part of a store identity that names the store itself (cluster, database, lease table), without the timeline and the start.';
COMMENT ON FUNCTION cosid.store_caller_is_local() IS 'Lease protocol: whether the caller is one of this server''s own cosid background workers.';
COMMENT ON FUNCTION cosid.store_holder_seen() IS 'Lease protocol: records, once, that a holder other than this server''s own cosid workers wrote a lease here, after which a start of this server settles for its own workers too.';
COMMENT ON FUNCTION cosid.store_max_clock_lead_ms() IS 'Lease protocol: how far ahead of the store''s clock a holder''s clock may run, in milliseconds (cosid.store_settings.max_clock_lead).';
COMMENT ON FUNCTION cosid.lease_store_identity() IS 'Lease protocol: this store''s identity (system identifier, database, lease table, timeline, start), which a holder compares with the latest timeline it saw the store on.';
COMMENT ON FUNCTION cosid.store_settles_at(bigint) IS 'Lease protocol: until when the store hands out no released, new or expired machine id after its identity changed (a promotion, a point-in-time recovery, a restore, a start of its server), NULL when it need not; and its identity now.';
COMMENT ON FUNCTION cosid.store_guard_given(bigint) IS 'Lease protocol: records the safe guard a holder gave with a lease it wrote, if it is the longest yet, which the store settles for after its identity changed.';
COMMENT ON FUNCTION cosid.cosid_machine_settles_at(bigint) IS 'Lease protocol: for servers that lease from CosId''s JDBC table cosid_machine in this database, until when the store settles after its identity changed, the floor of a row taken now, the store''s clock and how far ahead of it a holder''s clock may run.';
COMMENT ON FUNCTION cosid.machine_lease_merge() IS 'Trigger of cosid.machine_lease: merges a restored row (pg_restore) into the row its machine id already has, keeping the higher watermark, instead of failing the COPY; refuses a row of another id layout than its namespace, or one that overlaps a claim held.';
COMMENT ON FUNCTION cosid.lease_release(text, integer, text, text, bigint) IS 'Lease protocol: releases a lease with the exact last timestamp the holder issued; true if the lease was still the holder''s.';
COMMENT ON FUNCTION cosid.lease_retire(text, integer) IS 'Deletes the lease rows of a machine id, or of a whole namespace, no longer used, so that it counts as never used; refused while a lease is held or its watermark is less than a minute old. Superusers only.';
COMMENT ON FUNCTION cosid.lease_namespace_layout(text) IS 'The id layout a namespace of the lease table keeps; NULL for a namespace without one.';
COMMENT ON FUNCTION cosid.lease_next_floor_ms(cosid.machine_lease) IS 'Lease protocol: what the next holder of a lease waits for, in Unix milliseconds: the exact last timestamp of a release, else the watermark.';
COMMENT ON FUNCTION cosid.unix_ms(timestamptz) IS 'Lease protocol: a timestamp as Unix milliseconds.';
COMMENT ON FUNCTION cosid.machine_lease_guard() IS 'Trigger of cosid.machine_lease: refuses DELETE, TRUNCATE, a lowered watermark and a changed key (rows are deleted only by cosid.lease_retire).';
COMMENT ON FUNCTION cosid.lease_store_version() IS 'The version of the lease store''s SQL, which its update scripts check.';
"#,
    name = "comments",
    requires = [
        "lease_store",
        "decoded_type",
        cosid_next,
        cosid_next_named,
        cosid_decode_v4,
        cosid_decode_named_v4,
        cosid_timestamp,
        cosid_timestamp_named,
        cosid_from_timestamp,
        cosid_from_timestamp_named,
        cosid_friendly,
        cosid_friendly_named,
        cosid_from_friendly,
        cosid_from_friendly_named,
        cosid_to_radix62,
        cosid_to_radix62_named,
        cosid_from_radix62,
        cosid_from_radix62_named,
        cosid_create_generator_v5,
        cosid_drop_generator,
        "status_view"
    ]
);
