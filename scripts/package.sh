#!/usr/bin/env bash
# Builds installable packages of cosid into target/packages (or $COSID_PACKAGE_DIR):
#   package.sh [pg_config ...]
# For each pg_config given (by default Debian's PostgreSQL 15 and the pg_config of each other
# tested version that is installed, see scripts/pg-config.sh):
# - cosid-<version>-pg<major>-linux-<arch>.tar.gz: lib/cosid.so and share/..., laid out as under
#   `pg_config --pkglibdir` and `pg_config --sharedir`, with INSTALL, LICENSE, README.md, docs/
#   and CHANGELOG.md;
# - postgresql-<major>-cosid_<version>-1_<arch>.deb, for the packaged PostgreSQL of that major
#   (/usr/lib/postgresql/<major>, as Debian's and the PostgreSQL project's packages install it),
#   named and laid out as Debian's own extension packages (postgresql-15-cron,
#   postgresql-15-hypopg), depending on postgresql-<major>; built also from a PostgreSQL in
#   another layout (the tests' builds of 16, 17 and 18), since one major's servers share an ABI.
# A PostgreSQL without server headers (the tests' build of 17) is built for from pgrx's
# pregenerated bindings (scripts/no-headers.sh).
# The extension directory gets cosid.control, the install script cargo-pgrx generates and every
# update script scripts/make-sql.py makes (cosid--A--B.sql). The lease store's SQL for `psql -f`
# (lease_store.sql and its update scripts, also made there), and CosId's table for cosid_jdbc
# (cosid_machine.sql) go to share/contrib/cosid/, where
# PostgreSQL's build system puts SQL scripts that are not an extension's. The library is
# stripped as Debian strips its own.
# Needs cargo-pgrx (make setup), dpkg-dev and python3 (installed when missing); the Maintainer field of the .deb is
# $DEB_MAINTAINER when set.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${COSID_PACKAGE_DIR:-$ROOT/target/packages}
# An absolute path: the steps below run in folders of their own.
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK="$OUT/build"
VERSION=$(sed -n '/^version = /{s/^version = "\(.*\)"$/\1/p;q}' "$ROOT/Cargo.toml")
DEB_REVISION=1
MAINTAINER=${DEB_MAINTAINER:-cosid maintainers <maintainers@cosid.invalid>}
ARCH=$(uname -m)
DEB_ARCH=$(dpkg --print-architecture)
# Every file gets the time of the last commit, so that two builds of one commit are equal. The
# build itself sees SOURCE_DATE_EPOCH only if it was given (cargo_env): openssl-sys's build script
# tracks it, and a value make install's build did not see would rebuild the crates that depend
# on it (a minute per version) instead of reusing that build.
cargo_env=()
[ -n "${SOURCE_DATE_EPOCH:-}" ] || cargo_env=(-u SOURCE_DATE_EPOCH)
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null || date +%s)}
export SOURCE_DATE_EPOCH

sudo_if_needed() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

if ! command -v dpkg-shlibdeps >/dev/null || ! command -v strip >/dev/null \
    || ! command -v python3 >/dev/null; then
    echo "package: installing dpkg-dev, binutils and python3"
    sudo_if_needed apt-get update -qq
    sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dpkg-dev binutils \
        python3
fi

default_pg_configs() {
    local version config
    for version in 15 16 17 18; do
        if [ -x "$ROOT/scripts/pg-config.sh" ]; then
            config=$("$ROOT/scripts/pg-config.sh" "$version")
        else
            config=/usr/lib/postgresql/$version/bin/pg_config
        fi
        if [ -x "$config" ]; then
            echo "$config"
        else
            echo "package: no PostgreSQL $version ($config), no package for it" >&2
        fi
    done
}

