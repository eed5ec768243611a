# Laminar developer commands. Everything runs inside .venv, which `install` creates.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CONNECT_STAMP := $(VENV)/.installed-spark-connect

.PHONY: install check imports test test-fast test-slow test-spark-cluster test-guide test-dist dist bench bench-peers demo clean lint typecheck generated-check

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,server,spark,otel]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check laminar clients tests bench
	$(BIN)/ruff format --check laminar clients tests bench

typecheck: $(STAMP)
	$(BIN)/mypy --strict laminar clients

generated-check: $(STAMP)
	$(BIN)/python scripts/check_generated.py

# The import contracts of pyproject.toml's [tool.importlinter] (cores import no shell,
# the broker no client, clients no server).
imports: $(STAMP)
	$(BIN)/lint-imports

check: lint typecheck imports generated-check

# The tiers that run apart (.ci/run runs each): not in make test.
APART = not slow and not chaos and not multihost and not spark_cluster and not disk_full and not dist and not guide

# Every test of the default suite, in two runs: the `unit` and `sim` tiers in four
# pytest-xdist workers (they mostly wait), then the `process` tier (node processes,
# Spark) in one process, so that no two real clusters compete for the two cores.
test: $(STAMP)
	$(BIN)/python -m pytest -q -m "(unit or sim) and $(APART)" -n 4
	$(BIN)/python -m pytest -q -m "process and $(APART)"

# The edit loop: tests in one process and the simulators (tiers `unit` and `sim`,
# tests/tiers.py), no node process, no Spark; in four pytest-xdist workers, since
# these tests mostly wait (about 80 s on two cores against 175 s in one process).
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "(unit or sim) and not slow" -n 4

# The long-running tests (marker `slow`: thousands of partitions or groups, in the
# simulator and on real processes), run by .ci/run after make test.
test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m "slow and not chaos and not multihost and not spark_cluster and not disk_full and not dist and not guide"

# The connector on a Spark standalone cluster (Master, Worker, executor JVMs) and through
# Spark Connect, in a pytest process of its own (a process has one SparkSession). The
# Connect client's packages are the `spark-connect` extra, installed for this tier only.
$(CONNECT_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,server,spark,otel,spark-connect]'
	touch $(CONNECT_STAMP)

test-spark-cluster: $(CONNECT_STAMP)
	$(BIN)/python -m pytest -q -m spark_cluster tests/spark_cluster

# The sdist and the wheel (one distribution: laminar, laminar_client, laminar_cli,
# laminar_spark, pyspark_laminar) into dist/, built in an isolated environment by `python -m build`.
dist: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --outdir dist .

# The wheel installed into fresh venvs outside the checkout ([server,spark] and
# [client]): nodes from the `laminar` entry point, a client, Spark without a register
# call; and the systemd unit through systemd-analyze verify (tests/dist, marker `dist`).
# Every command of docs/operations.md, in order, against three lan-preset nodes on
# loopback (tests/test_operations_guide.py, marker `guide`, about 70 s).
test-guide: $(STAMP)
	$(BIN)/python -m pytest -q -m guide tests/test_operations_guide.py

test-dist: $(STAMP)
	$(BIN)/python -m pytest -q -m dist tests/dist

demo: $(STAMP)
	scripts/demo.sh

bench: $(STAMP)
	$(BIN)/python -m bench.segment_bench --quick
	$(BIN)/python -m bench.placement_bench
	$(BIN)/python -m bench.membership_bench --quick
	$(BIN)/python -m bench.replica_sim_bench --quick
	$(BIN)/python -m bench.cluster_bench --quick
	$(BIN)/python -m bench.cpu_bench --quick
	$(BIN)/python -m bench.client_bench --quick
	$(BIN)/python -m bench.group_bench --quick
	$(BIN)/python -m bench.repair_bench --quick
	$(BIN)/python -m bench.scrub_bench --quick
	$(BIN)/python -m bench.spark_bench --quick
	$(BIN)/python -m bench.security_bench --quick

# Peers for the client benchmark (bench/peers.py): nats-server and redis-server from Debian's
# packages (root only), their Python clients into .venv (same list as pyproject's
# `bench-peers` extra). A temporary policy-rc.d (if there is none) keeps the packages from
# starting their services, and the services of the packages installed here are disabled;
# the bench never uses them or the default ports anyway: it starts its own servers on free
# loopback ports in a temp dir.
PEER_DEBS := nats-server redis-server
PEER_PY := 'nats-py>=2.7' 'redis[hiredis]>=5'

bench-peers: $(STAMP)
	@if [ "$$(id -u)" = 0 ]; then \
	  new=; for p in $(PEER_DEBS); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q ' installed$$' \
	    || new="$$new $$p"; done; \
	  made_policy=; \
	  if [ ! -e /usr/sbin/policy-rc.d ]; then \
	    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && made_policy=1; \
	  fi; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y --no-install-recommends $(PEER_DEBS) \
	    || { apt-get update && apt-get install -y --no-install-recommends $(PEER_DEBS); }; \
	  rc=$$?; \
	  if [ -n "$$made_policy" ]; then rm -f /usr/sbin/policy-rc.d; fi; \
	  [ $$rc = 0 ] || exit $$rc; \
	  for p in $$new; do \
	    if [ -d /run/systemd/system ]; then systemctl disable --now $$p.service; \
	    else systemctl disable $$p.service; fi >/dev/null 2>&1 || true; \
	    echo "bench-peers: installed $$p, its service left stopped and disabled"; \
	  done; \
	else \
	  echo "bench-peers: not root, SKIPPED apt-get install $(PEER_DEBS);" \
	       "install them yourself or the bench skips the NATS/Redis peers"; \
	fi
	$(BIN)/pip install --quiet $(PEER_PY)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
