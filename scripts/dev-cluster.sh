#!/usr/bin/env bash
# A local PostgreSQL cluster with cosid preloaded, for trying cosid out, run by the PostgreSQL
# whose pg_config is $PG_CONFIG (Debian's PostgreSQL 15 by default):
#   dev-cluster.sh start   create it (first time), start it, create the extension, show a demo
#   dev-cluster.sh stop    stop it
# It runs as the postgres user, listens on 127.0.0.1:$COSID_PORT (5499 by default) and keeps its
# data in target/dev-cluster/pg<major version>. It leases its machine id from the lease table in
# database postgres. Authentication is "trust": it is for local use only.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
PG_BIN=$("$PG_CONFIG" --bindir)
PORT=${COSID_PORT:-5499}
MAJOR=$("$PG_CONFIG" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
BASE="$ROOT/target/dev-cluster/pg$MAJOR"
DATA="$BASE/data"
LOG="$BASE/server.log"

as_postgres() {
    if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- env -u RUST_BACKTRACE "$@"; else "$@"; fi
}
psql_cmd() { "$PG_BIN/psql" -X -h 127.0.0.1 -p "$PORT" -U postgres "$@"; }

start() {
    if [ ! -f "$DATA/PG_VERSION" ]; then
        mkdir -p "$BASE"
        [ "$(id -u)" -eq 0 ] && chown postgres: "$BASE"
        as_postgres "$PG_BIN/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 --locale=C >/dev/null
        cat >>"$DATA/postgresql.conf" <<CONF

# cosid development cluster
listen_addresses = '127.0.0.1'
unix_socket_directories = '$BASE'
shared_preload_libraries = 'cosid'
CONF
    fi
    local build
    build=$(sha256sum "$("$PG_CONFIG" --pkglibdir)/cosid.so" | cut -d' ' -f1)
    if ! as_postgres "$PG_BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
        as_postgres "$PG_BIN/pg_ctl" -D "$DATA" -l "$LOG" -o "-p $PORT" -w start >/dev/null
    elif [ "$build" != "$(cat "$BASE/loaded-build" 2>/dev/null)" ]; then
        echo "cosid: restarting the running cluster to load the newly installed build"
        as_postgres "$PG_BIN/pg_ctl" -D "$DATA" -l "$LOG" -o "-p $PORT" -w restart >/dev/null
    else
        echo "cosid: reusing the running cluster in $DATA"
    fi
    echo "$build" >"$BASE/loaded-build"
    psql_cmd -q -d postgres -v ON_ERROR_STOP=1 -c "CREATE EXTENSION IF NOT EXISTS cosid"
    # The background worker leases a machine id within a second of the extension's creation.
    for _ in $(seq 50); do
        [ "$(psql_cmd -At -d postgres -c "SELECT state FROM cosid.status")" = UP ] && break
        sleep 0.2
    done
    psql_cmd -q -d postgres -v ON_ERROR_STOP=1 <<'SQL'
SET client_min_messages = warning;
DROP TABLE IF EXISTS cosid_demo;
CREATE TABLE cosid_demo (id bigint PRIMARY KEY DEFAULT cosid_next(), item text);
INSERT INTO cosid_demo (item) VALUES ('apple'), ('pear'), ('plum');
\echo
\echo '-- CREATE TABLE cosid_demo (id bigint PRIMARY KEY DEFAULT cosid_next(), item text);'
\echo '-- SELECT id, item, d.*, cosid_friendly(id), cosid_to_radix62(id) FROM cosid_demo, cosid_decode(id) d;'
SELECT id, item, d.*, cosid_friendly(id) AS friendly, cosid_to_radix62(id) AS radix62
  FROM cosid_demo, cosid_decode(id) d ORDER BY id;
SELECT namespace, distributor, instance_id, state, machine_id, expires_at, ids_issued
  FROM cosid.status;
SELECT namespace, machine_id, instance_id, status, time_left FROM cosid.leases;
SQL
    echo "cosid is running. Connect with:"
    echo "  psql -h 127.0.0.1 -p $PORT -U postgres postgres"
    echo "Stop it with: make stop$([ "$MAJOR" = 15 ] || echo " PG=$MAJOR")"
}

stop() {
    if [ -f "$DATA/postmaster.pid" ]; then
        as_postgres "$PG_BIN/pg_ctl" -D "$DATA" -m fast -w stop
    else
        echo "cosid: no cluster is running in $DATA"
    fi
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
