#!/usr/bin/env bash
# Run the test suite against the installed package (scripts/install.sh first): first
# `ruff format --check` and `ruff check` (pyproject.toml's [tool.ruff], over the whole tree: package,
# tests, bench, dags, scripts), then `mypy` over the package and over tests/ and bench/ (strict, as
# setup.cfg's [mypy] says; cached in .mypy_cache), then pytest.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not slow"`.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff format --check --quiet
.venv/bin/ruff check --quiet
.venv/bin/mypy
.venv/bin/mypy tests bench
exec .venv/bin/pytest "$@"
