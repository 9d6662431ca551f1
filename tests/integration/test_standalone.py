"""`sparkdispatch standalone`: starts in one command, restarts a dead TaskExecutor, and Ctrl-C
stops every process it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sparkdispatch.testing.http import http_json, upload_artifact
from sparkdispatch.testing.job_result import wait_for_result
from sparkdispatch.testing.services import free_port
from sparkdispatch.testing.waiting import eventually_blocking

pytestmark = pytest.mark.slow
SALES = Path(__file__).parents[2] / "dags" / "pipelines" / "sales.py"
START_S = 180.0  # a TaskExecutor starts a JVM on a shared 2-core machine


def processes_mentioning(text: str) -> list[int]:
    """Pids of live processes whose command line contains `text`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().split(") ", 1)[1][0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            pids.append(int(entry.name))
    return pids


def permissions(root: Path) -> dict[Path, int]:
    """The permission bits of everything under `root` (what the cluster removes meanwhile is skipped)."""
    found = {}
    for directory, subdirectories, files in os.walk(root):  # os.walk skips a directory that went away
        for name in (*subdirectories, *files):
            path = Path(directory, name)
            try:
                found[path] = path.lstat().st_mode & 0o777
            except FileNotFoundError:
                pass
    return found


TOKEN = "standalone-users-token-0123456789"
SPARK_SECRET = "s3a-secret-key-0123456789"


def serving(base: str, **counts: int) -> bool:
    """Whether the master at `base` answers `/overview` with these counts (`taskmanagers=1`, ...)."""
    try:
        status, body = http_json("GET", base + "/overview", timeout=5, token=TOKEN)
    except OSError:
        return False
    return status == 200 and all(body[key] == value for key, value in counts.items())


def test_standalone_restarts_a_dead_taskexecutor_and_stops_everything_on_ctrl_c(tmp_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    storage = tmp_path / "storage"
    (tmp_path / "conf.yaml").write_text(f"spark.hadoop.fs.s3a.secret.key: {SPARK_SECRET}\n")
    cli = [
        sys.executable,
        "-m",
        "sparkdispatch.entrypoint.cli",
        "--config",
        str(tmp_path / "conf.yaml"),
        "-D",
        f"rest.port={port}",
        "-D",
        "heartbeat.interval=300ms",
        "-D",
        "heartbeat.timeout=3s",
        "standalone",
        "--storage",
        str(storage),
        "--slots",
        "1",
    ]
    with open(tmp_path / "standalone.log", "wb") as out:
        process = subprocess.Popen(
            cli,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "SPARKDISPATCH_AUTH_TOKEN": TOKEN},
        )
    try:
        eventually_blocking(
            lambda: serving(base, taskmanagers=1), "the TaskExecutor to register", timeout=START_S, interval=0.3
        )
        # the TaskExecutors got the token, the Spark secret and the cluster secret by a file only they may read
        # (the Spark Connect server's JVM by a properties file of its own), so no command line shows them
        assert processes_mentioning(TOKEN) == [] and processes_mentioning(SPARK_SECRET) == []
        child_config = storage / "standalone" / "taskexecutor.yaml"
        assert child_config.stat().st_mode & 0o777 == 0o600 and SPARK_SECRET in child_config.read_text()
        assert "cluster.secret" in child_config.read_text()
        [cluster_secret] = [
            line.split(":", 1)[1].strip()
            for line in child_config.read_text().splitlines()
            if line.startswith("cluster.secret:")
        ]
        assert processes_mentioning(cluster_secret) == []
        # a job's JobGraph, artifact, progress, result, logs and the TaskExecutors' own files: only its user's
        key = upload_artifact(base, SALES, token=TOKEN)
        status, submitted = http_json(
            "POST",
            base + "/jobs",
            {
                "name": "private",
                "artifacts": [key],
                "vertices": [{"id": "g", "entrypoint": "sales:generate", "parallelism": 1, "params": {"rows": 10}}],
            },
            token=TOKEN,
        )
        assert status == 202, submitted
        result = wait_for_result(lambda: [base], submitted["job_id"], timeout=START_S, token=TOKEN)
        assert result.status.value == "FINISHED" and result.vertices["g"].rows == 10
        # (Spark gives result partitions Hadoop's permissions and the files it fetches into its local dir its own:
        # they lie in directories only that user may enter)
        results, spark_local = storage / "results", storage / "te-work" / "standalone-0" / "local"
        modes = permissions(storage)
        assert {modes[results], modes[spark_local], storage.stat().st_mode & 0o777} == {0o700}
        spark_made = [path for path in modes if results in path.parents or spark_local in path.parents]
        assert {f"{path}: {mode:o}" for path, mode in modes.items() if mode & 0o077 and path not in spark_made} == set()
        assert {"te-work", "te-cache", "blobs", "standalone"} <= {p.name for p in modes}  # the walk saw them
        assert any(p.name.endswith(".parquet") for p in results.rglob("*"))
        # users' tokens do not reach the TaskExecutors' routes
        status, _ = http_json("POST", base + "/taskexecutors", {}, token=TOKEN)
        assert status == 401
        # Celery retitles the worker process; its -D arguments stay in the title
        # (and this cluster's storage: a standalone cluster elsewhere on the machine has the same id)
        [worker] = [
            p for p in processes_mentioning("taskexecutor.id=standalone-0") if p in processes_mentioning(str(storage))
        ]
        os.killpg(worker, signal.SIGKILL)  # the worker and its Spark JVM, as if its host died
        eventually_blocking(lambda: worker not in processes_mentioning(str(storage)), "the worker to die", interval=0.3)
        eventually_blocking(
            lambda: [
                p
                for p in processes_mentioning("taskexecutor.id=standalone-0")
                if p != worker and p in processes_mentioning(str(storage))
            ],
            "a new TaskExecutor process",
            timeout=START_S,
            interval=0.3,
        )
        eventually_blocking(
            lambda: serving(base, taskmanagers=1, slots_available=1),
            "the new TaskExecutor to register",
            timeout=START_S,
            interval=0.3,
        )

        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
        eventually_blocking(
            lambda: processes_mentioning(str(storage)) == [], "every started process to end", interval=0.3
        )
        assert "stopping" in (tmp_path / "standalone.log").read_text()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        for pid in processes_mentioning(str(storage)):
            os.kill(pid, signal.SIGKILL)
