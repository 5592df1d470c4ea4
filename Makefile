# The commands of the README. Each does its own set-up on a fresh Debian 12 machine.
#
# PG selects the PostgreSQL major version to build for and test against (15 by default); the
# tested ones are $(TESTED_PG). PG_CONFIG follows from PG (scripts/pg-config.sh), or is given
# instead, to build for any other PostgreSQL installation.
PG ?= 15
TESTED_PG := 15 16 18
ifeq ($(origin PG_CONFIG),undefined)
PG_CONFIG := $(shell scripts/pg-config.sh $(PG))
endif
COSID_PORT ?= 5499
export PG_CONFIG COSID_PORT

# The install scripts of released versions, kept so that CREATE EXTENSION cosid VERSION '0.1.0'
# and its update path work (cargo pgrx install copies only the update scripts).
OLD_INSTALL_SCRIPTS = $(foreach f,$(wildcard sql/cosid--*.sql),$(if $(findstring --,$(f:sql/cosid--%=%)),,$(f)))

# The modules of the integration suite, run against real servers (tests/).
INTEGRATION_TESTS := test_sql_surface test_docs test_errors test_layouts test_decode test_upgrade test_settings \
	test_concurrency test_lease test_generators test_hostile test_clock test_fleet test_faults test_load \
	test_package test_monitoring test_migrate

.PHONY: setup install run stop test unit-test lint integration-test test-faults bench package

setup:
	scripts/setup.sh

# Builds the extension and installs it into that PostgreSQL (sudo for the copy when its folders
# are not writable).
install: setup
	cargo pgrx install --release --pg-config $(PG_CONFIG) \
		$(if $(shell test -w "$$($(PG_CONFIG) --pkglibdir)" && echo writable),,--sudo)
	$(if $(shell test -w "$$($(PG_CONFIG) --sharedir)/extension" && echo writable),,sudo) \
		install -m 644 $(OLD_INSTALL_SCRIPTS) "$$($(PG_CONFIG) --sharedir)/extension/"

# A local cluster with cosid preloaded, a demo, and the psql line to connect.
run: install
	scripts/dev-cluster.sh start

stop:
	scripts/dev-cluster.sh stop

# Everything: formatting and lints, the pure unit tests, then for each tested PostgreSQL version
# the install and the tests against real servers, with the time each version took.
test: lint unit-test
	@set -e; summary=""; \
	for version in $(TESTED_PG); do \
		start=$$(date +%s); \
		$(MAKE) --no-print-directory integration-test PG=$$version \
			PG_CONFIG="$$(scripts/pg-config.sh $$version)"; \
		summary="$$summary  PostgreSQL $$version: install and integration tests in $$(( $$(date +%s) - start )) s\n"; \
	done; \
	printf "make test: all passed\n$$summary"

unit-test:
	cargo test -p cosid-core

# Formatting once; clippy for each tested version's feature (pgrx's bindings differ); pyflakes
# for the Python of the tests and the benchmark.
lint: setup
	cargo fmt --all -- --check
	PYTHONPATH=target/lint/pyflakes-3.2.0-py2.py3-none-any.whl python3 -m pyflakes tests bench scripts
	cargo clippy -p cosid-core --all-targets -- -D warnings
	set -e; for version in $(TESTED_PG); do \
		cargo clippy --release --all-targets --no-default-features --features pg$$version \
			-- -D warnings; \
	done

integration-test: install
	cd tests && python3 run.py -v $(INTEGRATION_TESTS)

# The fault-injection suite with a longer randomized mix of faults (test runs 3 rounds of it).
test-faults: install
	cd tests && COSID_FAULT_ROUNDS=$${COSID_FAULT_ROUNDS:-20} python3 run.py -v test_faults test_load

bench: install
	python3 bench/bench.py

# Installable packages in target/packages: a .deb for Debian's PostgreSQL 15, and a tarball for
# each tested PostgreSQL version that is installed (scripts/package.sh; README, "Installing from
# a package").
package: setup
	scripts/package.sh
