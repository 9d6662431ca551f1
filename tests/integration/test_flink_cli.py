"""The real Flink command-line client (PyPI's apache-flink) lists and cancels our jobs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkdispatch.config import Configuration
from sparkdispatch.testing.local_cluster import LocalCluster
from sparkdispatch.testing.waiting import eventually_blocking

pytestmark = pytest.mark.slow

FLINK = Path(__file__).resolve().parents[2] / ".tools" / "flink" / "pyflink" / "bin" / "flink"


def flink(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "JAVA_HOME": os.environ.get("JAVA_HOME", "/usr/lib/jvm/java-17-openjdk-amd64")}
    return subprocess.run([str(FLINK), *args], capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory, service_missing: Any) -> Iterator[LocalCluster]:
    """A master with no TaskExecutors: submitted jobs stay RUNNING, waiting for slots."""
    if not FLINK.exists() or shutil.which("java") is None:
        service_missing(f"the Flink client is not installed at {FLINK} (scripts/install.sh installs it)")
    config = Configuration.from_mapping({"storage.dir": str(tmp_path_factory.mktemp("flink-cli"))})
    cluster = LocalCluster(config, masters=1, taskexecutors=0)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def test_flink_list_and_cancel(master: LocalCluster) -> None:
    job_id = master.submit({"name": "seen-by-flink", "vertices": [{"id": "a", "entrypoint": "m:f"}]})
    target = master.leader_url().removeprefix("http://")
    listed = flink("list", "-a", "-m", target, "-Drest.retry.max-attempts=0")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert re.search(rf"{job_id} : seen-by-flink \((RUNNING|CREATED|INITIALIZING)\)", listed.stdout), listed.stdout

    cancelled = flink("cancel", "-m", target, "-Drest.retry.max-attempts=0", job_id)
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    eventually_blocking(
        lambda: master.request("GET", f"{master.leader_url()}/jobs/{job_id}")[1]["status"] == "CANCELED",
        "the job CANCELED",
        interval=0.1,
    )
    listed = flink("list", "-a", "-m", target, "-Drest.retry.max-attempts=0")
    assert re.search(rf"{job_id} : seen-by-flink \(CANCELED\)", listed.stdout), listed.stdout

    again = flink("cancel", "-m", target, "-Drest.retry.max-attempts=0", "f" * 32)
    assert again.returncode != 0 and "no job with id" in again.stdout + again.stderr
