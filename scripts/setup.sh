#!/usr/bin/env bash
# Installs what building and testing cosid needs, skipping whatever is already there:
# Debian's PostgreSQL 15 with its server headers, clang for bindgen, cargo-pgrx 0.18.1 (which
# must match the pgrx version in Cargo.toml exactly), and pgrx's registration of PostgreSQL 15.
set -euo pipefail

PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
PGRX_VERSION=0.18.1
packages=(postgresql-15 postgresql-client-15 postgresql-server-dev-15 libclang-dev clang sudo libfaketime libssl-dev pkg-config openssl)

sudo_if_needed() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
        || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    sudo_if_needed apt-get update -qq
    sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi

if ! cargo pgrx --version 2>/dev/null | grep -q " ${PGRX_VERSION}\$"; then
    echo "setup: installing cargo-pgrx ${PGRX_VERSION} (about 12 minutes the first time)"
    cargo install cargo-pgrx --version "${PGRX_VERSION}" --locked
fi

if ! grep -qs '^pg15 *=' "${PGRX_HOME:-$HOME/.pgrx}/config.toml"; then
    cargo pgrx init --pg15 "$PG_CONFIG"
fi