if [ $# -gt 0 ]; then
    pg_configs=("$@")
else
    mapfile -t pg_configs < <(default_pg_configs)
fi
[ ${#pg_configs[@]} -gt 0 ] || { echo "package: no pg_config found" >&2; exit 1; }

# Copies a file with mode 0644 (0755 for a directory made on the way).
put() {
    install -D -m 0644 "$1" "$2"
}

# Gives every file and directory under $1 the commit's time.
stamp() {
    find "$1" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
}

# The extension's files for one pg_config, under $1 as relative paths
# lib/cosid.so, share/extension/..., share/contrib/cosid/...
stage() {
    local pg_config=$1 dest=$2 pkgout="$WORK/pgrx-$3" pkglib share
    pkglib=$("$pg_config" --pkglibdir)
    share=$("$pg_config" --sharedir)
    rm -rf "$pkgout" "$dest"
    (cd "$ROOT" && env "${cargo_env[@]}" "$ROOT/scripts/no-headers.sh" "$pg_config" cargo pgrx package \
        --no-default-features --features "pg$3" --pg-config "$pg_config" --out-dir "$pkgout")
    put "$pkgout$pkglib/cosid.so" "$dest/lib/cosid.so"
    strip --remove-section=.comment --remove-section=.note --strip-unneeded "$dest/lib/cosid.so"
    local file name
    for file in "$pkgout$share/extension/"cosid*; do
        put "$file" "$dest/share/extension/$(basename "$file")"
    done
    local made="$WORK/sql-$3"
    rm -rf "$made"
    "$ROOT/scripts/make-sql.py" "$made" >/dev/null
    for file in "$made"/cosid--*--*.sql; do
        name=$(basename "$file")
        if [ -e "$dest/share/extension/$name" ] && ! cmp -s "$file" "$dest/share/extension/$name"; then
            echo "package: the made $name differs from the $name cargo-pgrx copied" >&2
            exit 1
        fi
        put "$file" "$dest/share/extension/$name"
    done
    for file in "$made"/lease_store*.sql "$made"/cosid_machine.sql; do
        put "$file" "$dest/share/contrib/cosid/$(basename "$file")"
    done
    [ -e "$dest/share/extension/cosid--$VERSION.sql" ] \
        || { echo "package: cargo-pgrx made no cosid--$VERSION.sql" >&2; exit 1; }
}

tarball() {
    local major=$1 full=$2 staged=$3 name="cosid-$VERSION-pg$1-linux-$ARCH"
    local dir="$WORK/$name"
    rm -rf "$dir"
    mkdir -p "$dir"
    cp -a "$staged/." "$dir/"
    put "$ROOT/LICENSE" "$dir/LICENSE"
    put "$ROOT/README.md" "$dir/README.md"
    put "$ROOT/CHANGELOG.md" "$dir/CHANGELOG.md"
    # The README links to docs/.
    for file in "$ROOT"/docs/*.md; do
        put "$file" "$dir/docs/$(basename "$file")"
    done
    cat > "$dir/INSTALL" <<EOF
cosid $VERSION for PostgreSQL $major on Linux $ARCH (built against PostgreSQL $full)

The folders here mirror the PostgreSQL installation whose pg_config is \$PG_CONFIG:

  lib/cosid.so                    goes to \$(\$PG_CONFIG --pkglibdir)/
  share/extension/cosid*          goes to \$(\$PG_CONFIG --sharedir)/extension/
  share/contrib/cosid/*.sql       goes to \$(\$PG_CONFIG --sharedir)/contrib/cosid/
                                  (the lease store's SQL, for psql -f on a shared store)

Install, as a user that may write there, from this folder:

  PG_CONFIG=/path/to/bin/pg_config      # of a PostgreSQL $major
  cp lib/cosid.so "\$(\$PG_CONFIG --pkglibdir)/"
  cp share/extension/cosid* "\$(\$PG_CONFIG --sharedir)/extension/"
  mkdir -p "\$(\$PG_CONFIG --sharedir)/contrib/cosid"
  cp share/contrib/cosid/*.sql "\$(\$PG_CONFIG --sharedir)/contrib/cosid/"

The library needs glibc and OpenSSL 3 (libssl.so.3). Then add cosid to shared_preload_libraries
in postgresql.conf, restart the server, and run CREATE EXTENSION cosid (README.md, "Quick start").

Uninstall: DROP EXTENSION cosid in each database that has it (docs/uninstalling.md), remove
cosid from shared_preload_libraries, restart, then

  rm "\$(\$PG_CONFIG --pkglibdir)/cosid.so" "\$(\$PG_CONFIG --sharedir)"/extension/cosid.control \\
     "\$(\$PG_CONFIG --sharedir)"/extension/cosid--*.sql
  rm -r "\$(\$PG_CONFIG --sharedir)/contrib/cosid"
EOF
    chmod 0644 "$dir/INSTALL"
    stamp "$dir"
    tar -C "$WORK" --sort=name --owner=0 --group=0 --numeric-owner -cf - "$name" \
        | gzip -9n > "$OUT/$name.tar.gz"
    echo "package: $OUT/$name.tar.gz"
}

deb() {
    local major=$1 staged=$2 pkglib=$3 share=$4
    local package="postgresql-$major-cosid" debversion="$VERSION-$DEB_REVISION"
    local root="$WORK/$package"
    local doc="$root/usr/share/doc/$package"
    rm -rf "$root"
    put "$staged/lib/cosid.so" "$root$pkglib/cosid.so"
    mkdir -p "$root$share"
    cp -a "$staged/share/." "$root$share/"
    # The README and what it links to (docs/, CHANGELOG.md, LICENSE), left uncompressed so that
    # its links lead where they say; Debian's changelog and copyright beside them.
    put "$ROOT/README.md" "$doc/README.md"
    for file in "$ROOT"/docs/*.md; do
        put "$file" "$doc/docs/$(basename "$file")"
    done
    put "$ROOT/CHANGELOG.md" "$doc/CHANGELOG.md"
    put "$ROOT/LICENSE" "$doc/LICENSE"
    put "$ROOT/CHANGELOG.md" "$doc/changelog"
    gzip -9n "$doc/changelog"
    cat > "$doc/changelog.Debian" <<EOF
cosid ($debversion) unstable; urgency=medium

  * cosid $VERSION for PostgreSQL $major, built by scripts/package.sh.

 -- $MAINTAINER  $(date -u -R -d "@$SOURCE_DATE_EPOCH")
EOF
    gzip -9n "$doc/changelog.Debian"
    local years first last
    # (sed, not head, reads to the end: git must not die of SIGPIPE under pipefail.)
    first=$(git -C "$ROOT" log --reverse --format=%cd --date=format:%Y 2>/dev/null | sed -n 1p || true)
    last=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y)
    years=${first:-$last}
    [ "$years" = "$last" ] || years="$years-$last"
    cat > "$doc/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: cosid

Files: *
Copyright: $years the cosid authors
License: Apache-2.0
Comment: cosid.so also holds the Rust crates it is built from, listed with their versions in the
 source's Cargo.lock, each under its own permissive license (MIT, Apache-2.0, BSD-3-Clause, ISC,
 Zlib, Unicode-3.0).

License: Apache-2.0
 Licensed under the Apache License, Version 2.0 (the "License"); you may not use this file
 except in compliance with the License. You may obtain a copy of the License at
 .
   http://www.apache.org/licenses/LICENSE-2.0
 .
 Unless required by applicable law or agreed to in writing, software distributed under the
 License is distributed on an "AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND,
 either express or implied. See the License for the specific language governing permissions and
 limitations under the License.
 .
 On Debian systems, the full text of the Apache License, Version 2.0 can be found in the file
 /usr/share/common-licenses/Apache-2.0.
EOF
    chmod 0644 "$doc/copyright"

    # The libraries cosid.so links against, as dpkg-shlibdeps finds them (it wants a
    # debian/control to read).
    local shlibs="$WORK/shlibdeps-$major"
    mkdir -p "$shlibs/debian"
    printf 'Source: cosid\n\nPackage: %s\nArchitecture: any\n' "$package" > "$shlibs/debian/control"
    local libs
    libs=$(cd "$shlibs" && dpkg-shlibdeps -O "$root$pkglib/cosid.so" 2>/dev/null \
        | sed -n 's/^shlibs:Depends=//p')
    [ -n "$libs" ] || { echo "package: dpkg-shlibdeps found no dependencies" >&2; exit 1; }

    # Installed-Size in KiB, counted as dpkg-gencontrol does: each file rounded up.
    local size
    size=$(find "$root" -type f -printf '%s\n' | awk '{ kib += int(($1 + 1023) / 1024) } END { print kib }')

    mkdir -p "$root/DEBIAN"
    cat > "$root/DEBIAN/control" <<EOF
Package: $package
Source: cosid
Version: $debversion
Architecture: $DEB_ARCH
Maintainer: $MAINTAINER
Installed-Size: $size
Depends: postgresql-$major, $libs
Section: database
Priority: optional
Description: CosId-compatible Snowflake ids for PostgreSQL $major
 cosid is a PostgreSQL extension that generates 64-bit Snowflake ids inside
 the database, in the layout of the Java library CosId, so that ids made by
 CosId and by cosid decode the same way. Each server leases its machine id
 from a lease table, local or shared by a fleet of servers, and a background
 worker renews the lease. When uniqueness cannot be guaranteed, cosid_next()
 fails instead of issuing an id.
 .
 This package is for PostgreSQL $major; the extension must be loaded with
 shared_preload_libraries.
EOF
    (cd "$root" && find usr -type f | LC_ALL=C sort | xargs md5sum > DEBIAN/md5sums)
    chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/md5sums"
    find "$root" -type d -exec chmod 0755 {} +
    stamp "$root"
    local file="$OUT/${package}_${debversion}_${DEB_ARCH}.deb"
    dpkg-deb --root-owner-group -Zxz --build "$root" "$file" >/dev/null
    echo "package: $file"
}

# The packages of one pg_config.
packages_for() {
    local pg_config=$1 full major pkglib share staged
    full=$("$pg_config" --version | sed -E 's/^PostgreSQL ([^ ]+).*/\1/')
    major=$(echo "$full" | sed -E 's/^([0-9]+).*/\1/')
    pkglib=$("$pg_config" --pkglibdir)
    share=$("$pg_config" --sharedir)
    echo "package: cosid $VERSION for PostgreSQL $full ($pg_config)"
    staged="$WORK/staged-pg$major"
    stage "$pg_config" "$staged" "$major"
    tarball "$major" "$full" "$staged"
    # The .deb is always in the packaged layout, whatever the layout of the PostgreSQL built
    # against: one major's servers share an ABI (the library checks it when it loads).
    deb "$major" "$staged" "/usr/lib/postgresql/$major/lib" "/usr/share/postgresql/$major"
}

# Each version in a subshell of its own, so that one that fails does not stop the others; the
# exit status says whether all succeeded. (Not `( ... ) || ...`: bash ignores set -e there.)
mkdir -p "$OUT" "$WORK"
failed=()
for pg_config in "${pg_configs[@]}"; do
    set +e
    (set -e; packages_for "$pg_config")
    status=$?
    set -e
    [ "$status" -eq 0 ] || failed+=("$pg_config")
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "package: failed for ${failed[*]}" >&2
    exit 1
fi
