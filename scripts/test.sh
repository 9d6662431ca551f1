#!/usr/bin/env bash
# Run the test suite against the installed package (scripts/install.sh first): first
# `mypy` (strict, as setup.cfg's [mypy] says; cached in .mypy_cache), then pytest.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not slow"`.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/mypy
exec .venv/bin/pytest "$@"
