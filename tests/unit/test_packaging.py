"""The installed package: one import root, provider registration, no generic top-level names.

The wheel test builds the working tree with the venv's setuptools (no network): every folder
with an `__init__.py` under the mapped folders must reach the wheel, under `sparkdispatch`.
"""

from __future__ import annotations

import configparser
import importlib.metadata
import importlib.util
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import sparkdispatch

REPO = Path(__file__).resolve().parents[2]
BUILD_INPUTS = ("setup.py", "setup.cfg", "pyproject.toml", "README.md")


def _mapped_folders() -> dict[str, str]:
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg", encoding="utf-8")
    lines = config["options"]["package_dir"].strip().splitlines()
    return {name.strip(): folder.strip() for name, folder in (line.split("=", 1) for line in lines)}


def _build_wheel(tmp_path: Path) -> zipfile.ZipFile:
    """Build the wheel from a copy of the tree, so no build output lands in the checkout."""
    source = tmp_path / "source"
    source.mkdir()
    for name in BUILD_INPUTS:
        shutil.copy2(REPO / name, source / name)
    for folder in _mapped_folders().values():
        shutil.copytree(REPO / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    backend = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["build-backend"]
    out = tmp_path / "dist"
    code = f"import importlib, sys; print(importlib.import_module({backend!r}).build_wheel(sys.argv[1]))"
    done = subprocess.run([sys.executable, "-c", code, str(out)], cwd=source, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, f"building the wheel failed:\n{done.stdout}\n{done.stderr}"
    return zipfile.ZipFile(out / done.stdout.strip().splitlines()[-1])


def test_generic_folder_names_are_not_importable() -> None:
    for name in ("hooks", "operators", "provider"):
        assert importlib.util.find_spec(name) is None, f"{name!r} leaked into site-packages"


def test_mapped_subpackages_import_from_the_one_root() -> None:
    for name in ("sparkdispatch.hooks", "sparkdispatch.operators", "sparkdispatch.ha", "sparkdispatch.jobgraph"):
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.name == name


def test_wheel_holds_every_package_of_the_mapped_folders(tmp_path: Path) -> None:
    expected = set()
    for name, folder in _mapped_folders().items():
        root = REPO / folder
        for init in root.rglob("__init__.py"):
            relative = init.parent.relative_to(root).parts
            expected.add("/".join([*name.split("."), *relative]))
    with _build_wheel(tmp_path) as wheel:
        files = wheel.namelist()
    in_wheel = {path.rsplit("/", 1)[0] for path in files if path.endswith("/__init__.py")}
    assert expected <= in_wheel, f"packages missing from the wheel: {sorted(expected - in_wheel)}"
    assert {"sparkdispatch/hooks", "sparkdispatch/operators", "sparkdispatch/rest"} <= in_wheel
    assert "sparkdispatch/py.typed" in files
    assert any(path.startswith("sparkdispatch/rest/ui/") for path in files), "the web UI's files are missing"
    tops = {path.split("/", 1)[0] for path in files}
    assert tops == {"sparkdispatch", f"sparkdispatch-{sparkdispatch.__version__}.dist-info"}


def test_distribution_and_entry_point() -> None:
    dist = importlib.metadata.distribution("sparkdispatch")
    points = [ep for ep in dist.entry_points if ep.group == "apache_airflow_provider"]
    assert [ep.value for ep in points] == ["sparkdispatch:get_provider_info"]
    info = points[0].load()()
    assert info["package-name"] == dist.metadata["Name"] == "sparkdispatch"
    assert info["versions"] == [sparkdispatch.__version__]


def test_master_side_imports_no_airflow() -> None:
    code = ("import sys, sparkdispatch, sparkdispatch.jobgraph, sparkdispatch.config; "
            "import sparkdispatch.ha, sparkdispatch.taskexecutor; "
            "print(any(m == 'airflow' or m.startswith('airflow.') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
