#!/usr/bin/env bash
# The compiler wrapper of scripts/no-headers.sh (RUSTC_WRAPPER): runs rustc with its arguments,
# adding `--cfg docsrs` when the crate compiled is pgrx-pg-sys, so that it takes pgrx's
# pregenerated bindings. Only that crate: other crates read the same cfg as a request for
# nightly-only documentation features (which is why RUSTFLAGS cannot carry it).
set -euo pipefail

rustc=$1
shift
extra=()
previous=
for argument in "$@"; do
    if [ "$previous" = "--crate-name" ] && [ "$argument" = "pgrx_pg_sys" ]; then
        extra=(--cfg docsrs)
    fi
    previous=$argument
done
exec ${COSID_INNER_RUSTC_WRAPPER:+"$COSID_INNER_RUSTC_WRAPPER"} "$rustc" "$@" "${extra[@]}"
