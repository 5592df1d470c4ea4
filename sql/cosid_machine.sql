-- CosId's JDBC machine-id table, cosid_machine, for PostgreSQL: the columns, key and indexes of
-- CosId's MySQL DDL (cosid-jdbc's init-cosid-mysql.sql), shared by Java services whose CosId
-- uses its JDBC distributor and by cosid servers with cosid.distributor = 'cosid_jdbc'.
-- Run it once in that database, as its owner:
--     psql -d ids -f cosid_machine.sql
-- with cosid's lease store in the same database, which cosid servers ask whether the database
-- may have forgotten claims (a failover, a point-in-time recovery, a restore):
--     psql -d ids -v ON_ERROR_STOP=1 --single-transaction -f lease_store.sql
-- then give each cosid server's role what CosId's JDBC distributor does on this table, and no
-- more, and the lease store's role:
--     GRANT SELECT, INSERT, UPDATE ON public.cosid_machine TO cosid;
--     GRANT cosid_lease_holder TO cosid;
-- Never delete its rows: a machine id whose row is gone is handed out again as new.
CREATE TABLE IF NOT EXISTS public.cosid_machine (
    name            varchar(100) NOT NULL,
    namespace       varchar(100) NOT NULL,
    machine_id      integer      NOT NULL DEFAULT 0,
    last_timestamp  bigint       NOT NULL DEFAULT 0,
    instance_id     varchar(100) NOT NULL DEFAULT '',
    distribute_time bigint       NOT NULL DEFAULT 0,
    revert_time     bigint       NOT NULL DEFAULT 0,
    CONSTRAINT cosid_machine_pk PRIMARY KEY (name)
);
CREATE INDEX IF NOT EXISTS cosid_machine_namespace_idx ON public.cosid_machine (namespace);
CREATE INDEX IF NOT EXISTS cosid_machine_instance_id_idx ON public.cosid_machine (instance_id);
