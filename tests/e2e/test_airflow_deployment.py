"""The example job-group DAG under a real Airflow deployment, driven through Airflow's REST API.

`airflow standalone` (API server, scheduler, DAG processor, triggerer) and a sparkdispatch master
and TaskExecutor as separate processes, all children of this test, all stopped by it. The DAG run
is triggered through `POST /api/v2/dags/{dag_id}/dagRuns`; while it runs, a deferred vertex task
is cleared through the API (its trigger's `on_kill` runs and the job must run on) and the master
is killed for 30 s and started again on its storage (the waiting vertex tasks must wait it out).
Then every task succeeded, the one job FINISHED, and a vertex task's log, read through the API,
shows what its vertex printed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkdispatch.config import Configuration
from sparkdispatch.testing.http import http_json
from sparkdispatch.testing.local_cluster import LocalCluster
from sparkdispatch.testing.services import free_port
from sparkdispatch.testing.waiting import WatchedProcess, eventually_blocking

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
DAG_ID = "sparkdispatch_sales_job_group"
ROWS = 15_000_000  # enough for the clear and the master's 30 s away to fall mid-run
MASTER_AWAY_S = 30.0
WAIT_S = 600.0  # an upper bound for anything to happen; no timing is asserted


@pytest.fixture(scope="module")
def sparkdispatch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A master and a TaskExecutor as processes of their own (so the master can be killed alone)."""
    config = Configuration.from_mapping(
        {
            "storage.dir": str(tmp_path_factory.mktemp("deployment-cluster")),
            "broker.url": "filesystem://",
            "taskexecutor.slots": 3,
            "heartbeat.interval": "500ms",
            "heartbeat.timeout": "60s",
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "4",
            "taskexecutor.connect.start-timeout": "5min",
        }
    )  # a loaded machine starts Spark slowly
    cluster = LocalCluster(config, masters=1, taskexecutors=1)
    cluster.start(timeout=WAIT_S)
    try:
        yield cluster
    finally:
        cluster.stop()


class Airflow:
    """`airflow standalone` as a child process, and calls to its REST API with a bearer token."""

    def __init__(self, home: Path, master_port: int) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = home / "standalone.log"
        bin_dir = Path(sys.executable).parent
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")},
            "AIRFLOW_HOME": str(home),
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__PARALLELISM": "8",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW_CONN_SPARKDISPATCH_DEFAULT": json.dumps(
                {"conn_type": "sparkdispatch", "host": "127.0.0.1", "port": master_port}
            ),
        }
        self.process: subprocess.Popen[bytes] | None = None
        self.watched: list[WatchedProcess] = []  # what a wait watches: the standalone, once started
        self.token = ""

    def start(self) -> None:
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [str(Path(sys.executable).parent / "airflow"), "standalone"],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
            )
        self.watched = [WatchedProcess("airflow standalone", self.process, self.log_tail)]
        eventually_blocking(
            self._healthy, "Airflow's components to be healthy", timeout=WAIT_S, interval=1.0, processes=self.watched
        )
        self.token = http_json("GET", f"{self.url}/auth/token", timeout=30)[1]["access_token"]

    def _healthy(self) -> bool:
        try:
            status, health = http_json("GET", f"{self.url}/api/v2/monitor/health", timeout=5)
        except (OSError, TimeoutError, ValueError):
            return False
        return status == 200 and all(
            health.get(part, {}).get("status") == "healthy"
            for part in ("metadatabase", "scheduler", "triggerer", "dag_processor")
        )

    def api(self, method: str, path: str, body: Any = None) -> Any:
        status, answer = http_json(method, f"{self.url}/api/v2{path}", body, token=self.token, timeout=60)
        assert status < 300, (method, path, status, answer)
        return answer

    def task_states(self, run_id: str) -> dict[str, str]:
        answer = self.api("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances")
        return {ti["task_id"]: ti["state"] for ti in answer["task_instances"]}

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:] if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                pass
        if self.process is not None:
            try:  # whatever of its group is left (its children outlive it when it exits first)
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait(10)


@pytest.fixture(scope="module")
def airflow(sparkdispatch: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Airflow]:
    deployment = Airflow(tmp_path_factory.mktemp("airflow-home"), sparkdispatch.master_ports[0])
    try:
        deployment.start()
        yield deployment
    finally:
        deployment.stop()


