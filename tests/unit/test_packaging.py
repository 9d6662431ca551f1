"""The installed package: one import root, provider registration, no generic top-level names.

The wheel test builds the working tree with the venv's setuptools (no network): every folder
with an `__init__.py` under the mapped folders must reach the wheel, under `sparkdispatch`.
"""

from __future__ import annotations

import configparser
import email
import importlib.metadata
import importlib.util
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import sparkdispatch

REPO = Path(__file__).resolve().parents[2]
BUILD_INPUTS = ("setup.py", "setup.cfg", "pyproject.toml", "README.md")


def _mapped_folders() -> dict[str, str]:
    setup_cfg = configparser.ConfigParser()
    setup_cfg.read(REPO / "setup.cfg", encoding="utf-8")
    lines = setup_cfg["options"]["package_dir"].strip().splitlines()
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
    done = subprocess.run(
        [sys.executable, "-c", code, str(out)], cwd=source, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"building the wheel failed:\n{done.stdout}\n{done.stderr}"
    return zipfile.ZipFile(out / done.stdout.strip().splitlines()[-1])


def test_generic_folder_names_are_not_importable() -> None:
    for name in ("hooks", "operators", "provider"):
        assert importlib.util.find_spec(name) is None, f"{name!r} leaked into site-packages"


def test_mapped_subpackages_import_from_the_one_root() -> None:
    for name in ("sparkdispatch.hooks", "sparkdispatch.operators", "sparkdispatch.ha", "sparkdispatch.model.job_graph"):
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
    code = (
        "import sys, sparkdispatch, sparkdispatch.model.job_graph, sparkdispatch.config; "
        "import sparkdispatch.ha, sparkdispatch.taskexecutor; "
        "print(any(m == 'airflow' or m.startswith('airflow.') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- the light Airflow install: the base install is the client side, servers take an extra ------

#: What the base install must not bring: pyspark and its Connect client, Celery, and what only
#: the master uses. (Airflow itself pulls grpcio, for OpenTelemetry.)
SERVER_ONLY = ("pyspark", "py4j", "celery", "kombu", "pandas", "pyarrow", "apispec", "prometheus_client")
#: The provider's Airflow-facing modules: what Airflow's workers, triggerers and scheduler import.
AIRFLOW_SIDE = (
    "sparkdispatch.hooks.sparkdispatch",
    "sparkdispatch.operators",
    "sparkdispatch.operators.submit",
    "sparkdispatch.operators.sensors",
    "sparkdispatch.operators.triggers",
    "sparkdispatch.operators.links",
    "sparkdispatch.provider_info",
    "sparkdispatch.entrypoint.cli",
)


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;(]", requirement.strip(), maxsplit=1)[0].lower()


def test_the_base_install_is_the_client_side_and_servers_take_an_extra(tmp_path: Path) -> None:
    with _build_wheel(tmp_path) as wheel:
        [metadata_file] = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = email.message_from_bytes(wheel.read(metadata_file))
    requirements = metadata.get_all("Requires-Dist") or []
    base = {_requirement_name(r) for r in requirements if "extra ==" not in r}
    assert base and not base & set(SERVER_ONLY), f"the base install pulls server packages: {base & set(SERVER_ONLY)}"

    def extra(name: str) -> dict[str, str]:
        return {_requirement_name(r): r for r in requirements if re.search(rf"extra == ['\"]{name}['\"]", r)}

    assert {"celery", "apispec", "prometheus-client"} <= set(extra("master"))
    assert {"celery", "pyspark", "pandas"} <= set(extra("taskexecutor"))
    airflow = extra("airflow")["apache-airflow"]
    assert ">=3.0" in airflow and "<" not in airflow.split(";")[0], f"Airflow 3.0 on, no upper cap: {airflow}"


def test_the_airflow_side_imports_none_of_the_server_packages() -> None:
    code = f"""
import importlib, importlib.abc, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in {SERVER_ONLY!r}:
            raise ImportError(f"{{name}} is not in the base install")
sys.meta_path.insert(0, Refuse())
for module in {AIRFLOW_SIDE!r}:
    importlib.import_module(module)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_a_server_command_without_its_extra_names_the_extra_to_install() -> None:
    code = (
        "import sys; sys.modules['pyspark'] = None; "  # find_spec then says: not installed
        "from sparkdispatch.entrypoint.cli import main; sys.exit(main(['taskexecutor']))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "sparkdispatch: `sparkdispatch taskexecutor` needs packages this installation "
        "lacks (pyspark): install them with `pip install 'sparkdispatch[taskexecutor]'`"
    )


@pytest.mark.slow
def test_installing_the_airflow_extra_brings_no_server_package(tmp_path: Path) -> None:
    """uv's resolution of the built wheel with `[airflow]` for this interpreter, nothing installed.

    uv (a dependency of the TaskExecutor side, so in this venv) resolves the same metadata pip would
    in seconds where pip's `--dry-run --report` in a fresh venv took about a minute.
    """
    with _build_wheel(tmp_path) as wheel:
        wheel_path = wheel.filename
    assert wheel_path is not None
    requirements = tmp_path / "requirements.in"
    requirements.write_text(f"sparkdispatch[airflow] @ {Path(wheel_path).resolve().as_uri()}\n")
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "uv"),
            "pip",
            "compile",
            "--quiet",
            "--no-header",
            "--no-annotate",
            "--python",
            sys.executable,
            str(requirements),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    installed = {
        _normalised(re.split(r"[=@ \[]", line, maxsplit=1)[0])
        for line in done.stdout.splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {"apache-airflow", "sparkdispatch", "kazoo"} <= installed, sorted(installed)
    pulled = installed & {_normalised(name) for name in SERVER_ONLY}
    assert not pulled, f"the airflow extra pulls {sorted(pulled)}"


def _normalised(distribution: str) -> str:
    """A distribution's name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", distribution.strip()).lower()
