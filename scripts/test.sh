#!/usr/bin/env bash
# Run the test suite against the installed package (scripts/install.sh first).
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not slow"`.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/pytest "$@"