def jobs(cluster: LocalCluster) -> dict[str, str]:
    return {job["id"]: job["status"] for job in cluster.request("GET", f"{cluster.master_url(0)}/jobs")[1]["jobs"]}


def test_the_example_group_runs_through_a_clear_and_a_master_away_for_30s(
    sparkdispatch: LocalCluster, airflow: Airflow
) -> None:
    eventually_blocking(
        lambda: http_json("GET", f"{airflow.url}/api/v2/dags/{DAG_ID}", token=airflow.token, timeout=30)[0] == 200,
        f"the DAG processor to parse {DAG_ID}",
        timeout=WAIT_S,
        interval=2.0,
        processes=airflow.watched,
    )
    airflow.api("PATCH", f"/dags/{DAG_ID}", {"is_paused": False})
    run = airflow.api("POST", f"/dags/{DAG_ID}/dagRuns", {"logical_date": None, "conf": {"rows": ROWS}})
    run_id = run["dag_run_id"]

    # a vertex task deferred while its vertex runs, its trigger running in the triggerer: clear it, as
    # the grid's "Clear" does
    eventually_blocking(
        lambda: airflow.task_states(run_id).get("sales.generate") == "deferred",
        "sales.generate to defer",
        timeout=WAIT_S,
        interval=1.0,
        processes=airflow.watched,
    )
    eventually_blocking(
        lambda: _trigger_log_says(airflow, "SparkDispatchVertexTrigger", "task_id=sales.generate/attempt=1"),
        "the triggerer to start sales.generate's trigger",
        timeout=WAIT_S,
        interval=1.0,
        processes=airflow.watched,
    )
    [job_id] = list(jobs(sparkdispatch))
    airflow.api(
        "POST",
        f"/dags/{DAG_ID}/clearTaskInstances",
        {
            "dry_run": False,
            "dag_run_id": run_id,
            "task_ids": ["sales.generate"],
            "only_failed": False,
            "reset_dag_runs": False,
            "include_downstream": False,
            "include_upstream": False,
        },
    )
    eventually_blocking(
        lambda: _trigger_log_says(airflow, "the job runs on", "task_id=sales.generate/attempt=1"),
        "the cleared task's trigger to stop, leaving the job",
        timeout=WAIT_S,
        interval=1.0,
        processes=airflow.watched,
    )
    assert jobs(sparkdispatch)[job_id] == "RUNNING"

    # the master away for 30 s mid-run, then back on its storage
    sparkdispatch.kill_master(0)
    time.sleep(MASTER_AWAY_S)  # the fault's length, not an assertion
    sparkdispatch.start_master(0)
    sparkdispatch.wait_for_leader(timeout=WAIT_S)

    def ended() -> str | None:
        state = airflow.api("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}")["state"]
        return state if state in ("success", "failed") else None

    state = eventually_blocking(ended, "the DAG run to end", timeout=1200, interval=3.0, processes=airflow.watched)
    states = airflow.task_states(run_id)
    assert state == "success" and set(states.values()) == {"success"}, states
    assert set(states) == {
        "sales.launch",
        "sales.generate",
        "sales.clean",
        "sales.revenue_by_region",
        "sales.revenue_by_product",
        "sales.report",
        "announce",
    }
    assert jobs(sparkdispatch) == {job_id: "FINISHED"}

    # what the vertex printed, in its task's log as Airflow's API serves it
    instance = airflow.api("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/sales.generate")
    log = airflow.api(
        "GET",
        f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/sales.generate/logs/{instance['try_number']}?full_content=true",
    )
    text = json.dumps(log)
    assert f"generate[0] attempt 0: generating {ROWS} orders" in text, text[-3000:]


def _trigger_log_says(airflow: Airflow, text: str, attempt: str) -> bool:
    """Whether a trigger log of `attempt` (`task_id=<task>/attempt=<n>`) holds `text`."""
    logs = Path(airflow.env["AIRFLOW_HOME"]) / "logs"
    return any(
        text in path.read_text(errors="replace")
        for path in logs.rglob("*.trigger.*")
        if attempt in str(path) and path.is_file()
    )
