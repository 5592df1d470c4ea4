#!/usr/bin/env bash
# Runs a command that builds cosid for one PostgreSQL, also when that PostgreSQL has no server
# headers:
#   scripts/no-headers.sh <pg_config> <command> [argument ...]
# With the headers (postgres.h in `pg_config --includedir-server`) the command runs unchanged:
# pgrx's build runs bindgen on them, as for any PostgreSQL packaged with its development files.
# Without them (the tests' build of 17, scripts/setup.sh) it runs with DOCS_RS=1, which makes
# pgrx-pg-sys's build script skip bindgen, and with scripts/rustc-docsrs.sh as the compiler
# wrapper, which gives pgrx-pg-sys, and only it, `--cfg docsrs`: the crate then takes the
# bindings pgrx 0.18.1 ships for each major version (src/include/pg<major>.rs) instead of
# generating them. Those bindings are of pgrx's own minor release of that major; one major's
# servers share an ABI, which PostgreSQL checks when it loads the library (its magic block).
# That needs cosid to be built without pgrx's C shim, which is compiled from the headers
# (Cargo.toml; src/pg_list.rs). A user builds against the headers of their packaged server
# (postgresql-server-dev-<major>), never this way.
# Used by make install, make lint and scripts/package.sh.
set -euo pipefail

pg_config=${1:?usage: $0 <pg_config> <command> [argument ...]}
shift
[ $# -gt 0 ] || { echo "usage: $0 <pg_config> <command> [argument ...]" >&2; exit 2; }

# (A pg_config that is not there is the command's own error to report.)
if [ ! -x "$pg_config" ] || [ -f "$("$pg_config" --includedir-server)/postgres.h" ]; then
    exec "$@"
fi

here=$(cd "$(dirname "$0")" && pwd)
# A compiler wrapper set already in the environment (sccache, say) still runs, inside ours; one
# set only in a cargo configuration file (build.rustc-wrapper) does not: ours takes its place.
export COSID_INNER_RUSTC_WRAPPER=${RUSTC_WRAPPER:-}
export RUSTC_WRAPPER="$here/rustc-docsrs.sh"
export DOCS_RS=1
exec "$@"
