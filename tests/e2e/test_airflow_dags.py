"""The example DAGs with `dag.test()` against a real `sparkdispatch standalone` cluster.

One cluster (master + a TaskExecutor with real Spark) for the module, one Airflow home with a
migrated metadata DB. Each DAG run must leave exactly one new FINISHED job on the master.
"""

from __future__ import annotations

import json
import re
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from sparkdispatch.testing.chromium import CHROMIUM, chromium_args
from sparkdispatch.testing.http import http_json
from sparkdispatch.testing.services import free_port
from sparkdispatch.testing.waiting import WatchedProcess, eventually_blocking

if TYPE_CHECKING:
    from airflow.sdk import Context

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
ROWS = 3000
CLUSTER_START_TIMEOUT_S = 600  # an upper bound: a loaded machine starts Spark slowly
OUTPUT = REPO / "tests" / "output"  # screenshots, git-ignored


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`sparkdispatch standalone` as a child process, until the module's tests are done."""
    command = shutil.which("sparkdispatch", path=str(Path(sys.executable).parent))
    if command is None:
        pytest.fail("the sparkdispatch command is not installed")
    storage = tmp_path_factory.mktemp("standalone")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = storage / "standalone.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [
                command,
                "-D",
                f"rest.port={port}",
                "-D",
                "heartbeat.interval=500ms",
                "-D",
                "heartbeat.timeout=5s",
                "-D",
                "taskexecutor.connect.start-timeout=5min",
                "standalone",
                "--storage",
                str(storage / "data"),
                "--taskexecutors",
                "1",
                "--slots",
                "3",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
        )
    try:
        eventually_blocking(
            lambda: answers(f"{url}/overview", lambda overview: overview.get("slots_total", 0) >= 3),
            "the standalone cluster's 3 slots",
            timeout=CLUSTER_START_TIMEOUT_S,
            interval=0.5,
            processes=[WatchedProcess("sparkdispatch standalone", process, log_path.read_text)],
        )
        yield url
    finally:
        if process.poll() is None:
            stop_process_group(process, grace_s=60)


def stop_process_group(process: subprocess.Popen[bytes], *, grace_s: float) -> None:
    """SIGTERM to the process's group; SIGKILL after `grace_s` if it has not exited."""
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


@pytest.fixture(scope="module")
def lineage_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where Airflow's OpenLineage provider writes the events of this module's task runs."""
    return tmp_path_factory.mktemp("openlineage") / "events.jsonl"


@pytest.fixture(scope="module")
def airflow(cluster: str, lineage_file: Path) -> Iterator[dict[str, Any]]:
    """A migrated Airflow metadata DB, the `sparkdispatch_default` connection, the example DAGs,
    OpenLineage events written to `lineage_file`."""
    port = cluster.rsplit(":", 1)[1]
    os.environ["AIRFLOW_CONN_SPARKDISPATCH_DEFAULT"] = json.dumps(
        {"conn_type": "sparkdispatch", "host": "127.0.0.1", "port": int(port)}
    )
    os.environ["AIRFLOW__OPENLINEAGE__TRANSPORT"] = json.dumps(
        {"type": "file", "log_file_path": str(lineage_file), "append": True}
    )
    subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
        check=True,
        capture_output=True,
        env=os.environ.copy(),
        timeout=240,
    )
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert not bag.import_errors, bag.import_errors
    try:
        yield bag.dags
    finally:
        os.environ.pop("AIRFLOW_CONN_SPARKDISPATCH_DEFAULT", None)
        os.environ.pop("AIRFLOW__OPENLINEAGE__TRANSPORT", None)


def answers(url: str, check: Callable[[Any], bool] = lambda body: True) -> bool:
    """Whether `GET url` answers 200 with a body that passes `check`."""
    try:
        status, body = http_json("GET", url, timeout=2)
    except (OSError, ValueError):
        return False
    return status == 200 and check(body)


def jobs(cluster: str) -> dict[str, str]:
    return {job["id"]: job["status"] for job in http_json("GET", f"{cluster}/jobs", timeout=10)[1]["jobs"]}


def serialize(dag: Any) -> None:
    """Write a DAG made in a test to the metadata DB, as the DAG processor does for a file's DAGs:
    `dag.test()` runs only serialized DAGs."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    DagBundlesManager().sync_bundles_to_db()
    bag = DagBag(dag_folder=os.devnull)
    bag.bag_dag(dag)
    sync_bag_to_db(bag, "dags-folder", None)


