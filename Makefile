# nbworkers: everything a fresh machine needs, from the project's own files.
#   make demo   set up, then run a real 2-worker training through the extension (a real kernel)
#   make test   set up, then run the whole test suite: tests/unit, then tests/integration (tools/test_suite.sh)
#   make test-fast   tests/unit only (no process, kernel or TensorFlow; seconds)
#   make test-installed   the tests marked `installed`, against the wheel installed in .venv-installed
#   make docs   the documentation site into build/docs/html/ (docs/; warnings are errors)
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TF215_VENV := .venv-tf215
INSTALLED_VENV := .venv-installed
VERSION := $(shell sed -n 's/^version = "\([^"]*\)".*/\1/p' pyproject.toml)
WHEEL := dist/nbworkers-$(VERSION)-py3-none-any.whl
INSTALLED_EXTRAS := test,ray,tensorboard
STAMP := $(VENV)/.installed
LABEXT_BUILD := extension/labextension
LABEXT_LINK := $(VENV)/share/jupyter/labextensions/nbworkers

.PHONY: setup demo docs test test-deps test-fast test-installed soak lab bench installed-env installed-venv estimator-env browser-deps slurm-deps labextension wheel hub-deps clean

# The sidebar is prebuilt (extension/labextension, committed): setup needs no node. Editable installs skip data
# files, so it is linked where JupyterLab and Notebook 7 look (a regular install copies it there).
setup: $(STAMP)
	@if [ -d $(LABEXT_LINK) ] && [ ! -L $(LABEXT_LINK) ]; then rm -rf $(LABEXT_LINK); fi
	@mkdir -p $(dir $(LABEXT_LINK)) && ln -sfn $(CURDIR)/$(LABEXT_BUILD) $(LABEXT_LINK)

$(STAMP): pyproject.toml setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# PyTorch for --framework torch first: this machine's CPU wheel (the torch extra asks for 2.1 or newer), without
	# compiling its ~2,300 modules' bytecode (7-15 s of CPU and 782 MB, against 27-32 s and 863 MB); then only what its
	# workers import is compiled, once, by importing it (~9 s of CPU; -W ignore: NumPy, which torch warns of, comes next)
	$(PY) -m pip install -q --no-compile 'torch==2.13.0'
	env -u PYTHONDONTWRITEBYTECODE $(PY) -W ignore -c 'import torch.distributed, torch.nn.parallel, torch._dynamo'
	$(PY) -m pip install -q -e '.[test,ray,tensorboard,docs,jax,torch]'
	# editable installs skip data files: put the config that enables the server extension in place ourselves
	install -D -m 644 jupyter-config/jupyter_server_config.d/nbworkers.json $(VENV)/etc/jupyter/jupyter_server_config.d/nbworkers.json
	touch $(STAMP)

# Debian's chromium for the browser tests (Playwright must never download a browser here).
browser-deps:
	@command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)

# Debian's munge and Slurm 22.05 for the Slurm tests (tests/integration/slurm/): tests/slurm_cluster.py starts its
# own munged, slurmctld and slurmd's on 127.0.0.1 with the project's config (tests/slurm/); nothing of the system's
# munge or Slurm is configured or started. ~25 s the first time.
SLURM_PACKAGES := munge slurmctld slurmd slurm-client
slurm-deps:
	@dpkg -s $(SLURM_PACKAGES) >/dev/null 2>&1 || (apt-get update -qq -o DPkg::Lock::Timeout=300 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 --no-install-recommends $(SLURM_PACKAGES) >/dev/null)

# .venv-installed: a venv with the wheel installed (not editable) and its extras from the registry (pip's cache), for
# the tests marked `installed` (make test-installed). A re-run is cheap while the wheel's content is the same; when
# only nbworkers changed it alone is reinstalled; other dependencies: a fresh venv (tools/installed_env.py).
# It is made from Debian's python3 (python3-venv), which every user can run: the JupyterHub test's users run it too.
# JupyterHub is installed beside the wheel: the hub's environment is the one nbworkers is installed in.
# installed-venv makes it from the wheel already in dist/ (`make test` makes it beside the browser tests).
INSTALLED_PYTHON ?= /usr/bin/python3
installed-env: wheel
	@$(MAKE) --no-print-directory installed-venv

installed-venv:
	@test -f $(WHEEL) || { echo "installed-venv: no $(WHEEL): run make wheel"; exit 1; }
	@$(INSTALLED_PYTHON) -c 'import ensurepip, venv' 2>/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null)
	$(PYTHON) tools/installed_env.py --venv $(INSTALLED_VENV) --wheel $(WHEEL) --extras $(INSTALLED_EXTRAS) \
	  --base-python $(INSTALLED_PYTHON) --with 'jupyterhub==6.1.*'

# The TensorFlow 2.15 environment Estimator workers run in (tf.estimator is gone from TF 2.16 on), with nbworkers
# installed the README's way for `%%worker --python`: `pip install --no-deps`, here from the wheel (re-installed
# every time: cheap).
estimator-env: $(TF215_VENV)/.installed wheel
	$(TF215_VENV)/bin/python -m pip install -q --no-deps --force-reinstall $(WHEEL)

$(TF215_VENV)/.installed: pyproject.toml
	test -x $(TF215_VENV)/bin/python || $(PYTHON) -m venv $(TF215_VENV)
	$(TF215_VENV)/bin/python -m pip install -q --upgrade pip
	$(TF215_VENV)/bin/python -m pip install -q 'tensorflow-cpu==2.15.*' 'tensorflow-estimator==2.15.*' pyzmq jupyter-client psutil traitlets
	touch $@

