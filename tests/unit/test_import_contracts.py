"""The component map's rules, checked on the installed package's real import graph.

The contracts live in setup.cfg (`[importlinter:contract:*]`): only hooks/ and operators/
import Airflow, the TaskExecutor imports no master component, the model imports no component,
no component imports a higher layer, and nothing in the product imports `sparkdispatch.testing`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def test_every_import_contract_is_kept() -> None:
    assert LINT_IMPORTS.exists(), f"{LINT_IMPORTS} is missing: install the dev extra (scripts/install.sh)"
    done = subprocess.run([str(LINT_IMPORTS), "--no-cache", "--no-logo", "--config", str(REPO / "setup.cfg")],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"lint-imports found broken import contracts:\n{done.stdout}\n{done.stderr}"
    assert "0 broken" in done.stdout, done.stdout