def run_dag(dag: Any) -> Any:
    run = dag.test(run_conf={"rows": ROWS})
    return run


def clear_and_run(dag: Any, run_id: str, task_ids: list[str] | None) -> Any:
    """Clear tasks of a run (None: the whole run) as the UI does, then run it again; its state.

    The clear is Airflow's own (`clear_task_instances`, resetting the run). `dag.test()` would
    replace the run, so the cleared run is run here by `dag.test()`'s own loop (`drive`).
    """
    from airflow import settings
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import clear_task_instances
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.utils.state import DagRunState
    from sqlalchemy import select

    assert settings.Session is not None  # set up by Airflow's configuration
    session = settings.Session()
    try:
        scheduler_dag = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))
        cleared = scheduler_dag.clear(task_ids=task_ids, run_id=run_id, dry_run=True, session=session)
        clear_task_instances(list(cleared), session, DagRunState.QUEUED)
        session.commit()
        run = session.scalar(select(DagRun).where(DagRun.dag_id == dag.dag_id, DagRun.run_id == run_id))
        run.dag = scheduler_dag
        run.state = DagRunState.RUNNING  # what the scheduler does with a queued run
        session.commit()
        drive(dag, run, session)
        return run.state
    finally:
        session.close()


def drive(dag: Any, run: Any, session: Any, *, until_deferred: str | None = None) -> None:
    """`dag.test()`'s loop over a running run: schedule what is ready, run it in this process.

    Deferred tasks run their trigger inline, unless `until_deferred` names a task: then the loop
    ends once that task is DEFERRED, leaving its trigger to a triggerer.
    """
    from airflow.sdk.definitions.dag import _run_task
    from airflow.utils.state import DagRunState, TaskInstanceState

    while run.state == DagRunState.RUNNING:
        session.expire_all()
        if (
            until_deferred
            and run.get_task_instance(until_deferred, session=session).state == TaskInstanceState.DEFERRED
        ):
            return
        schedulable, _ = run.update_state(session=session)
        for ti in schedulable:
            ti.try_number += 1
            ti.state = TaskInstanceState.SCHEDULED
        session.commit()
        for ti in run.get_task_instances(state=[TaskInstanceState.SCHEDULED], session=session):
            _run_task(ti=ti, task=dag.task_dict[ti.task_id], run_triggerer=until_deferred is None)
    assert until_deferred is None, f"the run ended {run.state} before {until_deferred} deferred"


@pytest.mark.parametrize(
    "dag_id",
    [
        "sparkdispatch_sales_pipeline",
        "sparkdispatch_sales_pipeline_deferrable",
        "sparkdispatch_submit_then_sense",
        "sparkdispatch_sales_job_group",
    ],
)
def test_an_example_dag_runs_to_one_finished_job(cluster: str, airflow: dict[str, Any], dag_id: str) -> None:
    before = jobs(cluster)
    run = run_dag(airflow[dag_id])
    assert str(run.state) in ("success", "DagRunState.SUCCESS"), run.state
    task_states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert set(task_states) == set(airflow[dag_id].task_dict), task_states
    assert all(state in ("success", "TaskInstanceState.SUCCESS") for state in task_states.values()), task_states
    new = {job_id: status for job_id, status in jobs(cluster).items() if job_id not in before}
    assert list(new.values()) == ["FINISHED"], new
    details = http_json("GET", f"{cluster}/jobs/{next(iter(new))}/execution-result", timeout=10)[1]
    vertices = details["job_execution_result"]["vertices"]
    assert set(vertices) == {"generate", "clean", "revenue_by_region", "revenue_by_product", "report"}
    assert vertices["generate"]["rows"] == ROWS and vertices["report"]["rows"] == 4


