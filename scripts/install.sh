#!/usr/bin/env bash
# Set up this machine for sparkdispatch: Debian's ZooKeeper and Redis, and a venv in .venv with
# the package and everything its tests need. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
# ZooKeeper and Redis for the HA and broker tests, Chromium for the web UI's browser tests, iproute2
# (`ip`, `tc`) for the multi-host partition tests on network namespaces
if ! { [ -f /usr/share/java/zookeeper.jar ] && command -v redis-server >/dev/null && command -v javap >/dev/null \
       && command -v chromium >/dev/null && command -v ip >/dev/null && command -v tc >/dev/null; }; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    zookeeper redis-server default-jdk-headless chromium iproute2 >/dev/null
fi

PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -U pip
# strict editable mode: only the mapped package `sparkdispatch` becomes importable
.venv/bin/pip install -q --disable-pip-version-check -e ".[all]" --config-settings editable_mode=strict
# the real Flink command-line client, a client nobody here wrote, for the REST compatibility test
if [ ! -x .tools/flink/pyflink/bin/flink ]; then
  .venv/bin/pip install -q --disable-pip-version-check --no-deps --target .tools/flink \
    apache-flink==2.3.0 apache-flink-libraries==2.3.0
fi
# the oldest Airflow the provider supports, in a venv of its own: tests/e2e/test_airflow_dags.py parses and
# runs the example DAGs under it too. Airflow 3.0.6 does not cap FastAPI, Cadwyn or pydantic, and their
# newest releases break its execution API ("Input should be a valid dictionary" on every task start):
# pinned to releases of its time. Made with uv (in the dev extras), which installs the same 142 packages
# from empty caches in 42 s where pip took 150 s (138 s with its cache warm, uv 5 s with its own).
if [ ! -x .venv-airflow30/bin/airflow ]; then
  .venv/bin/uv venv -q --python "$(command -v "$PYTHON")" .venv-airflow30
  .venv/bin/uv pip install -q --python .venv-airflow30/bin/python "apache-airflow==3.0.6" "cadwyn==5.4.4" \
    "fastapi[standard]==0.116.1" "pydantic==2.11.7"
fi
.venv/bin/uv pip install -q --python .venv-airflow30/bin/python -e . --config-settings editable_mode=strict
echo "installed: $(.venv/bin/python -c 'import sparkdispatch; print("sparkdispatch", sparkdispatch.__version__)')"
