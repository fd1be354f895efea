# gpuwarden — every target does its own set-up, so a fresh clone needs only `make test` / `make demo`.
SHELL := /bin/bash
PY_BOOT ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.stamp-setup
# checkov in its own venv (infra/checkov.py says why); reinstalled when its pin changes
CHECKOV_STAMP := .venv-checkov/.stamp-setup
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export PYTHONDONTWRITEBYTECODE :=

.PHONY: setup setup-real demo test test-e2e test-long lint synth bench deploy layer clean audit outcome prometheus event-ruler

$(STAMP): pyproject.toml package.json layers/runtime/requirements.txt
	@test -x $(PY) || $(PY_BOOT) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel
	$(PY) -m pip install --quiet -e '.[dev,infra]'
	npm install --no-audit --no-fund --loglevel=error
	$(PY) -m layers.runtime.build --fetch
	@touch $(STAMP)

$(CHECKOV_STAMP): infra/checkov-requirements.txt | $(STAMP)
	$(PY) -m infra.checkov install
	@touch $(CHECKOV_STAMP)

# Debian's prometheus (2.42) and prometheus-alertmanager (0.25) for tests/integration/test_alertmanager_sns.py:
# installed where we are root and they are missing (CI); elsewhere the test says how to install them.
prometheus:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	   ! { command -v prometheus && command -v prometheus-alertmanager; } >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			prometheus prometheus-alertmanager >/dev/null; fi

# AWS's EventBridge matcher, Event Ruler, as the judge of the synthesized rules (tests/ruler/judge.py): Debian's
# JDK 17 and Maven installed where we are root and they are missing (CI); the jar is built once into
# .cache/event-ruler/ (Maven Central on a cold ~/.m2; an unchanged build is a file check).
event-ruler: $(STAMP)
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	   ! { command -v java && command -v mvn; } >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			openjdk-17-jdk-headless maven >/dev/null; fi
	$(PY) -m tests.ruler.judge

setup: $(STAMP) $(CHECKOV_STAMP) prometheus event-ruler

# The real control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, KWOK,
# Karpenter's KWOK provider, and v1.0.8's as a second pin), built with `go` from the modules pinned in
# realplane/build/pins.toml into .cache/realplane/<key of each set of pins>: a cold build takes tens of
# minutes, an unchanged one seconds.
setup-real: $(STAMP)
	$(PY) -m realplane.build

demo: $(STAMP)
	$(VENV)/bin/gpuwarden demo
	@echo "gpuwarden is installed in $(VENV)/bin: run 'source $(VENV)/bin/activate' to have it on PATH (or call $(VENV)/bin/gpuwarden)"

# The built-in week through three arms (nothing / Karpenter / gpuwarden beside Karpenter): the table and the
# plot, recorded in docs/outcome.json, docs/simulate.md and the README's verdict (sim/outcome/record.py).
OUTCOME_PLOT ?= test-artifacts/outcome.png
outcome: $(STAMP)
	@mkdir -p $(dir $(OUTCOME_PLOT)) test-artifacts
	$(VENV)/bin/gpuwarden simulate --plot $(OUTCOME_PLOT) --json > test-artifacts/outcome.json
	$(PY) -m sim.outcome.record test-artifacts/outcome.json

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy functions sim infra tests layers realplane

# The suite on the simulator (two workers), then the e2e scenes on the real plane: one plane, serially.
test: lint $(CHECKOV_STAMP) prometheus event-ruler setup-real
	$(VENV)/bin/pytest -q -n 2 -m "not long and not bench and not e2e"
	$(VENV)/bin/pytest -q -p no:xdist -m e2e -rxXs --durations=20 tests/e2e

# The e2e scenes alone (test-artifacts/realplane/ keeps each component's log and the audit log).
test-e2e: setup-real
	$(VENV)/bin/pytest -q -p no:xdist -m e2e -rxXs --durations=20 tests/e2e

# Random seeds, not CI's derandomized profile: each run draws new fault schedules and Karpenter
# interleavings from one seed, printed first (GPUWARDEN_TEST_SEED=<seed> make test-long replays it).
test-long: $(STAMP) $(CHECKOV_STAMP)
	@seed=$${GPUWARDEN_TEST_SEED:-$$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}; \
	echo "test-long seed: $$seed (replay: GPUWARDEN_TEST_SEED=$$seed make test-long)"; \
	GPUWARDEN_TEST_SEED=$$seed $(VENV)/bin/pytest -q -n 2 -m "long" --hypothesis-profile=default --durations=10

# Known vulnerabilities in the installed dependencies (PyPI advisory DB, needs the network).
# Findings with a fix fail; findings with no fix are reported only; an unreachable DB is a warning.
audit: $(STAMP)
	@out=$$($(VENV)/bin/pip-audit --progress-spinner off --format columns 2>&1); rc=$$?; echo "$$out"; \
	if [ $$rc -ne 0 ] && echo "$$out" | grep -qiE "connection|resolve|timed out|network|max retries"; then \
		echo "make audit: WARNING: advisory database unreachable, nothing audited" >&2; exit 0; fi; \
	if [ $$rc -ne 0 ] && ! echo "$$out" | awk 'NR>2 && NF>=4 {found=1} END {exit !found}'; then \
		echo "make audit: findings without a fix version (reported, not failing)" >&2; exit 0; fi; \
	exit $$rc

# Offline, no Docker: the layer is built from the wheel cache `make setup` fetched (layers/runtime/build.py).
# cfn-lint W3005 ignored: CDK emits an explicit DependsOn on a function's role next to the GetAtt of it
# (it orders the role's DefaultPolicy before the function); redundant, harmless, and not ours to change.
# Then checkov (offline, its own venv): fails on any finding not fixed or acknowledged on its resource.
synth: $(STAMP) $(CHECKOV_STAMP)
	CDK_DISABLE_VERSION_CHECK=1 CDK_DISABLE_CLI_TELEMETRY=true npx cdk synth --quiet --no-notices
	$(VENV)/bin/cfn-lint --ignore-checks W3005 -- cdk.out/*.template.json
	$(PY) -m infra.checkov cdk.out/*.template.json

layer: $(STAMP)
	$(PY) -m layers.runtime.build

# The figures, then the run recorded in docs/benchmarks.json and its table in docs/benchmarks.md (tests/bench/record.py).
bench: $(STAMP)
	$(PY) -m tests.bench.run
	$(PY) -m tests.bench.record

deploy: $(STAMP)
	npx cdk deploy --all $(CDK_ARGS)

clean:
	rm -rf $(VENV) .venv-checkov node_modules cdk.out layers/runtime/build .mypy_cache .ruff_cache .pytest_cache .cache/realplane \
		.cache/event-ruler tests/ruler/target
