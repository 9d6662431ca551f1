"""The component map's rules, checked on the installed package's real import graph.

The contracts live in setup.cfg (`[importlinter:contract:*]`): every package and module of the
package root stands in one layer and imports nothing above it, only hooks/ and operators/ import
Airflow, the TaskExecutor imports no master component, the model imports no component, and nothing
in the product imports `sparkdispatch.testing`.
"""

from __future__ import annotations

import configparser
import pkgutil
import subprocess
import sys
from pathlib import Path

import sparkdispatch

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def test_every_import_contract_is_kept() -> None:
    assert LINT_IMPORTS.exists(), f"{LINT_IMPORTS} is missing: install the dev extra (scripts/install.sh)"
    done = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", "--config", str(REPO / "setup.cfg")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"lint-imports found broken import contracts:\n{done.stdout}\n{done.stderr}"
    assert "0 broken" in done.stdout, done.stdout


def test_every_module_of_the_package_root_stands_in_a_layer() -> None:
    setup_cfg = configparser.ConfigParser()
    setup_cfg.read(REPO / "setup.cfg")
    layers = setup_cfg["importlinter:contract:layers"]["layers"].split()
    named = {name for layer in layers for name in layer.split("|") if name}
    children = {info.name for info in pkgutil.iter_modules(sparkdispatch.__path__)}
    assert children - named == set(), "add these to a layer of [importlinter:contract:layers] in setup.cfg"
    assert named - children == set(), "these layers name no module of the package"
