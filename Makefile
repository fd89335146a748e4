# Two commands matter: `make demo` and `make test`. Both set up what they need.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(abspath $(VENV))/bin
export PATH := $(BIN):$(PATH)
export ANSIBLE_CONFIG := $(abspath ansible.cfg)
# TEST HARNESS: the connection to the podman test hosts (nsenter with pipelining; see the plugin).
export ANSIBLE_CONNECTION_PLUGINS := $(abspath tests/harness/connection_plugins)
export PYTHONDONTWRITEBYTECODE := 1
# The collections of the ansible package the project uses (requirements.yml, ansible.cfg, the roles).
COLLECTIONS := ansible/posix community/general containers/podman
# Molecule scenarios run by `make test`, in order.
SCENARIOS ?= nvidia_cuda nvidia_cuda_preinstalled gpu_preflight sglang_build sglang_eagle3_patch sglang_model sglang_server sglang_bench multihost default
# TEST HARNESS: every Python the test targets start loads the test-speed hooks first
# (tests/harness/startup/sitecustomize.py: zip_pycache and ansiballz_cache); the venv holds none of them.
HARNESS_PYTHONPATH = PYTHONPATH="$(abspath tests/harness/startup)$${PYTHONPATH:+:$$PYTHONPATH}"
HARNESS_ENV = $(HARNESS_PYTHONPATH) \
              TESTHOST_IMAGE="$$($(PYTHON) tests/harness/hostsetup.py --print-image)" \
              SGLANG_SOURCES_DIR="$$($(PYTHON) tests/harness/sources.py)" \
              NVIDIA_MIRROR_DIR="$$($(PYTHON) tests/harness/mirror.py)" \
              MODEL_FIXTURES_DIR="$$($(PYTHON) tests/harness/synthetic_model.py fixtures)"

.PHONY: help venv hostsetup mirror sources fixtures lint pytest molecule test demo demo-clean clean

help:
	@echo "make demo   converge site.yml against a local simulated GPU host and print the report"
	@echo "make test   lint, then pytest and every molecule scenario ($(SCENARIOS)), three at a time"
	@echo "make lint | pytest | molecule [SCENARIOS=...] | demo-clean | clean"

$(VENV)/.stamp: requirements.txt
	$(PYTHON) -m venv $(VENV)
	# Bytecode for everything but the ~80 collections the ansible package bundles and this project does
	# not use (half of pip's compile time; the recipes export PYTHONDONTWRITEBYTECODE).
	$(BIN)/pip install -q --disable-pip-version-check --no-compile -r requirements.txt
	site=$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') && \
	  $(BIN)/python -m compileall -q -j 0 -x '/site-packages/ansible_collections/' "$$site" >/dev/null && \
	  $(BIN)/python -m compileall -q -j 0 $(addprefix "$$site"/ansible_collections/,$(COLLECTIONS)) >/dev/null
	touch $@

# The venv holds the requirements only. Earlier versions also installed the test hooks into it (a .pth
# that every interpreter start imported); a venv made then loses them here (the test targets load them
# through HARNESS_PYTHONPATH).
venv: $(VENV)/.stamp
	@rm -f $(BIN)/../lib/python3*/site-packages/{zip_pycache.pth,zip_pycache.py,ansiballz_cache.py}

# Podman, runc, containers.conf and the debootstrap test-host image (cached).
hostsetup:
	$(PYTHON) tests/harness/hostsetup.py

# The local signed NVIDIA test mirror (cached).
mirror:
	$(PYTHON) tests/harness/mirror.py

# Real SGLang/FlashInfer sources as local git repositories, and a wheelhouse (cached).
sources:
	$(PYTHON) tests/harness/sources.py

# Synthetic models for the Hub test double, its wheelhouse, the double itself (cached).
fixtures:
	$(PYTHON) tests/harness/synthetic_model.py fixtures

lint: venv
	yamllint -s .
	ansible-lint
	ruff check .

pytest: venv hostsetup mirror sources fixtures
	$(HARNESS_ENV) pytest -q tests

molecule: venv hostsetup mirror sources fixtures
	@for s in $(SCENARIOS); do \
	  echo "== molecule test -s $$s"; start=$$(date +%s); \
	  $(HARNESS_ENV) molecule test -s $$s; \
	  echo "== molecule $$s: $$(( $$(date +%s) - start )) s"; \
	done

# Lint, pytest and the scenarios three at a time (TEST_JOBS=2 for two), then the timing tests alone (per-job times at the end).
test: venv hostsetup mirror sources fixtures
	$(HARNESS_ENV) $(BIN)/python tests/harness/run_tests.py --scenarios "$(SCENARIOS)"

demo: venv hostsetup mirror sources fixtures
	$(HARNESS_PYTHONPATH) $(PYTHON) tests/harness/demo.py

demo-clean:
	$(PYTHON) tests/harness/demo.py --down

clean: demo-clean
	rm -rf $(VENV) .pytest_cache
