# The commands of the README. Each does its own set-up on a fresh Debian 12 machine.
PG_CONFIG ?= /usr/lib/postgresql/15/bin/pg_config
COSID_PORT ?= 5499
export PG_CONFIG COSID_PORT

# The install scripts of released versions, kept so that CREATE EXTENSION cosid VERSION '0.1.0'
# and its update path work (cargo pgrx install copies only the update scripts).
OLD_INSTALL_SCRIPTS = $(foreach f,$(wildcard sql/cosid--*.sql),$(if $(findstring --,$(f:sql/cosid--%=%)),,$(f)))

.PHONY: setup install run stop test unit-test lint integration-test test-faults bench package

setup:
	scripts/setup.sh

# Builds the extension and installs it into PostgreSQL 15 (needs root, or sudo for the copy).
install: setup
	cargo pgrx install --release --pg-config $(PG_CONFIG) $(if $(filter 0,$(shell id -u)),,--sudo)
	$(if $(filter 0,$(shell id -u)),,sudo) install -m 644 $(OLD_INSTALL_SCRIPTS) "$$($(PG_CONFIG) --sharedir)/extension/"

# A local cluster with cosid preloaded, a demo, and the psql line to connect.
run: install
	scripts/dev-cluster.sh start

stop:
	scripts/dev-cluster.sh stop

# Everything: formatting and lints, the pure unit tests, and the tests against real servers.
test: install lint unit-test integration-test

unit-test:
	cargo test -p cosid-core

lint:
	cargo fmt --all -- --check
	cargo clippy --release --all-targets -- -D warnings

integration-test: install
	cd tests && python3 -m unittest -v test_sql_surface test_upgrade test_settings test_concurrency test_lease test_hostile test_clock test_fleet test_faults test_load test_package

# The fault-injection suite with a longer randomized mix of faults (test runs 3 rounds of it).
test-faults: install
	cd tests && COSID_FAULT_ROUNDS=$${COSID_FAULT_ROUNDS:-20} python3 -m unittest -v test_faults test_load

bench: install
	python3 bench/bench.py

# Installable packages in target/packages: a .deb for Debian's PostgreSQL 15, and a tarball for
# each tested PostgreSQL version that is installed (scripts/package.sh; README, "Installing from
# a package").
package: setup
	scripts/package.sh
