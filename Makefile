# syncer: the two commands are `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test test-long test-multinode unit integration lint docs dist test-matrix chaos chaos-brokers bench bench-catchup bench-remotes bench-wan bench-steady bench-scale bench-caps clean testbed-down

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	-$(BIN)/pip uninstall --quiet --yes syncer  # the distribution's name before kafka-syncer
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

# Local + two remote clusters, sample data in the remotes, the syncer between them until Ctrl-C.
run: $(STAMP)
	$(BIN)/syncer -v testbed demo --state .run

# Unit tests, then integration tests against real brokers started by the test bed; of the
# multi-node fault tests, all but the longest (marked long_multinode: make test-long).
test: $(STAMP)
	$(BIN)/pytest -q -p no:cacheprovider --durations=25 -m "not long_multinode" tests/unit tests/integration

# Nine long fault runs (marked long_multinode), which `make test` leaves out; CI
# runs both.
test-long: $(STAMP)
	$(BIN)/pytest -q -p no:cacheprovider --durations=10 -m long_multinode tests/integration

# Every test on 3-node clusters (leader moves, broker kills, rolling restarts, ISR, unclean
# elections, racks), the long ones included; `make test` runs all but those marked long.
test-multinode: $(STAMP)
	$(BIN)/pytest -q -p no:cacheprovider --durations=10 $$(grep -lE 'three_nodes|local3|remote3' tests/integration/test_*.py)

unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

# Randomized fault runs while a producer writes, each ending with every partition compared
# offset by offset: process faults (kill -9, pauses past the write lease, cut links) across
# three group members on one-node clusters, 60 rounds; and broker faults (kill -9 or a clean
# restart of a node, preferred elections) on a 3-node local and a 3-node remote, with kill -9
# and pauses of group members, 30 rounds (half of SYNCER_CHAOS_ROUNDS unless
# SYNCER_CHAOS_BROKER_ROUNDS says). `make test` runs 6 and 2. SYNCER_CHAOS_SEED replays a run.
chaos: $(STAMP)
	SYNCER_CHAOS_ROUNDS=$${SYNCER_CHAOS_ROUNDS:-60} $(BIN)/pytest -q -s -p no:cacheprovider tests/integration/test_chaos.py tests/integration/test_chaos_brokers.py

chaos-brokers: $(STAMP)
	SYNCER_CHAOS_BROKER_ROUNDS=$${SYNCER_CHAOS_BROKER_ROUNDS:-30} $(BIN)/pytest -q -s -p no:cacheprovider tests/integration/test_chaos_brokers.py

# The version matrix on real brokers of other Kafka versions (jars from Maven Central), each
# copied and verified offset by offset: 2.8.2 ZooKeeper (message formats v0/v1) → 4.1,
# 3.9.2 ZooKeeper → 4.1, 3.9.2 KRaft → 4.1, 4.1 → a 3.9.2 KRaft local; and the ZooKeeper →
# KRaft migration runbook end to end (tests/matrix/test_migration.py). `make test` runs the
# oldest pairing (2.8.2 → 4.1; everything else there is 4.1 → 4.1).
test-matrix: $(STAMP)
	$(BIN)/python -m tests.matrix

lint: $(STAMP)
	$(BIN)/ruff check syncer tests
	$(BIN)/ruff format --check syncer tests
	$(BIN)/mypy

# The documentation site (docs/, the README as its home page) into site/. The configuration
# reference is generated from the config classes first; any warning fails the build.
docs: $(STAMP)
	$(BIN)/syncer config reference > docs/reference.md
	$(BIN)/mkdocs build --strict --quiet

# Benchmarks (not tests): syncer and MirrorMaker 2 side by side; writes results/*.json
# (and results/bench-wan.png).
bench: bench-catchup bench-remotes bench-wan bench-steady bench-scale bench-caps

bench-catchup: $(STAMP)
	$(BIN)/python -m tests.bench.catchup

bench-remotes: $(STAMP)
	$(BIN)/python -m tests.bench.remotes

# A long, thin link (100 ms, 500 KB/s per connection): syncer over 1, 4, 16 lanes vs MM2.
bench-wan: $(STAMP)
	$(BIN)/python -m tests.bench.wan

# Steady state: 5 MB/s into the remote (after 120 s of copying not counted), end-to-end latency
# and the hop p50/p99: syncer, the hop's floor (tests/bench/floor.py: a one-threaded asyncio
# copier with no checks) and MM2.
bench-steady: $(STAMP)
	$(BIN)/python -m tests.bench.steady

# 10,000 partitions (500 topics x 20): first record, time to sync, peak RSS, idle CPU; one
# process, then three in a group (each one's share).
bench-scale: $(STAMP)
	$(BIN)/python -m tests.bench.scale

# Bandwidth caps of 5 and 20 MB/s on a large backlog: the rate over 30 s against the cap.
bench-caps: $(STAMP)
	$(BIN)/python -m tests.bench.caps

# A wheel and an sdist of kafka-syncer in dist/ (what `pip install` and `pipx install` take).
dist: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --outdir dist .

testbed-down:
	-$(BIN)/syncer testbed down --state .run

clean:
	rm -rf $(VENV) .run results dist build site *.egg-info