demo: setup
	$(PY) -m nbworkers.demo

# The documentation site: docs/ (MyST markdown, MyST-NB, the PyData theme) built into build/docs/html/ with warnings as
# errors (-W, -n: every internal reference must resolve). docs/_ext/nbworkers_docs.py first writes the reference from
# the code (docs/_generated/: the magics' parsers, settings, environment variables, REST routes, distlib's exports)
# and copies tutorials/*.ipynb into docs/tutorials/. The tutorials are shown with their outputs from MyST-NB's cache
# (build/docs/.jupyter_cache, keyed by their code): a tutorial it does not hold is executed here once (real TensorFlow
# workers on mock data, ~3 min for all seven on 2 cores). `make test` fills the cache from the tutorial tests.
docs: setup
	$(PY) -m sphinx -W --keep-going -n -b html -d build/docs/doctrees docs build/docs/html
	@echo "the site: $(CURDIR)/build/docs/html/index.html"

# The unit tests and the integration tests as the runs of tests/tracks.py, taken from one queue by three lanes
# (tools/test_suite.sh: the Ray tests first in lane 0, one lane beside them from the start, the third after them;
# TEST_LANES=N changes the number); .venv-installed is made from the start for the last run, the tests marked
# `installed`. Every run goes on when one before it failed; the last line adds them up; the exit status is non-zero
# when any run failed. build/test-logs/timeline.txt says when each ran, cpu.txt how busy the CPU was (kept in
# ~/.cache/nbworkers/ci-logs/ when CI=true).
# PYTEST_ARGS goes to every run, e.g. make test PYTEST_ARGS='-m "not slow"' (markers: browser, estimator, slow, ray,
# installed, hub).
PYTEST_ARGS ?=

# The set-up's parts at once (make -j): .venv-tf215's TensorFlow 2.15 beside .venv, the hub's proxy beside both.
test:
	@$(MAKE) --no-print-directory -j4 --output-sync=target test-deps
	@PYTEST_ARGS='$(PYTEST_ARGS)' PYTHON='$(PYTHON)' tools/test_suite.sh

test-deps: setup browser-deps estimator-env hub-deps slurm-deps

test-installed: installed-env browser-deps estimator-env hub-deps
	@$(INSTALLED_VENV)/bin/pytest -p no:cacheprovider --rootdir=$(CURDIR) tests/integration --track=installed $(PYTEST_ARGS); \
	  code=$$?; [ $$code -eq 0 ] || [ $$code -eq 5 ] || exit $$code

# What must hold on a busy shared server: the fault-tolerance tests and the sessions' Stop, error and restore checks,
# SOAK_RUNS times beside SOAK_BUSY processes that keep the CPU busy (tools/soak.py; not part of make test). Figures in
# build/soak/summary.txt (README, Development: what it found). SOAK_TESTS: other pytest arguments instead.
SOAK_RUNS ?= 3
SOAK_BUSY ?= 6
SOAK_TESTS ?=
soak: setup
	$(PY) tools/soak.py --runs $(SOAK_RUNS) --busy $(SOAK_BUSY) $(SOAK_TESTS)

test-fast: setup
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

lab: setup
	$(PY) -m nbworkers.kernelspec install --sys-prefix
	$(VENV)/bin/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root) tutorials/

bench: setup
	$(PY) -m pip install -q -e '.[bench]'  # ipyparallel, measured side by side (not needed by the tests)
	$(PY) benchmarks/run.py

# Rebuild the sidebar from labextension/ (TypeScript) with the JupyterLab builder: needs node and npm; pinned by
# labextension/package-lock.json. Commit extension/labextension/ afterwards (tests check it matches the sources).
labextension: setup
	cd labextension && npm ci --no-audit --no-fund
	$(PY) tools/vocabulary.py --write  # the statuses' type, labels and colours, from protocol/statuses.py
	cd labextension && JUPYTERLAB_CORE="$$($(CURDIR)/$(PY) -c 'import jupyterlab, os; print(os.path.join(os.path.dirname(jupyterlab.__file__), "staging"))')" npm run build
	$(PY) tools/labextension_stamp.py --write

# What users install: dist/nbworkers-<version>-py3-none-any.whl ($(WHEEL)) and its sdist, the wheel built from the
# sdist (as pip builds one from PyPI's sdist), both checked with twine. tests/integration/test_packaging.py checks
# this wheel instead of building its own when NBWORKERS_WHEEL names it: NBWORKERS_WHEEL=$(CURDIR)/$(WHEEL).
wheel: setup
	rm -rf dist
	$(PY) -m build --outdir dist .
	$(PY) -m twine check --strict dist/*
	test -f $(WHEEL)

# JupyterHub's proxy for tests/integration/test_jupyterhub.py (marked hub, installed; JupyterHub itself is in
# .venv-installed: make installed-env): configurable-http-proxy from npm into build/hub-proxy (pinned by
# tools/hub-proxy/package-lock.json; npm ci runs again only when the lock file changes). ~10 s the first time.
HUB_PROXY := build/hub-proxy
hub-deps: $(HUB_PROXY)/.installed

$(HUB_PROXY)/.installed: tools/hub-proxy/package.json tools/hub-proxy/package-lock.json
	mkdir -p $(HUB_PROXY) && cp tools/hub-proxy/package.json tools/hub-proxy/package-lock.json $(HUB_PROXY)/
	cd $(HUB_PROXY) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

clean:
	rm -rf $(VENV) $(TF215_VENV) $(INSTALLED_VENV) build dist *.egg-info test-results labextension/node_modules labextension/lib labextension/tsconfig.tsbuildinfo