OLDEST_AIRFLOW = REPO / ".venv-airflow30"  # made by scripts/install.sh
EXAMPLE_DAGS = [
    "sparkdispatch_sales_pipeline",
    "sparkdispatch_sales_pipeline_deferrable",
    "sparkdispatch_submit_then_sense",
    "sparkdispatch_sales_job_group",
    "sparkdispatch_sales_by_size",
]


@pytest.mark.timeout(1200)  # five DAG runs, seven jobs, in a second Airflow that migrates its database first
def test_the_example_dags_parse_and_run_on_the_oldest_supported_airflow(cluster: str, tmp_path: Path) -> None:
    """Airflow 3.0 in a venv of its own (no ResumableJobMixin, no aget_connection there) parses the
    example DAGs and runs each with `dag.test()`, deferred tasks' triggers included, against the
    same cluster: every task succeeds and every job FINISHED."""
    python = OLDEST_AIRFLOW / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{OLDEST_AIRFLOW} is missing: run scripts/install.sh")
    port = int(cluster.rsplit(":", 1)[1])
    env = {key: value for key, value in os.environ.items() if not key.startswith("AIRFLOW")}
    env.update(
        {
            "AIRFLOW_HOME": str(tmp_path / "airflow-home"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW_CONN_SPARKDISPATCH_DEFAULT": json.dumps(
                {"conn_type": "sparkdispatch", "host": "127.0.0.1", "port": port}
            ),
            "PATH": f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
    )
    before = jobs(cluster)
    done = subprocess.run(
        [str(python), str(Path(__file__).with_name("airflow_dag_runner.py")), str(DAGS), *EXAMPLE_DAGS],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["airflow"].startswith("3.0."), summary["airflow"]
    assert summary["import_errors"] == {} and set(EXAMPLE_DAGS) <= set(summary["dags"]), summary
    for dag_id in EXAMPLE_DAGS:
        run = summary["runs"][dag_id]
        assert "success" in run["state"] and all("success" in state for state in run["tasks"].values()), (dag_id, run)
    new = [status for job_id, status in jobs(cluster).items() if job_id not in before]
    assert new == ["FINISHED"] * 7, new  # one job per DAG run, three for the mapped one


def test_clearing_a_finished_task_or_its_run_runs_its_job_again(cluster: str, airflow: dict[str, Any]) -> None:
    dag = airflow["sparkdispatch_sales_pipeline"]
    before = jobs(cluster)

    def new_jobs() -> list[str]:
        return [status for job_id, status in jobs(cluster).items() if job_id not in before]

    run = run_dag(dag)
    assert str(run.state) in ("success", "DagRunState.SUCCESS"), run.state
    assert new_jobs() == ["FINISHED"]
    state = clear_and_run(dag, run.run_id, ["sales_report"])  # "Clear" on the task instance
    assert str(state) in ("success", "DagRunState.SUCCESS"), state
    assert new_jobs() == ["FINISHED"] * 2
    state = clear_and_run(dag, run.run_id, None)  # "Clear" on the whole run
    assert str(state) in ("success", "DagRunState.SUCCESS"), state
    assert new_jobs() == ["FINISHED"] * 3


class _TI:
    def __init__(self, run_id: str) -> None:
        self.dag_id, self.run_id, self.task_id, self.map_index = "e2e", run_id, "submit", -1
        self.max_tries = 0  # never cleared, no retries
        self.stats_tags: dict[str, str] = {}
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


def _sales_operator(**kwargs: Any) -> Any:
    from sparkdispatch.operators import SparkDispatchSubmitJobOperator

    sys.path.insert(0, str(DAGS))
    try:
        import example_pipeline  # type: ignore[import-not-found]  # dags/, on sys.path just here
    finally:
        sys.path.remove(str(DAGS))
    graph = json.loads(json.dumps(example_pipeline.SALES_REPORT).replace("{{ params.rows }}", str(ROWS)))
    return SparkDispatchSubmitJobOperator(
        task_id="submit",
        job_graph=graph,
        artifacts=[str(DAGS / "pipelines")],
        poll_interval=0.5,
        deferrable=False,
        **kwargs,
    )


def test_a_retried_task_reattaches_to_its_running_job(cluster: str, airflow: dict[str, Any]) -> None:
    run_id = f"retry-{time.time_ns()}"
    before = jobs(cluster)
    first = _sales_operator(wait_for_completion=False).execute({"ti": _TI(run_id)})
    second = _sales_operator().execute({"ti": _TI(run_id)})  # the retry waits for the same job
    assert first == second
    new = {job_id: status for job_id, status in jobs(cluster).items() if job_id not in before}
    assert new == {first: "FINISHED"}


def test_killing_a_running_operator_cancels_its_job(cluster: str, airflow: dict[str, Any]) -> None:
    op = _sales_operator()
    op.job_graph["vertices"][0]["params"]["rows"] = "50000000"  # long enough to be killed mid-run
    errors: list[BaseException] = []

    def execute() -> None:
        try:
            op.execute({"ti": _TI(f"kill-{time.time_ns()}")})
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            errors.append(exc)

    thread = threading.Thread(target=execute)
    thread.start()
    eventually_blocking(
        lambda: op.job_id is not None and jobs(cluster).get(op.job_id) == "RUNNING",
        "the job to run",
        timeout=60,
        interval=0.2,
    )
    op.on_kill()
    thread.join(120)
    assert jobs(cluster)[op.job_id] == "CANCELED"
    assert len(errors) == 1 and "ended CANCELED" in str(errors[0])


def test_an_execution_timeout_cancels_the_running_job(cluster: str, airflow: dict[str, Any]) -> None:
    """Airflow's own timeout (`execution_timeout`, run by `dag.test()`'s task runner) cancels the job."""
    from datetime import datetime, timedelta

    from airflow.sdk import DAG

    with DAG(f"e2e_timeout_{time.time_ns()}", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        op = _sales_operator(execution_timeout=timedelta(seconds=15))
        op.job_graph["vertices"][0]["params"]["rows"] = "50000000"  # runs far longer than the timeout
    serialize(dag)
    before = jobs(cluster)
    run = dag.test()
    assert "failed" in str(run.state).lower(), run.state
    new = {job_id: status for job_id, status in jobs(cluster).items() if job_id not in before}
    assert list(new.values()) == ["CANCELED"], new


def test_a_deferred_vertex_task_marked_failed_leaves_its_job_running_and_a_run_timeout_cancels_it(
    cluster: str, airflow: dict[str, Any], tmp_path: Path
) -> None:
    """A real `airflow triggerer` runs the triggers of two deferred vertex tasks of one job. Marking one
    failed as the UI does (`set_task_instance_state`) makes the triggerer cancel its trigger "by user
    action" and call its `on_kill`, which asks Airflow why (the task instance is FAILED) and leaves
    the job running for the other. Then the DAG run times out as the scheduler times it out (the run
    FAILED, its unfinished task SKIPPED, in one transaction): the other trigger's `on_kill` finds its
    task SKIPPED and cancels the job."""
    from datetime import datetime

    from airflow import settings
    from airflow.models.dagrun import get_or_create_dagrun
    from airflow.sdk import DAG, timezone
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.utils.state import DagRunState, TaskInstanceState
    from airflow.utils.types import DagRunTriggeredByType

    from sparkdispatch.operators import SparkDispatchJobGroup, SparkDispatchVertexOperator

    with DAG(f"e2e_triggerer_{time.time_ns()}", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        with SparkDispatchJobGroup(group_id="slow", artifacts=[str(DAGS / "pipelines")]):
            for name in ("generate", "other"):  # each runs for minutes
                SparkDispatchVertexOperator(
                    task_id=name,
                    entrypoint="pipelines.sales:generate",
                    deferrable=True,
                    vertex_params={"rows": "50000000"},
                    poll_interval=0.5,
                )
    serialize(dag)
    before = jobs(cluster)
    assert settings.Session is not None  # set up by Airflow's configuration
    session = settings.Session()
    triggerer: subprocess.Popen[bytes] | None = None
    log_path = tmp_path / "triggerer.log"
    try:
        scheduler_dag = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))
        now = timezone.utcnow()
        run = get_or_create_dagrun(
            dag=scheduler_dag,
            run_id=f"kill-{time.time_ns()}",
            logical_date=None,
            data_interval=None,
            run_after=now,
            conf=None,
            triggered_by=DagRunTriggeredByType.TEST,
            triggering_user_name="e2e",
            start_date=now,
            session=session,
        )
        drive(dag, run, session, until_deferred="slow.generate")  # the launch task ran; generate deferred
        drive(dag, run, session, until_deferred="slow.other")
        [job_id] = [job_id for job_id in jobs(cluster) if job_id not in before]
        with open(log_path, "wb") as log:
            triggerer = subprocess.Popen(
                [str(Path(sys.executable).parent / "airflow"), "triggerer", "--skip-serve-logs"],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=os.environ.copy(),
            )
        watched = WatchedProcess("the triggerer", triggerer, lambda: trigger_logs(log_path))
        started = re.compile(r"trigger \S+/slow\.(generate|other)/\S+ \(ID \d+\) starting")
        eventually_blocking(
            lambda: {m[1] for m in started.finditer(trigger_logs(log_path))} == {"generate", "other"},
            "the triggerer to start both triggers",
            timeout=120,
            interval=0.5,
            processes=[watched],
        )
        assert jobs(cluster)[job_id] == "RUNNING"
        scheduler_dag.set_task_instance_state(
            task_id="slow.generate", run_id=run.run_id, state=TaskInstanceState.FAILED, session=session
        )  # "Mark as failed"
        session.commit()
        eventually_blocking(
            lambda: "the job runs on" in trigger_logs(log_path),
            "the marked task's on_kill",
            timeout=90,
            interval=0.5,
            processes=[watched],
        )
        assert "invoking on_kill" in trigger_logs(log_path)
        assert jobs(cluster)[job_id] == "RUNNING"
        # the DAG run's timeout, as SchedulerJobRunner applies it
        run.set_state(DagRunState.FAILED)
        other = run.get_task_instance("slow.other", session=session)
        assert other is not None
        other.state = TaskInstanceState.SKIPPED
        session.merge(other)
        session.commit()
        eventually_blocking(
            lambda: jobs(cluster)[job_id] == "CANCELED",
            f"job {job_id} to be CANCELED",
            timeout=90,
            interval=0.5,
            processes=[watched],
        )
    finally:
        session.close()
        if triggerer is not None:
            stop_process_group(triggerer, grace_s=30)
        if job_id_of := [j for j, status in jobs(cluster).items() if j not in before and status == "RUNNING"]:
            http_json("PATCH", f"{cluster}/jobs/{job_id_of[0]}?mode=cancel", timeout=10)  # it runs for minutes


def trigger_logs(triggerer_log: Path) -> str:
    """The triggerer's own output and the trigger logs it wrote beside the task logs."""
    files = [triggerer_log, *sorted(Path(os.environ["AIRFLOW_HOME"], "logs").rglob("*.trigger.*"))]
    return "\n".join(path.read_text(errors="replace") for path in files if path.exists())


def test_decorated_functions_run_as_vertices_of_a_group_and_as_a_job_of_their_own(
    cluster: str, airflow: dict[str, Any], capfd: pytest.CaptureFixture[str]
) -> None:
    from datetime import datetime

    from airflow.sdk import DAG, task

    from sparkdispatch.operators import SparkDispatchJobGroup

    with DAG(f"e2e_decorated_{time.time_ns()}", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        with SparkDispatchJobGroup(
            group_id="numbers", restart_strategy={"type": "fixed-delay", "attempts": 0, "delay_s": 0}
        ):

            @task.sparkdispatch(parallelism=2, vertex_params={"n": "100"}, poll_interval=0.5)
            def numbers(ctx: Any) -> Any:
                print(f"numbers says hello from subtask {ctx.subtask_index}")
                return ctx.spark.range(int(ctx.params["n"])).where(f"id % {ctx.parallelism} = {ctx.subtask_index}")

            @task.sparkdispatch(poll_interval=0.5, deferrable=True)  # waits in the (inline) triggerer
            def total(ctx: Any, numbers: Any, column: str) -> Any:
                from pyspark.sql import functions as F

                print("total adds them up")
                return numbers.agg(F.sum(column).alias("total"))

            total(numbers(), "id")  # type: ignore[call-arg,misc]  # TaskFlow: numbers' output is total's input DataFrame

        @task.sparkdispatch(poll_interval=0.5, deferrable=False)
        def alone(ctx: Any) -> Any:
            print("alone says hi")
            return ctx.spark.range(7)

        @task.sparkdispatch(poll_interval=0.5, deferrable=True)
        def alone_deferred(ctx: Any) -> Any:
            print("alone_deferred says hi")
            return ctx.spark.range(5)

        alone()  # type: ignore[call-arg,misc]
        alone_deferred()  # type: ignore[call-arg,misc]
    serialize(dag)
    before = jobs(cluster)
    run = dag.test()
    assert "success" in str(run.state).lower(), run.state
    new = {job_id: status for job_id, status in jobs(cluster).items() if job_id not in before}
    assert sorted(new.values()) == ["FINISHED"] * 3, new
    results = {
        job_id: http_json("GET", f"{cluster}/jobs/{job_id}/execution-result", timeout=10)[1]["job_execution_result"][
            "vertices"
        ]
        for job_id in new
    }
    rows = {vertex: result["rows"] for vertices in results.values() for vertex, result in vertices.items()}
    assert rows == {"numbers": 100, "total": 1, "alone": 7, "alone_deferred": 5}
    # what the function printed: in the vertex task's Airflow log, and served by the master
    output = capfd.readouterr().out
    for subtask in (0, 1):
        assert f"numbers[{subtask}] attempt 0: numbers says hello from subtask {subtask}" in output
    assert "total[0] attempt 0: total adds them up" in output  # streamed by the trigger
    assert "alone[0] attempt 0: alone says hi" in output  # a whole job's logs, by the submit operator
    assert "alone_deferred[0] attempt 0: alone_deferred says hi" in output  # ... and by its trigger
    [group_job] = [job_id for job_id, vertices in results.items() if "numbers" in vertices]
    status, piece = http_json("GET", f"{cluster}/jobs/{group_job}/vertices/numbers/log?subtask=1", timeout=10)
    # the driver's progress report of a slow operation may follow (on a loaded machine)
    printed = [line for line in piece["text"].splitlines() if not line.startswith("[spark driver] ")]
    assert status == 200 and printed == ["numbers says hello from subtask 1"], piece


def test_a_decorated_task_mapped_outside_a_group_runs_one_job_per_map_index(
    cluster: str, airflow: dict[str, Any]
) -> None:
    from datetime import datetime

    from airflow.sdk import DAG, task

    with DAG(f"e2e_mapped_{time.time_ns()}", schedule=None, start_date=datetime(2026, 1, 1)) as dag:

        @task.sparkdispatch(poll_interval=0.5)
        def sized(ctx: Any, rows: int) -> Any:
            return ctx.spark.range(rows)

        sized.expand(rows=[2, 3])
    serialize(dag)
    before = jobs(cluster)
    run = dag.test()
    assert "success" in str(run.state).lower(), run.state
    new = {job_id: status for job_id, status in jobs(cluster).items() if job_id not in before}
    assert sorted(new.values()) == ["FINISHED"] * 2, new
    rows = sorted(
        http_json("GET", f"{cluster}/jobs/{job_id}/execution-result", timeout=10)[1]["job_execution_result"][
            "vertices"
        ]["sized"]["rows"]
        for job_id in new
    )
    assert rows == [2, 3]


def test_a_failed_vertex_cleared_in_airflow_is_repaired_without_running_its_upstream_again(
    cluster: str, airflow: dict[str, Any], tmp_path: Path, lineage_file: Path
) -> None:
    from datetime import datetime

    from airflow.sdk import DAG, task

    from sparkdispatch.operators import SparkDispatchJobGroup

    markers = tmp_path / "markers"
    markers.mkdir()
    with DAG(f"e2e_repair_{time.time_ns()}", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        with SparkDispatchJobGroup(group_id="fix", restart_strategy={"type": "none"}):
            # durable: a repair of flaky reads gen's result instead of running gen in flaky's chain again
            @task.sparkdispatch(
                vertex_params={"markers": str(markers)}, poll_interval=0.5, deferrable=False, result="durable"
            )
            def gen(ctx: Any) -> Any:
                with open(f"{ctx.params['markers']}/gen", "a") as marker:
                    marker.write(f"{ctx.attempt}\n")
                return ctx.spark.range(10)

            @task.sparkdispatch(vertex_params={"markers": str(markers)}, poll_interval=0.5, deferrable=True)
            def flaky(ctx: Any) -> Any:
                import os

                path = f"{ctx.params['markers']}/flaky"
                first = not os.path.exists(path)
                with open(path, "a") as marker:
                    marker.write(f"{ctx.attempt}\n")
                if first:
                    raise ValueError("the first run of flaky fails")
                return ctx.inputs["gen"].where("id < 4")

            @task.sparkdispatch(vertex_params={"markers": str(markers)}, poll_interval=0.5, deferrable=False)
            def after(ctx: Any) -> Any:
                with open(f"{ctx.params['markers']}/after", "a") as marker:
                    marker.write(f"{ctx.attempt}\n")
                return ctx.inputs["flaky"]

            gen() >> flaky() >> after()  # type: ignore[call-arg,misc]
    serialize(dag)
    before = jobs(cluster)
    run = dag.test()
    assert "failed" in str(run.state).lower(), run.state
    [job_id] = [job_id for job_id in jobs(cluster) if job_id not in before]
    assert jobs(cluster)[job_id] == "FAILED"
    # "Clear" on the failed task with its downstream, as in the Airflow UI
    state = clear_and_run(dag, run.run_id, ["fix.flaky", "fix.after"])
    assert "success" in str(state).lower(), state
    assert [j for j in jobs(cluster) if j not in before] == [job_id]  # the same job, repaired
    details = http_json("GET", f"{cluster}/jobs/{job_id}", timeout=10)[1]
    assert details["status"] == "FINISHED"
    assert [(r["number"], r["requested"], r["vertices"], r["status"]) for r in details["repairs"]] == [
        (1, ["flaky"], ["flaky", "after"], "FINISHED")
    ]
    runs = {name: (markers / name).read_text().split() for name in ("gen", "flaky", "after")}
    assert runs == {"gen": ["0"], "flaky": ["0", "0"], "after": ["0"]}, runs  # gen ran once
    vertices = http_json("GET", f"{cluster}/jobs/{job_id}/execution-result", timeout=10)[1]["job_execution_result"][
        "vertices"
    ]
    assert {v: vertices[v]["rows"] for v in ("gen", "flaky", "after")} == {"gen": 10, "flaky": 4, "after": 4}
    # OpenLineage (the provider is installed): each vertex task's COMPLETE event names the job and
    # the vertex's result directory as its output (flaky, chained into after, wrote none); the
    # provider adds the parent run (the DAG run)
    assert "result_path" not in vertices["flaky"]
    events = lineage_events(lineage_file, dag.dag_id)
    for vertex in ("gen", "flaky", "after"):
        [complete] = [
            e for e in events if e["job"]["name"] == f"{dag.dag_id}.fix.{vertex}" and e["eventType"] == "COMPLETE"
        ]
        written = [("file", vertices[vertex]["result_path"])] if vertex != "flaky" else []
        assert [(o["namespace"], o["name"]) for o in complete["outputs"]] == written
        assert complete["run"]["facets"]["externalQuery"]["externalQueryId"] == job_id
        assert complete["run"]["facets"]["parent"]["job"]["name"] == dag.dag_id


def lineage_events(path: Path, dag_id: str, timeout: float = 30.0) -> list[dict[str, Any]]:
    """The OpenLineage events of `dag_id`'s tasks in `path` (written from forked processes: waited for until
    three tasks completed, or `timeout`: the test says what is missing)."""

    def events() -> list[dict[str, Any]]:
        lines = path.read_text().splitlines() if path.exists() else []
        return [json.loads(line) for line in lines if dag_id in line]

    def three_complete() -> list[dict[str, Any]] | None:
        found = events()
        return found if sum(e["eventType"] == "COMPLETE" for e in found) >= 3 else None

    try:
        return eventually_blocking(three_complete, "three completed tasks' events", timeout=timeout, interval=0.5)
    except TimeoutError:
        return events()


def test_the_mapped_example_runs_a_job_per_input(cluster: str, airflow: dict[str, Any]) -> None:
    before = jobs(cluster)
    run = airflow["sparkdispatch_sales_by_size"].test()
    assert "success" in str(run.state).lower(), run.state
    new = [job_id for job_id in jobs(cluster) if job_id not in before]
    assert len(new) == 3
    generated = sorted(
        http_json("GET", f"{cluster}/jobs/{job_id}/execution-result", timeout=10)[1]["job_execution_result"][
            "vertices"
        ]["generate"]["rows"]
        for job_id in new
    )
    assert generated == [1000, 2000, 3000]


def test_the_sensor_fails_with_the_remote_traceback(
    cluster: str, airflow: dict[str, Any], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from sparkdispatch.client import SparkDispatchClient, SyncSparkDispatchClient
    from sparkdispatch.operators import SparkDispatchJobSensor

    package = tmp_path / "broken_tasks"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tasks.py").write_text("def explode(ctx):\n    raise ValueError('order 42 has no price')\n")
    with SyncSparkDispatchClient(SparkDispatchClient(addresses=[cluster])) as client:
        key = client.upload_artifact(package)
        job_id = client.submit(
            {
                "name": "broken",
                "artifacts": [key],
                "restart_strategy": {"type": "none"},
                "vertices": [{"id": "explode", "entrypoint": "broken_tasks.tasks:explode"}],
            }
        ).job_id
    sensor = SparkDispatchJobSensor(task_id="wait", job_id=job_id, poke_interval=0.5, timeout=120, deferrable=False)
    with pytest.raises(AirflowFailException, match="ValueError: order 42 has no price"):
        sensor.execute(cast("Context", {"ti": _TI("sensor")}))
    assert "raise ValueError('order 42 has no price')" in capfd.readouterr().out


def test_test_connection_reports_the_live_cluster(cluster: str, airflow: dict[str, Any]) -> None:
    from sparkdispatch.hooks import SparkDispatchHook

    ok, message = SparkDispatchHook().test_connection()
    assert ok, message
    assert message.startswith(f"leader {cluster}, 1 TaskExecutors, 3 slots")


def test_airflows_grid_shows_one_task_per_vertex_of_the_group(
    cluster: str, airflow: dict[str, Any], tmp_path: Path
) -> None:
    """Airflow's own web server (`airflow api-server`) and UI in headless Chromium: with its groups
    expanded, the example group's run has a grid row per vertex task (and the launch task), each
    green. Screenshot: tests/output/airflow-grid.png."""
    from playwright.sync_api import sync_playwright

    dag = airflow["sparkdispatch_sales_job_group"]
    run = dag.test(run_conf={"rows": ROWS})
    assert "success" in str(run.state).lower(), run.state
    port = free_port()
    log_path = tmp_path / "api-server.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [str(Path(sys.executable).parent / "airflow"), "api-server", "--host", "127.0.0.1", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True"},
        )
    try:
        eventually_blocking(
            lambda: answers(f"http://127.0.0.1:{port}/api/v2/monitor/health"),
            "Airflow's api-server to answer",
            timeout=120,
            interval=0.5,
            processes=[WatchedProcess("Airflow's api-server", server, log_path.read_text)],
        )
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=chromium_args())
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.goto(f"http://127.0.0.1:{port}/dags/{dag.dag_id}/runs/{run.run_id}", wait_until="networkidle")
                vertices = ["generate", "clean", "revenue_by_region", "revenue_by_product", "report"]
                OUTPUT.mkdir(parents=True, exist_ok=True)
                try:
                    page.get_by_role("button", name=re.compile("expand", re.IGNORECASE)).first.click()  # groups open
                    for task in ["launch", *vertices]:
                        page.get_by_text(task, exact=True).first.wait_for(timeout=30_000)
                finally:
                    page.screenshot(path=str(OUTPUT / "airflow-grid.png"), full_page=True)
            finally:
                browser.close()
    finally:
        stop_process_group(server, grace_s=30)
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert {task.split(".", 1)[1] for task in states if task.startswith("sales.")} == {"launch", *vertices}
    assert all("success" in state.lower() for state in states.values()), states
