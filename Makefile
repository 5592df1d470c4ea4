# The commands of the README. Each does its own set-up on a fresh Debian 12 machine.
#
# PG selects the PostgreSQL major version to build for (15 by default): the packaged server in
# Debian's layout, /usr/lib/postgresql/$(PG), when there is one (Debian's and the PostgreSQL
# project's packages), else the tests' build of that version (scripts/pg-config.sh). PG_CONFIG,
# given instead, names any other PostgreSQL installation. make test builds for each tested
# version, $(TESTED_PG), with the tests' builds, named explicitly. A PostgreSQL without server
# headers (the tests' build of 17) is built for from pgrx's pregenerated bindings
# (scripts/no-headers.sh, which changes nothing when the headers are there).
PG ?= 15
TESTED_PG := 15 16 17 18
ifeq ($(origin PG_CONFIG),undefined)
PG_CONFIG := $(firstword $(wildcard /usr/lib/postgresql/$(PG)/bin/pg_config) \
	$(shell scripts/pg-config.sh $(PG)))
endif
# The tests' build of PG, which tests/suite.py tests (make quick and make integration-test install
# into it, not into a packaged server of the same major).
TEST_PG_CONFIG = $(shell scripts/pg-config.sh $(PG))
COSID_PORT ?= 5499
export PG_CONFIG COSID_PORT

# The update scripts of the extension and of the lease store, made from sql/updates/ and the
# pieces they share into target/sql (scripts/make-sql.py), with the store's install script.
MADE_SQL := target/sql

# The tiers of the integration suite, each a folder of tests/ whose test_*.py files
# tests/suite.py finds: pg_regress golden files, cluster tests, fault and load tests. (The
# unit tier is the core crate's own: cargo test -p cosid-core.)
TIERS := regress cluster faults
# How many test processes run at a time, over every version (tests/suite.py).
TEST_JOBS ?= 6
# The times of the steps before the suite, which it prints with its own.
STEP_TIMES := target/test-step-times.txt
# Runs $(2) and records its time under the name $(1); the shell exits with $(2)'s status if it
# fails (also inside a loop).
timed = start=$$(date +%s); $(2) || exit $$?; echo "$$(( $$(date +%s) - start )) $(1)" >> $(STEP_TIMES)
# The packages that make test's package tests install (tests/cluster/test_package.py), made
# right after each version's build, which they reuse (a few seconds each).
TEST_PACKAGES := target/test-packages
# The build of 0.1.0's library (make old-versions), in a cargo target folder of its own.
OLD_VERSIONS_BUILD = (cd tests && PG_CONFIG="$$(../scripts/pg-config.sh 15)" python3 -m helpers.old_versions)
# The upgrade tests need 0.1.0's library on PostgreSQL 15.
OLD_VERSIONS_FOR = $(if $(filter 15,$(1)),old-versions)

.PHONY: setup build-setup run-setup install sql run stop test test-builds test-packages \
	old-versions-beside quick unit-test old-versions lint integration-test \
	test-faults fault-run plot bench package

# Everything the tests need (scripts/setup.sh); make install needs only build-setup.
setup:
	scripts/setup.sh

build-setup:
	scripts/setup.sh --build

# What make run needs before the build's set-up: the server of its demo (Debian's PostgreSQL 15)
# when it is the one to build for and is not there.
run-setup:
	scripts/setup.sh --build --with-server

# Builds the extension and installs it into that PostgreSQL (sudo for the copy when its folders
# are not writable). Installs only what building needs (build-setup), never the test stack.
install: build-setup sql
	scripts/no-headers.sh $(PG_CONFIG) cargo pgrx install --release --pg-config $(PG_CONFIG) \
		$(if $(shell test -w "$$($(PG_CONFIG) --pkglibdir)" && echo writable),,--sudo)
	$(if $(shell test -w "$$($(PG_CONFIG) --sharedir)/extension" && echo writable),,sudo) \
		install -m 644 $(MADE_SQL)/cosid--*--*.sql "$$($(PG_CONFIG) --sharedir)/extension/"

# The update scripts, made from their sources (fast, and checked each time: a released one must
# come out as it was released).
sql:
	scripts/make-sql.py $(MADE_SQL)

# A local cluster with cosid preloaded, a demo, and the psql line to connect.
run: run-setup install
	scripts/dev-cluster.sh start

stop:
	scripts/dev-cluster.sh stop

# Everything: formatting and lints, the pure unit tests, the build and install for each tested
# PostgreSQL version, then every tier on every version side by side (tests/suite.py), with the
# time of each step, tier and version at the end.
test:
	@mkdir -p target && rm -f $(STEP_TIMES)
	@$(call timed,lint,$(MAKE) --no-print-directory lint)
	@$(call timed,unit tests (core),$(MAKE) --no-print-directory unit-test)
	rm -rf $(TEST_PACKAGES)
	@$(MAKE) --no-print-directory test-builds BUILD_PG="$(firstword $(TESTED_PG))"
	@set -e; setsid $(MAKE) --no-print-directory old-versions-beside & old=$$!; \
	trap 'kill -- -$$old 2>/dev/null' EXIT; trap 'exit 130' INT TERM; \
	$(MAKE) --no-print-directory test-builds BUILD_PG="$(wordlist 2,9,$(TESTED_PG))"; \
	wait $$old; trap - EXIT
	cd tests && COSID_PACKAGE_DIR=$(CURDIR)/$(TEST_PACKAGES) python3 suite.py \
		--versions "$(TESTED_PG)" --jobs $(TEST_JOBS) --steps ../$(STEP_TIMES) $(TIERS)

