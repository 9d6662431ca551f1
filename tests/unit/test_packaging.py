"""The installed package: one import root, provider registration, no generic top-level names."""

from __future__ import annotations

import importlib.metadata
import importlib.util

import sparkdispatch


def test_generic_folder_names_are_not_importable() -> None:
    for name in ("hooks", "operators", "provider"):
        assert importlib.util.find_spec(name) is None, f"{name!r} leaked into site-packages"


def test_mapped_subpackages_import_from_the_one_root() -> None:
    for name in ("sparkdispatch.hooks", "sparkdispatch.operators", "sparkdispatch.ha", "sparkdispatch.jobgraph"):
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.name == name


def test_distribution_and_entry_point() -> None:
    dist = importlib.metadata.distribution("sparkdispatch")
    points = [ep for ep in dist.entry_points if ep.group == "apache_airflow_provider"]
    assert [ep.value for ep in points] == ["sparkdispatch:get_provider_info"]
    info = points[0].load()()
    assert info["package-name"] == dist.metadata["Name"] == "sparkdispatch"
    assert info["versions"] == [sparkdispatch.__version__]


def test_master_side_imports_no_airflow() -> None:
    import subprocess
    import sys

    code = ("import sys, sparkdispatch, sparkdispatch.jobgraph, sparkdispatch.config; "
            "import sparkdispatch.ha, sparkdispatch.taskexecutor; "
            "print(any(m == 'airflow' or m.startswith('airflow.') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
