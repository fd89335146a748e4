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
HARNESS_ENV = TESTHOST_IMAGE="$$($(PYTHON) tests/harness/hostsetup.py --print-image)" \
              SGLANG_SOURCES_DIR="$$($(PYTHON) tests/harness/sources.py)" \
              NVIDIA_MIRROR_DIR="$$($(PYTHON) tests/harness/mirror.py)" \
              MODEL_FIXTURES_DIR="$$($(PYTHON) tests/harness/synthetic_model.py fixtures)"

.PHONY: help venv hostsetup mirror sources fixtures lint pytest molecule test demo demo-clean clean

help:
	@echo "make demo   converge site.yml against a local simulated GPU host and print the report"
	@echo "make test   lint, then pytest and every molecule scenario ($(SCENARIOS)), two at a time"
	@echo "make lint | pytest | molecule [SCENARIOS=...] | demo-clean | clean"

$(VENV)/.stamp: requirements.txt tests/harness/zip_pycache.py tests/harness/ansiballz_cache.py
	$(PYTHON) -m venv $(VENV)
	# Bytecode for everything but the ~80 collections the ansible package bundles and this project does
	# not use (half of pip's compile time; the recipes export PYTHONDONTWRITEBYTECODE).
	$(BIN)/pip install -q --disable-pip-version-check --no-compile -r requirements.txt
	site=$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') && \
	  $(BIN)/python -m compileall -q -j 0 -x '/site-packages/ansible_collections/' "$$site" >/dev/null && \
	  $(BIN)/python -m compileall -q -j 0 $(addprefix "$$site"/ansible_collections/,$(COLLECTIONS)) >/dev/null
	# TEST HARNESS: modules Ansible runs on this machine keep their bytecode (tests/harness/zip_pycache.py);
	# within one `make test`, ansible-playbook runs share the module payloads and the parsed routing table
	# (tests/harness/ansiballz_cache.py).
	site=$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') && \
	  cp tests/harness/zip_pycache.py tests/harness/ansiballz_cache.py "$$site/" && \
	  echo "import zip_pycache, ansiballz_cache" > "$$site/zip_pycache.pth"
	touch $@

venv: $(VENV)/.stamp

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

# Lint, pytest and the scenarios two at a time, then the timing tests alone (per-job times at the end).
test: venv hostsetup mirror sources fixtures
	$(HARNESS_ENV) $(BIN)/python tests/harness/run_tests.py --scenarios "$(SCENARIOS)"

demo: venv hostsetup mirror sources fixtures
	$(PYTHON) tests/harness/demo.py

demo-clean:
	$(PYTHON) tests/harness/demo.py --down

clean: demo-clean
	rm -rf $(VENV) .pytest_cache
