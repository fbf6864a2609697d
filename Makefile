# One entry point for every task. Every target sets up what it needs on a fresh machine
# (Python 3.11, Node and Java 17): a virtualenv in .venv and npm packages in node_modules.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMPS := .stamps
REQS := $(wildcard requirements/*.txt) pyproject.toml

export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export PYSPARK_PYTHON := $(abspath $(PY))
# Bytecode: compiled when a module is first imported and kept in __pycache__ (ignored by git; the image's build
# context and the Spark bundle leave it out), not for every installed file at install time (pip --no-compile):
# a fresh install spent 95 CPU-seconds with compiling and 32 without, and with writing turned off every process
# compiled the repository's own modules (tools, tests: 12 s to collect the tests against 6) again.
unexport PYTHONDONTWRITEBYTECODE
PIP_INSTALL = -m pip install --quiet --no-compile

.PHONY: setup lock test pytest lint typecheck typecheck-app typecheck-stacks unit integration infra spark demo bench bench-faults bench-pipeline bench-datapath bench-drain bench-at-rest bench-coordination bench-multilang synth dist clean

# The three installs are independent: they run side by side (each is mostly one busy core).
setup:
	@$(MAKE) --no-print-directory -j3 $(STAMPS)/python $(STAMPS)/node $(STAMPS)/checkov

# Both venv recipes make .venv first: `python -m venv` creates a missing directory without exist_ok, so the two
# running side by side could otherwise race to create .venv (checkov's lives inside it).
# The install comes in two steps: first what the stacks' type check needs (the CDK's packages and mypy, at their
# pins; with the consumer's, whose botocore caps python-dateutil, which jsii uses too), so that `make test` starts
# that check while pip (one core) installs the rest. The second step finds those already there and
# replaces none of them (checked with `pip install --dry-run --report` on 2026-11-27), so the type check never
# reads a package being replaced.
$(STAMPS)/python-stacks: requirements/consumer.txt requirements/infra.txt requirements/dev.txt
	@mkdir -p $(STAMPS) $(VENV)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) $(PIP_INSTALL) --upgrade pip==25.3
	$(PY) $(PIP_INSTALL) -r requirements/consumer.txt -r requirements/infra.txt $$(grep '^mypy==' requirements/dev.txt)
	@touch $@

# The two editable installs build with the setuptools pinned in requirements/dev.txt, already in .venv: one pip
# run, no isolated build environment to fill first.
$(STAMPS)/python: $(REQS) $(STAMPS)/python-stacks
	$(PY) $(PIP_INSTALL) $(foreach f,$(sort $(wildcard requirements/*.txt)),-r $(f))
	$(PY) $(PIP_INSTALL) --no-deps --no-build-isolation -e . -e examples/latest-per-key
	@touch $@

# checkov pins its own boto3 (and more), which cannot share .venv with the consumer's: it gets a venv of its own.
CHECKOV_VENV := $(VENV)/checkov
$(STAMPS)/checkov: requirements/tools/checkov.txt
	@mkdir -p $(STAMPS) $(VENV)
	test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python $(PIP_INSTALL) --upgrade pip==25.3
	$(CHECKOV_VENV)/bin/python $(PIP_INSTALL) -r requirements/tools/checkov.txt
	@touch $@

$(STAMPS)/node: package.json package-lock.json
	@mkdir -p $(STAMPS)
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

## test: lint, type-check and run every test tier (unit, integration on local emulators, infra, spark)
# One make, everything side by side where nothing waits on the other: the stacks' type check (about 10 s of
# one core: it follows only the aws_cdk modules the stacks import, pyproject.toml) starts once the CDK's
# packages are in, beside the rest of the installs (pip, npm: about a core between them); lint, the app's type
# check and the tests once .venv is complete. Any failing fails the target.
test:
	@$(MAKE) --no-print-directory -j6 $(STAMPS)/node $(STAMPS)/checkov typecheck-stacks lint typecheck-app pytest

# Four processes by default (three until 2026-11-28: the two Spark JVMs and the infra group then held all three
# at the start, and the integration tests waited for one; on fresh clones, 500 s in three and 471 s in four).
# Most of the suite waits (on emulators, leases, subprocesses) rather than computes
# (serially it kept ~0.6 of a core busy), but before the Spark split, past three the processes mostly added contention: the tests' workers
# and JVMs keep polling while they wait for a core (on a slow day the tests took 578 s in three processes and
# 746-773 s in four). Fresh clones of this 2-core machine, 2026-11-27: `make test` took 646-810 s (1,010-1,295
# CPU-seconds) in the morning, and 484-600 s (708-909) once the stacks' type check followed only the aws_cdk
# modules they import and moto kept its connections alive (four runs of the same code); in the afternoon, after
# tooling and test set-up cuts of a few CPU-seconds, 493-540 s (706-813) in five runs; in the evening, with a
# checkpoint write a second instead of one per batch by default, 454-536 s (637-778) in eight runs, six of them
# 454-481 s; late, with clients sharing one botocore data loader, 446-556 s (624-817) in five runs; at night,
# 433-465 s (589-649) in three runs of the same code; the next night 413 s (555), then 381-406 s (495-542) in
# four runs with 68-69 more tests; 2026-11-28, with 106 more, 427 and 441 s (537 CPU-seconds). 2026-11-29, a slower day
# (the same Spark test 1.7x as long): 611-807 s (924-1,209 CPU-seconds) in six runs; the emulators then spent about a third of the
# integration tests' CPU (kinesis-local ~10 ms per call, moto ~3 ms). Later that day, with 2,051 tests, 744-945 s
# (1,153-1,492 CPU-seconds) in nine runs; the code of 2026-11-28 03:32 (198a15c, 1,419 tests), run again then, took
# 701 s and 1,057 CPU-seconds where it had taken 427-441 s and 537: the machine doubled the CPU of the same
# work. kinesis-local then spent 10-20 ms of CPU on any call (7.5 ms of it on node's main thread, in kinesis-mock's
# own request handling; node's GC and stack-trace flags change nothing); a test worker's idle reads at 1 s
# instead of 0.21 s left the integration tests' CPU as it was (828 against 816 CPU-seconds). Spark tests stay in two processes (two JVMs), infra tests in another, and a
# module with fixtures of its own in one (tests/conftest.py). `make test PYTEST_JOBS=0` runs them in this
# process, one after another; PYTEST_ARGS adds pytest options (e.g. `PYTEST_ARGS="-k fleet"`).
PYTEST_JOBS ?= 4
PYTEST_ARGS ?=
PYTEST_XDIST := $(if $(filter-out 0,$(PYTEST_JOBS)),-n $(PYTEST_JOBS) --dist loadgroup,)
pytest: $(STAMPS)/python $(STAMPS)/node $(STAMPS)/checkov
	$(PY) -m pytest tests $(PYTEST_XDIST) $(PYTEST_ARGS)

lint: $(STAMPS)/python
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# Two halves with caches of their own, so that they can run side by side: the stacks' half spends most of
# its time in the aws_cdk modules the stacks import. Together they are pyproject.toml's [tool.mypy] files,
# which plain `mypy` checks.
MYPY_APP := consumer spark_jobs bench tools
MYPY_STACKS := stacks app.py
typecheck: typecheck-app typecheck-stacks

typecheck-app: $(STAMPS)/python
	$(VENV)/bin/mypy --cache-dir .mypy_cache/app $(MYPY_APP)

typecheck-stacks: $(STAMPS)/python-stacks
	$(VENV)/bin/mypy --cache-dir .mypy_cache/stacks $(MYPY_STACKS)

unit: $(STAMPS)/python
	$(PY) -m pytest tests/unit

integration: setup
	$(PY) -m pytest tests/integration

infra: setup
	$(PY) -m pytest tests/infra

spark: setup
	$(PY) -m pytest tests/spark

## demo: the whole system locally on the embedded emulators
demo: setup
	$(PY) -m tools.demo

## bench: the fleet benchmark (JSON + PNG timelines in reports/bench), then the fault scenarios
bench: setup
	$(PY) -m bench.fleet
	$(PY) -m bench.faults
	$(PY) -m bench.coordination --wall-budget 900

## bench-faults: faults injected over the network (outages, resets, slow responses) on polling and fan-out
bench-faults: setup
	$(PY) -m bench.faults

## bench-pipeline: the Spark vs DuckDB pipeline benchmark
bench-pipeline: setup
	$(PY) -m bench.pipeline

## bench-datapath: the worker vs a bare GetRecords loop (kinesis-local and in-memory; JSON + table in reports/bench)
bench-datapath: setup
	$(PY) -m bench.datapath

## bench-drain: a backlog drained at the defaults next to the fastest loop AWS's limits allow (JSON in reports/bench)
bench-drain: setup
	$(PY) -m bench.drain

## bench-at-rest: throttled calls of a fleet at rest behind AWS's limits (JSON in reports/bench)
bench-at-rest: setup
	$(PY) -m bench.at_rest

## bench-multilang: a KCL MultiLang (amazon-kclpy) app next to the native API on the same stream (JSON in reports/bench)
bench-multilang: setup
	$(PY) -m bench.multilang

## bench-coordination: DynamoDB cost of coordination: real workers metered by a proxy, the simulator to 10,000 shards
bench-coordination: setup
	$(PY) -m bench.coordination --wall-budget 900

## lock: re-lock the image's runtime and build requirements with hashes (tests/infra/test_container.py checks them)
PIP_COMPILE := $(VENV)/bin/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links
lock: $(STAMPS)/python
	$(PIP_COMPILE) --output-file requirements/consumer.lock requirements/consumer.txt
	$(PIP_COMPILE) --output-file requirements/build.lock requirements/build.in

## synth: synthesize every environment offline into cdk.out
synth: setup
	$(PY) app.py

## dist: the Spark jobs packaged for spark-submit --py-files (as the analytics stack ships them)
dist: $(STAMPS)/python
	$(PY) -m spark_jobs.package dist/spark_jobs.zip

clean:
	rm -rf $(VENV) node_modules $(STAMPS) cdk.out reports .emulators dist