# make test's builds: for each version of BUILD_PG, the build and install, then its packages for
# the package tests (made from that build: a few seconds).
BUILD_PG ?= $(TESTED_PG)
test-builds:
	@set -e; for version in $(BUILD_PG); do \
		$(call timed,build and install for PostgreSQL $$version,$(MAKE) --no-print-directory \
			install PG=$$version PG_CONFIG="$$(scripts/pg-config.sh $$version)"); \
		$(call timed,packages for PostgreSQL $$version,$(MAKE) --no-print-directory \
			test-packages PG=$$version); \
	done

test-packages:
	COSID_PACKAGE_DIR=$(CURDIR)/$(TEST_PACKAGES) scripts/package.sh "$(TEST_PG_CONFIG)" >/dev/null

# 0.1.0's library, built beside make test's builds of the versions after the first, each of which
# keeps one processor busy for long stretches (the crates that depend on pgrx-pg-sys come one
# after another; the first version's build also compiles every other crate, on both). In a
# session of its own, which make test stops if they fail; its output in a log shown if it fails.
old-versions-beside:
	@$(call timed,0.1.0 for the upgrade tests (beside),$(OLD_VERSIONS_BUILD) \
		> target/old-versions.log 2>&1 || { cat target/old-versions.log; exit 1; })

# The edit-and-test loop, on one version (PG, 15 by default): the lints of that version, the unit
# tests, the build, and the SQL golden files and cluster tests; not the fault and load tier.
quick:
	@mkdir -p target && rm -f $(STEP_TIMES)
	@$(call timed,lint (PostgreSQL $(PG)),$(MAKE) --no-print-directory lint LINT_PG=$(PG))
	@$(call timed,unit tests (core),$(MAKE) --no-print-directory unit-test)
	@$(call timed,build and install for PostgreSQL $(PG),$(MAKE) --no-print-directory install \
		PG_CONFIG="$(TEST_PG_CONFIG)" $(call OLD_VERSIONS_FOR,$(PG)))
	cd tests && python3 suite.py --versions "$(PG)" --jobs $(TEST_JOBS) --steps ../$(STEP_TIMES) \
		regress cluster

unit-test:
	cargo test -p cosid-core

# The library of 0.1.0 for the upgrade tests, which run it on PostgreSQL 15 only (the version it
# was released for), built once into target/old-versions (tests/helpers/old_versions.py).
old-versions: setup
	$(OLD_VERSIONS_BUILD)

# Formatting once; clippy for each tested version's feature (pgrx's bindings differ; LINT_PG
# names fewer), through scripts/no-headers.sh for a version whose build has no server headers
# (17's); pyflakes for the Python of the tests and the benchmark.
LINT_PG ?= $(TESTED_PG)
lint: setup
	cargo fmt --all -- --check
	PYTHONPATH=target/lint/pyflakes-3.2.0-py2.py3-none-any.whl python3 -m pyflakes tests bench scripts
	scripts/import-cycles.py
	cargo clippy -p cosid-core --all-targets -- -D warnings
	set -e; for version in $(LINT_PG); do \
		scripts/no-headers.sh "$$(scripts/pg-config.sh $$version)" \
			cargo clippy --release --all-targets --no-default-features --features pg$$version \
			-- -D warnings; \
	done

# Every tier against one version (PG): its build and install, then tests/suite.py.
integration-test: setup $(call OLD_VERSIONS_FOR,$(PG))
	$(MAKE) --no-print-directory install PG_CONFIG="$(TEST_PG_CONFIG)"
	cd tests && python3 suite.py --versions "$(PG)" --jobs $(TEST_JOBS) $(TIERS)

# The fault-injection scenarios with a longer randomized mix of faults (make test runs 3 rounds
# of it), and the load test, one after another in one process, for the table of
# docs/reliability.md.
test-faults: setup install
	cd tests && COSID_FAULT_ROUNDS=$${COSID_FAULT_ROUNDS:-20} python3 run.py -v faults.test_faults \
		faults.test_load

# The picture of a fault run in docs/reliability.md: `make fault-run` runs the scenario of four
# faults in a row (tests/faults/test_timeline.py) and writes its timeline to
# docs/images/fault-run.json; `make plot` draws docs/images/fault-run.svg from that file.
fault-run: setup install
	cd tests && COSID_TIMELINE=../docs/images/fault-run.json python3 run.py -v faults.test_timeline
	$(MAKE) --no-print-directory plot

plot:
	python3 scripts/plot-fault-run.py docs/images/fault-run.json docs/images/fault-run.svg

bench: setup install
	python3 bench/bench.py

# Installable packages in target/packages: for each tested PostgreSQL version installed, a .deb
# for the packaged server of that major and a tarball (scripts/package.sh; docs/installing.md,
# "Installing from a package").
package: setup
	scripts/package.sh
