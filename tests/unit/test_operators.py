"""SparkDispatchSubmitJobOperator and SparkDispatchJobSensor against a real in-process master.

The master is an InProcessMaster on its own loop thread; its one TaskExecutor is a
ScriptedTaskExecutor, and a test ends a job as that TaskExecutor's tasks would (FINISHED, or
vertex `b` FAILED with a remote traceback), through the master's TaskExecutor endpoints.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import pytest
from airflow.sdk import DAG, BaseOperator
from airflow.sdk.definitions.xcom_arg import PlainXComArg
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred

from sparkdispatch.client import SparkDispatchClient
from sparkdispatch.errors import HostRefused, RouteNotFound, UnknownJob, UnsupportedMediaType
from sparkdispatch.model.states import ExecutionState, JobStatus
from sparkdispatch.model.job_result import Failure, JobResult, VertexResult
from sparkdispatch.operators import SparkDispatchJobSensor, SparkDispatchJobTrigger, SparkDispatchSubmitJobOperator
from sparkdispatch.operators.decorators import SparkDispatchFunctionOperator
from sparkdispatch.operators.jobs import (
    attempt_job_id,
    clear_generation,
    cleared_job_id,
    result_summary,
    task_failure,
    task_job_id,
)
from sparkdispatch.operators.lineage import dataset_name
from sparkdispatch.model.protocol import TaskDeploymentDescriptor
from sparkdispatch.model.rest_shapes import JobDetails, JobSummary, VertexOutcome
from sparkdispatch.testing.master import InProcessMaster, Script, TaskOutcome
from sparkdispatch.testing.waiting import eventually_blocking
from sparkdispatch.testing.wheels import make_wheel

if TYPE_CHECKING:
    from airflow.sdk import Context

T = TypeVar("T")

# one restart: a vertex that keeps failing ends FAILED after 2 attempts
GRAPH = {
    "name": "sales",
    "vertices": [
        {"id": "a", "entrypoint": "pipelines.sales:generate"},
        {"id": "b", "entrypoint": "pipelines.sales:clean", "inputs": ["a"]},
    ],
    "restart_strategy": {"type": "fixed-delay", "attempts": 1, "delay_s": 0},
}
TRACEBACK = 'Traceback (most recent call last):\n  File "sales.py", line 3\nValueError: bad row 7\n'


def finish(tdd: TaskDeploymentDescriptor) -> TaskOutcome:
    return TaskOutcome(rows=10)


def missing_entrypoint(tdd: TaskDeploymentDescriptor) -> TaskOutcome:
    return TaskOutcome(
        ExecutionState.FAILED,
        Failure(
            "EntrypointNotFound", f"entrypoint {tdd.entrypoint!r}: module 'pipelines.sales' has no function 'x'", ""
        ),
    )


def unbuildable_environment(tdd: TaskDeploymentDescriptor) -> TaskOutcome:
    message = "the job's Python environment could not be built (no-such-lib==9.9): uv said: No solution found"
    return TaskOutcome(ExecutionState.FAILED, Failure("EnvironmentBuildFailed", message, ""))


def fail_b(tdd: TaskDeploymentDescriptor) -> TaskOutcome:
    if tdd.vertex_id == "a":
        return TaskOutcome(rows=10)
    return TaskOutcome(ExecutionState.FAILED, Failure("ValueError", "bad row 7", TRACEBACK))


class Cluster:
    """The master with one TaskExecutor (4 slots), and what the tests ask of it."""

    def __init__(self, master: InProcessMaster) -> None:
        self.master = master
        self.url = master.url
        self.task_executor = master.run(master.add_task_executor(slots=4))

    @property
    def posts(self) -> list[str]:
        """The job ids of every `POST /jobs` the master received, in order."""
        assert self.master.proxy is not None
        return [
            json.loads(r.body)["job_id"] for r in self.master.proxy.requests if (r.method, r.path) == ("POST", "/jobs")
        ]

    def requests_to(self, path: str) -> int:
        """How many calls of `path` the master received."""
        assert self.master.proxy is not None
        return sum(1 for r in self.master.proxy.requests if r.path == path)

    def end_new_jobs(self, script: Script | None) -> None:
        """How the tasks of jobs not ended by `end` go on: `finish`, `fail_b`, or None (keep running)."""
        self.task_executor.script = script

    def end(self, job_id: str, script: Script = finish) -> None:
        self.master.run(self.task_executor.end_job(job_id, script))

    def cancel(self, job_id: str) -> None:
        self.master.run(self._ask(lambda client: client.cancel(job_id)))

    def status(self, job_id: str) -> str:
        details: JobDetails = self.master.run(self._ask(lambda client: client.job(job_id)))
        return details.status.value

    def job_ids(self) -> list[str]:
        jobs: list[JobSummary] = self.master.run(self._ask(lambda client: client.jobs()))
        return [job.id for job in jobs]

    def result(self, job_id: str) -> JobResult:
        result: JobResult | None = self.master.run(self._ask(lambda client: client.execution_result(job_id)))
        assert result is not None, f"job {job_id} has no JobResult yet"
        return result

    def wait_for_status(self, job_id: str, status: str) -> None:
        for _ in range(1000):
            if job_id in self.job_ids() and self.status(job_id) == status:
                return
            threading.Event().wait(0.01)
        raise AssertionError(f"job {job_id} did not become {status}")

    async def _ask(self, call: Any) -> Any:
        async with SparkDispatchClient(addresses=[self.url]) as client:
            return await call(client)


class FakeTI:
    def __init__(self, run_id: str = "manual__1", map_index: int = -1, max_tries: int = 0) -> None:
        self.dag_id, self.run_id, self.task_id, self.map_index = "sales_dag", run_id, "submit", map_index
        self.max_tries = max_tries  # as Airflow keeps it: `retries`, then `try_number + retries` at each clear
        self.try_number = 1
        self.xcom: dict[str, Any] = {}
        self.others: dict[tuple[str, str], Any] = {}  # other tasks' XComs: (task_id, key) -> value
        self.stats_tags: dict[str, str] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value

    def xcom_pull(self, task_ids: str, map_indexes: int | None = None, key: str = "return_value", **_: Any) -> Any:
        assert map_indexes in (None, self.map_index)
        return self.xcom.get(key) if task_ids == self.task_id else self.others.get((task_ids, key))


class FakeStore(dict[str, Any]):
    def set(self, key: str, value: Any) -> None:
        self[key] = value


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    with InProcessMaster(overrides={"rest.execution-result.long-poll": "50ms"}, record_requests=True) as master:
        monkeypatch.setenv(
            "AIRFLOW_CONN_SPARKDISPATCH_DEFAULT",
            json.dumps({"conn_type": "sparkdispatch", "host": "127.0.0.1", "port": master.port}),
        )
        yield Cluster(master)


def context(ti: FakeTI | None = None, *, store: FakeStore | None = None, durable: bool = True, **extra: Any) -> Context:
    """What Airflow hands a task's run: its task instance, (`durable`) its task state store, and `extra`."""
    values: dict[str, Any] = {"ti": ti or FakeTI(), **extra}
    if durable:
        values["task_state_store"] = store if store is not None else FakeStore()
    return cast("Context", values)


def ti_of(ctx: Context) -> FakeTI:
    ti = ctx["ti"]
    assert isinstance(ti, FakeTI)
    return ti


def store_of(ctx: Context) -> FakeStore:
    store = ctx["task_state_store"]
    assert isinstance(store, FakeStore)
    return store


def task_of(dag: DAG, task_id: str, kind: type[T]) -> T:
    """The DAG's task `task_id`, which is a `kind`."""
    task = dag.task_dict[task_id]
    assert isinstance(task, kind), task
    return task


def operator(**kwargs: Any) -> SparkDispatchSubmitJobOperator:
    return SparkDispatchSubmitJobOperator(
        task_id="submit", **{"job_graph": GRAPH, "poll_interval": 0.02, "deferrable": False, **kwargs}
    )


def test_job_ids_are_deterministic_per_task_instance() -> None:
    first = task_job_id("d", "r", "t", -1)
    assert first == task_job_id("d", "r", "t", None) and len(first) == 32 and int(first, 16) >= 0
    others = {
        task_job_id("d", "r", "t", 0),
        task_job_id("d", "r2", "t", -1),
        task_job_id("d", "r", "t2", -1),
        task_job_id("d2", "r", "t", -1),
        task_job_id("d", "rt", "", -1),
    }
    assert first not in others and len(others) == 5
    chain = [attempt_job_id(first, n) for n in range(4)]
    assert chain[0] == first and len(set(chain)) == 4 and chain == [attempt_job_id(first, n) for n in range(4)]
    cleared = [cleared_job_id(first, generation) for generation in range(4)]
    assert cleared[0] == first and len(set(cleared + chain)) == 7
    assert cleared == [cleared_job_id(first, generation) for generation in range(4)]


def test_the_clear_generation_follows_airflows_max_tries() -> None:
    retries = 2
    created = clear_generation(max_tries=retries, retries=retries)  # tries 1..3 of a new task instance
    cleared_at_try_1 = clear_generation(max_tries=1 + retries, retries=retries)  # Airflow: try_number + retries
    cleared_at_try_3 = clear_generation(max_tries=3 + retries, retries=retries)
    assert created == 0 and len({created, cleared_at_try_1, cleared_at_try_3}) == 3


def test_blocking_run_submits_once_links_the_job_and_returns_its_id(cluster: Cluster) -> None:
    ctx = context()
    cluster.end_new_jobs(finish)
    job_id = operator().execute(ctx)
    assert job_id == task_job_id("sales_dag", "manual__1", "submit", -1)
    assert cluster.posts == [job_id] and cluster.status(job_id) == "FINISHED"
    assert ti_of(ctx).xcom["sparkdispatch_job_url"] == f"{cluster.url}/ui/jobs/{job_id}"
    assert store_of(ctx)["sparkdispatch_job_id"] == job_id


def test_a_retry_reattaches_to_the_running_job_instead_of_submitting_again(cluster: Cluster) -> None:
    op = operator(wait_for_completion=False)
    job_id = op.execute(context())
    assert op.execute(context()) == job_id  # the "retry": a fresh context, same task instance
    assert cluster.posts == [job_id]
    # a blocking retry attaches too and waits for the same job
    threading.Timer(0.2, cluster.end, args=(job_id,)).start()
    assert operator().execute(context()) == job_id
    assert cluster.posts == [job_id] and cluster.job_ids() == [job_id]


def test_a_retry_after_a_finished_job_returns_without_running_it_again(cluster: Cluster) -> None:
    cluster.end_new_jobs(finish)
    job_id = operator().execute(context())
    assert operator().execute(context()) == job_id
    assert cluster.posts == [job_id]


def test_a_failed_job_fails_the_task_with_the_remote_cause_and_a_retry_runs_a_fresh_job(
    cluster: Cluster, capfd: pytest.CaptureFixture[str]
) -> None:
    cluster.end_new_jobs(fail_b)
    with pytest.raises(AirflowException, match="ended FAILED: ValueError: bad row 7"):
        operator().execute(context())
    first = cluster.posts[0]
    log = capfd.readouterr().out
    assert "ValueError: bad row 7" in log and TRACEBACK.splitlines()[1] in log  # the remote traceback
    assert "b: FAILED, 2 attempt(s)" in log  # the per-vertex summary
    cluster.end_new_jobs(finish)
    second = operator().execute(context())
    assert second == attempt_job_id(first, 1) and cluster.posts == [first, second]


@pytest.mark.parametrize("durable", [True, False], ids=["task-state-store", "no-store"])
def test_a_cleared_task_runs_its_job_again_and_a_retry_after_the_clear_reattaches(
    cluster: Cluster, durable: bool
) -> None:
    """Airflow's bookkeeping with retries=2: max_tries is 2, and `try_number + 2` after a clear."""
    cluster.end_new_jobs(finish)
    store = FakeStore()  # Airflow's task state store keeps the job id across retries and clears

    def a_try(max_tries: int) -> str:
        return operator(retries=2).execute(context(FakeTI(max_tries=max_tries), store=store, durable=durable))

    first = a_try(2)  # try 1
    assert a_try(2) == first and cluster.posts == [first]  # try 2, a retry: the FINISHED job, not a second run
    cleared = a_try(2 + 2)  # try 3, after a clear at try 2
    assert cleared != first and cluster.posts == [first, cleared] and cluster.status(cleared) == "FINISHED"
    assert a_try(2 + 2) == cleared and cluster.posts == [first, cleared]  # try 4 retries the cleared try
    again = a_try(4 + 2)  # try 5, after another clear at try 4
    assert again not in (first, cleared) and cluster.posts == [first, cleared, again]
    if durable:
        assert store["sparkdispatch_job_id"] == again


def test_a_cleared_task_reattaches_to_its_job_that_still_runs(cluster: Cluster) -> None:
    """A job of the task instance still running at the clear (its worker died) is not run twice."""
    store = FakeStore()
    first = operator(retries=2, wait_for_completion=False).execute(context(FakeTI(max_tries=2), durable=False))
    store["sparkdispatch_job_id"] = first  # what the try whose worker died had stored
    # the job ends once the new try waits for its result (a timer bet on when that is, and lost on a loaded
    # machine: the job then FINISHED before the try looked, which takes it for a job of before a clear)
    waiting = f"/jobs/{first}/execution-result"

    def end_once_waited_for() -> None:
        eventually_blocking(lambda: cluster.requests_to(waiting), "the new try to wait for the job's result")
        cluster.end(first)

    threading.Thread(target=end_once_waited_for, daemon=True).start()
    assert operator(retries=2).execute(context(FakeTI(max_tries=1 + 2), store=store)) == first
    assert cluster.posts == [first]


@pytest.mark.parametrize("script, expected", [(finish, "FINISHED"), (fail_b, "FAILED")])
def test_a_job_another_try_submitted_meanwhile_is_taken_as_the_master_answers(
    cluster: Cluster, script: Script, expected: str
) -> None:
    """This try finds no job, another try submits it and it ends, then this try submits the same graph:
    the master answers 200 with that job and its status, which the try takes as if it had found it,
    without asking for the status again."""
    cluster.end_new_jobs(script)
    other = operator(wait_for_completion=False).execute(context())
    cluster.wait_for_status(other, expected)
    proxy = cluster.master.proxy
    assert proxy is not None
    proxy.inject("GET", f"/jobs/{other}", status=404, text=json.dumps(UnknownJob(other).to_body()))
    looks, results = proxy.count("GET", f"/jobs/{other}"), proxy.count("GET", f"/jobs/{other}/execution-result")
    cluster.end_new_jobs(finish)
    job_id = operator().execute(context())
    assert proxy.count("GET", f"/jobs/{other}") == looks + 1  # the look that found nothing; then only the POST
    if expected == "FINISHED":
        assert job_id == other and cluster.posts == [other, other]
        assert proxy.count("GET", f"/jobs/{other}/execution-result") == results + 1  # its result, at once
    else:  # moves on to the next job of the chain, as for a FAILED job it found
        assert job_id == attempt_job_id(other, 1) and cluster.posts == [other, other, job_id]
        assert proxy.count("GET", f"/jobs/{other}/execution-result") == results


def test_on_kill_cancels_the_running_job(cluster: Cluster) -> None:
    op = operator()
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            op.execute(context())
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    while op.job_id is None or op.job_id not in cluster.job_ids():
        threading.Event().wait(0.01)
    op.on_kill()
    thread.join(10)
    assert cluster.status(op.job_id) == "CANCELED"
    assert len(outcome) == 1 and "ended CANCELED" in str(outcome[0])


def test_deferrable_submits_then_defers_to_the_trigger(cluster: Cluster) -> None:
    op = operator(deferrable=True)
    ctx = context()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    job_id = cluster.posts[0]
    trigger = deferred.value.trigger
    assert isinstance(trigger, SparkDispatchJobTrigger) and trigger.job_id == job_id and trigger.cancel_on_kill
    assert deferred.value.method_name == "execute_complete"
    assert store_of(ctx)["sparkdispatch_job_id"] == job_id
    cluster.end(job_id)
    cluster.wait_for_status(job_id, "FINISHED")
    event = {"status": "terminal", "job_id": job_id, "result": cluster.result(job_id).to_dict()}
    assert op.execute_complete(ctx, event) == job_id
    with pytest.raises(AirflowException, match="master is gone"):
        op.execute_complete(ctx, {"status": "error", "job_id": job_id, "message": "master is gone"})


def test_artifacts_are_uploaded_and_added_to_the_graph(cluster: Cluster, tmp_path: Path) -> None:
    package = tmp_path / "pipelines"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "sales.py").write_text("def generate(ctx):\n    return None\n")
    job_id = operator(artifacts=[str(package)], wait_for_completion=False).execute(context())
    (key,) = [p.name for p in cluster.master.master.ha.blob_store.directory.iterdir()]
    # the job's first task carries the graph's artifacts to its TaskExecutor
    deployments = eventually_blocking(lambda: cluster.master.gateway.of_job(job_id), "the job's first task")
    assert deployments[0].tdd.artifacts == (key,)


def test_an_environment_is_added_to_the_graph_with_its_local_wheels_uploaded(cluster: Cluster, tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "dist", "team_lib", "0.3")
    op = operator(environment=["tabulate>=0.9", str(wheel)], wait_for_completion=False)
    assert "environment" in op.template_fields
    job_id = op.execute(context())
    (key,) = [p.name for p in cluster.master.master.ha.blob_store.directory.iterdir()]
    deployments = eventually_blocking(lambda: cluster.master.gateway.of_job(job_id), "the job's first task")
    environment = deployments[0].tdd.environment
    assert environment is not None and environment.dependencies == ("tabulate>=0.9", key)


def test_a_bad_environment_fails_the_task_without_retries(cluster: Cluster) -> None:
    with pytest.raises(AirflowFailException, match="environment.dependencies"):
        operator(environment={"dependencies": ["pandas @ https://example.org/p.whl"]}).execute(context())
    with pytest.raises(AirflowFailException, match="list of requirements"):
        operator(environment="pandas").execute(context())


def test_a_graph_file_is_found_beside_the_dag_and_rendered(tmp_path: Path) -> None:
    (tmp_path / "graphs").mkdir()
    (tmp_path / "graphs" / "g.yaml").write_text(
        "name: rows-{{ params.rows }}\nvertices:\n  - {id: a, entrypoint: 'm:f', params: {rows: '{{ params.rows }}'}}\n"
    )

    class Dag:
        folder = str(tmp_path)
        template_searchpath = None

    op = operator(job_graph="graphs/g.yaml", wait_for_completion=False)
    graph = op.load_graph(context(dag=Dag(), params={"rows": 7}))
    assert graph == {"name": "rows-7", "vertices": [{"id": "a", "entrypoint": "m:f", "params": {"rows": "7"}}]}
    with pytest.raises(Exception, match="no JobGraph file"):
        operator(job_graph="graphs/missing.json").load_graph(context(dag=Dag()))


def test_the_sensor_pokes_until_the_job_ends(cluster: Cluster) -> None:
    job_id = operator(wait_for_completion=False).execute(context())
    sensor = SparkDispatchJobSensor(task_id="wait", job_id=job_id, deferrable=False)
    ctx = context()
    assert not sensor.poke(ctx)
    assert ti_of(ctx).xcom["sparkdispatch_job_url"].endswith(f"/ui/jobs/{job_id}")
    cluster.end(job_id)
    cluster.wait_for_status(job_id, "FINISHED")
    done = sensor.poke(ctx)
    assert done.is_done and done.xcom_value is not None and done.xcom_value["status"] == "FINISHED"


def test_the_sensor_fails_with_the_remote_cause(cluster: Cluster, capfd: pytest.CaptureFixture[str]) -> None:
    job_id = operator(wait_for_completion=False).execute(context())
    cluster.end(job_id, fail_b)
    cluster.wait_for_status(job_id, "FAILED")
    sensor = SparkDispatchJobSensor(task_id="wait", job_id=job_id, deferrable=False, poke_interval=0.01)
    # AirflowFailException is what the base class turns into a skip under soft_fail
    with pytest.raises(AirflowFailException, match="ValueError: bad row 7"):
        sensor.poke(context())
    assert TRACEBACK.splitlines()[1] in capfd.readouterr().out
    with pytest.raises(AirflowFailException, match="bad row 7"):  # deferred: the same, no retries
        sensor.execute_complete(
            context(), {"status": "terminal", "job_id": job_id, "result": cluster.result(job_id).to_dict()}
        )


def test_the_sensor_soft_fail_skips_on_a_failed_job(cluster: Cluster) -> None:
    from airflow.sdk.exceptions import AirflowSkipException

    job_id = operator(wait_for_completion=False).execute(context())
    cluster.cancel(job_id)
    sensor = SparkDispatchJobSensor(task_id="wait", job_id=job_id, deferrable=False, soft_fail=True, poke_interval=0.01)
    with pytest.raises(AirflowSkipException):
        sensor.execute(context())


def test_the_deferrable_sensor_defers_while_the_job_runs(cluster: Cluster) -> None:
    job_id = operator(wait_for_completion=False).execute(context())
    sensor = SparkDispatchJobSensor(task_id="wait", job_id=job_id, deferrable=True, poke_interval=0.5)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(context())
    assert deferred.value.trigger.job_id == job_id and not deferred.value.trigger.cancel_on_kill


def test_the_summary_lists_every_vertex() -> None:
    result = JobResult(
        job_id="j",
        name="n",
        status=JobStatus.FINISHED,
        start_time=1000,
        end_time=5200,
        vertices={"a": VertexResult(ExecutionState.FINISHED, 1, rows=10)},
    )
    assert result_summary(result) == "job j (n) FINISHED in 4.2s\n  a: FINISHED, 1 attempt(s), 10 rows"


def test_the_job_id_and_every_vertexs_output_are_pushed_as_xcoms(cluster: Cluster) -> None:
    ctx = context()
    cluster.end_new_jobs(finish)
    job_id = operator().execute(ctx)
    xcom = ti_of(ctx).xcom
    assert xcom["sparkdispatch_job_id"] == job_id
    assert set(xcom["vertices"]) == {"a", "b"}
    for vertex in ("a", "b"):
        output = xcom["vertices"][vertex]
        assert set(output) == {"state", "rows", "result_path", "partitions", "input_files", "attempts"}
        assert (output["state"], output["rows"], output["attempts"]) == ("FINISHED", 10, 1)


def test_openlineage_names_the_job_and_each_finished_vertexs_results_as_outputs(cluster: Cluster) -> None:
    from openlineage.client.event_v2 import Dataset
    from openlineage.client.facet_v2 import external_query_run

    cluster.end_new_jobs(lambda tdd: TaskOutcome(rows=1, result_path=tdd.result_path))
    submit = operator()
    job_id = submit.execute(context())
    lineage = submit.get_openlineage_facets_on_complete(None)
    result = cluster.result(job_id).vertices
    # a is chained into b (its result never written): b's result is the job's one output
    assert result["a"].result_path is None and result["a"].rows == 1
    assert lineage.outputs == [Dataset(namespace="file", name=str(result["b"].result_path))]
    facet = lineage.run_facets["externalQuery"]
    assert isinstance(facet, external_query_run.ExternalQueryRunFacet)
    assert facet.externalQueryId == job_id and facet.source == f"{cluster.url}/ui/jobs/{job_id}"
    assert not lineage.inputs


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/data/results/j/v", ("file", "/data/results/j/v")),
        ("file:///data/results/j/v", ("file", "/data/results/j/v")),
        ("s3a://bucket/results/j/v", ("s3://bucket", "results/j/v")),
        ("hdfs://nn:8020/results/j/v", ("hdfs://nn:8020", "/results/j/v")),
        ("gs://bucket/r", ("gs://bucket", "/r")),
    ],
)
def test_result_paths_are_named_as_openlineage_names_datasets(path: str, expected: tuple[str, str]) -> None:
    assert dataset_name(path) == expected


def test_a_deferral_that_times_out_cancels_the_job(cluster: Cluster) -> None:
    from airflow.sdk.exceptions import TaskDeferralTimeout
    from airflow.sdk.bases.operator import TriggerFailureReason

    ctx = context()
    with pytest.raises(TaskDeferred):
        operator(deferrable=True).execute(ctx)
    job_id = cluster.posts[0]
    assert cluster.status(job_id) in ("CREATED", "RUNNING")
    # the task resumed by Airflow after the trigger's timeout: a new operator object, as on a worker
    with pytest.raises(TaskDeferralTimeout):
        operator(deferrable=True).resume_execution("__fail__", {"error": TriggerFailureReason.TRIGGER_TIMEOUT}, ctx)
    cluster.wait_for_status(job_id, "CANCELED")


def test_errors_no_retry_can_fix_fail_the_task_without_retries(cluster: Cluster) -> None:
    invalid = {**GRAPH, "vertices": [{"id": "a", "entrypoint": "pipelines.sales:generate", "parallelism": 0}]}
    with pytest.raises(AirflowFailException, match=r"vertices\[0\]\.parallelism.*not retried"):
        operator(job_graph=invalid).execute(context())
    assert cluster.posts == [] or cluster.job_ids() == []  # refused: nothing was created

    cluster.end_new_jobs(missing_entrypoint)
    with pytest.raises(AirflowFailException, match="EntrypointNotFound.*not retried"):
        operator().execute(context())

    cluster.end_new_jobs(unbuildable_environment)
    with pytest.raises(AirflowFailException, match="EnvironmentBuildFailed.*no-such-lib==9.9.*not retried"):
        operator().execute(context(FakeTI(run_id="manual__3")))

    cluster.end_new_jobs(fail_b)  # a failure of the task function itself: retries may help
    with pytest.raises(AirflowException) as failed:
        operator().execute(context(FakeTI(run_id="manual__2")))
    assert type(failed.value) is AirflowException


def test_a_master_refusing_the_connections_host_name_or_body_fails_the_task_without_retries() -> None:
    for refused in (
        HostRefused("GET /overview: the Host 'alias.example:8081' is none of this master's names"),
        UnsupportedMediaType("POST /jobs: the JobGraph must be sent with Content-Type: application/json"),
    ):
        failure = task_failure(refused)
        assert isinstance(failure, AirflowFailException) and "not retried" in str(failure), refused


# -- SparkDispatchJobGroup and its vertex tasks ---------------------------------------------------


def sales_group(**vertex_kwargs: Any) -> tuple[Any, Any]:
    """A DAG with a group of three vertices (a >> b, a >> c); the DAG and the group."""
    from datetime import datetime

    from airflow.sdk import DAG

    from sparkdispatch.operators import SparkDispatchJobGroup, SparkDispatchVertexOperator

    with DAG("sales_dag", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        with SparkDispatchJobGroup(
            group_id="sales",
            job_name="sales-report",
            config={"spark.sql.shuffle.partitions": 4},
            restart_strategy={"type": "fixed-delay", "attempts": 1, "delay_s": 0},
        ) as group:
            a = SparkDispatchVertexOperator(
                task_id="a",
                entrypoint="pipelines.sales:generate",
                vertex_params={"run": "{{ ti.run_id }}"},
                **vertex_kwargs,
            )
            b = SparkDispatchVertexOperator(
                task_id="b", entrypoint="pipelines.sales:clean", parallelism=2, **vertex_kwargs
            )
            c = SparkDispatchVertexOperator(task_id="c", entrypoint="pipelines.sales:report", **vertex_kwargs)
            a >> [b, c]
    return dag, group


def test_the_group_adds_its_launch_task_upstream_of_every_vertex() -> None:
    dag, group = sales_group()
    assert sorted(dag.task_dict) == ["sales.a", "sales.b", "sales.c", "sales.launch"]
    assert dag.task_dict["sales.launch"].downstream_task_ids == {"sales.a", "sales.b", "sales.c"}
    assert dag.task_dict["sales.b"].upstream_task_ids == {"sales.a", "sales.launch"}


def test_a_group_holds_only_vertex_tasks() -> None:
    from datetime import datetime

    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    from sparkdispatch.operators import SparkDispatchJobGroup, SparkDispatchVertexOperator

    with pytest.raises(ValueError, match="holds only SparkDispatchVertexOperator tasks; move sales.other out"):
        with DAG("bad", schedule=None, start_date=datetime(2026, 1, 1)):
            with SparkDispatchJobGroup(group_id="sales"):
                SparkDispatchVertexOperator(task_id="a", entrypoint="pipelines.sales:generate")
                EmptyOperator(task_id="other")


def test_the_launch_submits_the_groups_graph_once_and_each_vertex_task_follows_its_vertex(cluster: Cluster) -> None:
    dag, group = sales_group(deferrable=False, poll_interval=0.02)
    launch = dag.task_dict["sales.launch"]
    launch_ti = FakeTI()
    launch_ti.task_id = "sales.launch"
    job_id = launch.execute(context(launch_ti))
    assert launch.execute(context(launch_ti)) == job_id and cluster.posts == [job_id]  # a retry re-attaches
    details: JobDetails = cluster.master.run(cluster._ask(lambda client: client.job(job_id)))
    assert details.name == "sales-report"
    assert {v.id: (v.parallelism, list(v.inputs)) for v in details.vertices} == {
        "a": (1, []),
        "b": (2, ["a"]),
        "c": (1, ["a"]),
    }
    # vertex a's task carries its params, rendered by the launch task
    deployments = eventually_blocking(lambda: cluster.master.gateway.of_job(job_id), "vertex a's task")
    assert [(d.tdd.vertex_id, dict(d.tdd.params)) for d in deployments] == [("a", {"run": "manual__1"})]

    def vertex_ti(vertex: str) -> FakeTI:
        ti = FakeTI()
        ti.task_id = f"sales.{vertex}"
        ti.others[("sales.launch", "return_value")] = job_id
        return ti

    cluster.end(job_id)  # every vertex FINISHED with 10 rows per subtask
    output = dag.task_dict["sales.b"].execute(context(vertex_ti("b")))
    assert {k: output[k] for k in ("job_id", "vertex", "state", "rows", "attempts")} == {
        "job_id": job_id,
        "vertex": "b",
        "state": "FINISHED",
        "rows": 20,
        "attempts": 1,
    }


def test_the_group_and_its_vertices_pass_their_environments_rendered(cluster: Cluster) -> None:
    from datetime import datetime

    from airflow.sdk import DAG

    from sparkdispatch.operators import SparkDispatchJobGroup, SparkDispatchVertexOperator

    with DAG("env_dag", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        with SparkDispatchJobGroup(group_id="geo", environment=["tabulate>={{ '0.' ~ '9' }}"]):
            a = SparkDispatchVertexOperator(
                task_id="a", entrypoint="pipelines.geo:load", environment={"dependencies": ["six=={{ '1.17.0' }}"]}
            )
            b = SparkDispatchVertexOperator(task_id="b", entrypoint="pipelines.geo:plot")
            a >> b
    launch_ti = FakeTI()
    launch_ti.task_id = "geo.launch"
    launch = task_of(dag, "geo.launch", BaseOperator)
    ctx = context(launch_ti)
    launch.render_template_fields(ctx)  # as Airflow's task runner does before `execute`
    job_id = launch.execute(ctx)
    details: JobDetails = cluster.master.run(cluster._ask(lambda client: client.job(job_id)))
    assert details.name == "geo"
    deployments = eventually_blocking(lambda: cluster.master.gateway.of_job(job_id), "vertex a's task")
    environment = deployments[0].tdd.environment
    assert environment is not None and environment.dependencies == ("six==1.17.0",)
    cluster.end(job_id)
    plot = eventually_blocking(
        lambda: [d for d in cluster.master.gateway.of_job(job_id) if d.tdd.vertex_id == "b"], "vertex b's task"
    )
    assert plot[0].tdd.environment is not None and plot[0].tdd.environment.dependencies == ("tabulate>=0.9",)


def test_a_vertex_task_fails_with_its_vertexs_failure_and_its_retry_repairs_that_vertex_alone(cluster: Cluster) -> None:
    dag, group = sales_group(deferrable=False, poll_interval=0.02)
    launch_ti = FakeTI()
    launch_ti.task_id = "sales.launch"
    job_id = task_of(dag, "sales.launch", BaseOperator).execute(context(launch_ti))

    def fail_b_only(tdd: TaskDeploymentDescriptor) -> TaskOutcome:
        return fail_b(tdd) if tdd.vertex_id == "b" else TaskOutcome(rows=10)

    cluster.end(job_id, fail_b_only)
    cluster.wait_for_status(job_id, "FAILED")
    ti = FakeTI()
    ti.task_id = "sales.b"
    ti.others[("sales.launch", "return_value")] = job_id
    with pytest.raises(
        AirflowException,
        match=f"vertex b of sparkdispatch job {job_id} ended FAILED: ValueError: bad row 7; a retry or a clear",
    ) as failed:
        dag.task_dict["sales.b"].execute(context(ti))
    assert not isinstance(failed.value, AirflowFailException)  # retried: the retry repairs
    before = [d.tdd.vertex_id for d in cluster.master.gateway.of_job(job_id)]
    assert before.count("a") == 1
    cluster.end(job_id, finish)  # b passes from now on
    ti.try_number = 2
    output = dag.task_dict["sales.b"].execute(context(ti))
    assert (output["state"], output["rows"]) == ("FINISHED", 20)
    again = [d.tdd.vertex_id for d in cluster.master.gateway.of_job(job_id)][len(before) :]
    assert "b" in again and "a" not in again  # a's result is reused
    details = cluster.master.run(cluster._ask(lambda client: client.job(job_id)))
    assert details.status == "FINISHED" and [list(r.requested) for r in details.repairs] == [["b"]]
    assert dag.task_dict["sales.b"].execute(context(ti)) == output  # finished: a clear does not run it again


def test_the_vertex_endpoint_answers_a_running_and_an_unknown_vertex(cluster: Cluster) -> None:
    job_id = operator(wait_for_completion=False).execute(context())
    body: VertexOutcome = cluster.master.run(cluster._ask(lambda client: client.vertex(job_id, "a")))
    assert (body.job_id, body.vertex, body.job_status) == (job_id, "a", "RUNNING")
    assert body.result.attempts == 1 and body.result.state in (
        "DEPLOYING",
        "INITIALIZING",
        "RUNNING",
        "SCHEDULED",
        "CREATED",
    )
    with pytest.raises(RouteNotFound, match=f"job {job_id} has no vertex 'nope'"):
        cluster.master.run(cluster._ask(lambda client: client.vertex(job_id, "nope")))


# -- @task.sparkdispatch --------------------------------------------------------------------------


def test_the_decorator_makes_a_vertex_that_ships_the_functions_source(cluster: Cluster) -> None:
    from datetime import datetime

    from airflow.sdk import DAG, task

    from sparkdispatch.operators import SparkDispatchJobGroup, SparkDispatchVertexOperator

    with DAG("sales_dag", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        with SparkDispatchJobGroup(group_id="sales"):
            generate = SparkDispatchVertexOperator(
                task_id="generate", entrypoint="pipelines.sales:generate", deferrable=False
            )

            @task.sparkdispatch(parallelism=2, vertex_params={"day": "{{ ti.run_id }}"}, deferrable=False)
            def clean(ctx: Any) -> Any:
                return ctx.inputs["generate"].dropna()

            generate >> clean()  # type: ignore[call-arg,misc]  # Airflow types a @task function's call as its own
    op = task_of(dag, "sales.clean", SparkDispatchFunctionOperator)
    assert op.entrypoint == f"{op.module_name}:clean" and op.module_name.startswith("sparkdispatch_fn_")
    assert op.source.startswith(
        "from __future__ import annotations\n\n\n"
        'def clean(ctx: Any) -> Any:\n    return ctx.inputs["generate"].dropna()\n'
    )
    assert "\ndef clean(ctx):\n" in op.source  # the entrypoint, calling it with its task's arguments
    assert op.upstream_task_ids == {"sales.generate", "sales.launch"}

    launch_ti = FakeTI()
    launch_ti.task_id = "sales.launch"
    job_id = task_of(dag, "sales.launch", BaseOperator).execute(context(launch_ti))
    blobs = {p.name for p in cluster.master.master.ha.blob_store.directory.iterdir()}
    [module_key] = [key for key in blobs]  # the function's module, the job's only artifact
    cluster.end(job_id)
    eventually_blocking(
        lambda: any(d.tdd.vertex_id == "clean" for d in cluster.master.gateway.of_job(job_id)),
        "the clean vertex's tasks",
    )
    cleans = [d.tdd for d in cluster.master.gateway.of_job(job_id) if d.tdd.vertex_id == "clean"]
    assert {(t.entrypoint, t.artifacts, dict(t.params)["day"]) for t in cleans} == {
        (op.entrypoint, (module_key,), "manual__1")
    }


def test_a_decorated_task_alone_runs_as_a_one_vertex_job_with_its_environment() -> None:
    from datetime import datetime

    from airflow.sdk import DAG, task

    with DAG("env_fn_dag", schedule=None, start_date=datetime(2026, 1, 1)) as dag:

        @task.sparkdispatch(environment=["tabulate=={{ '0.9.0' }}"])
        def alone(ctx: Any) -> Any:
            return ctx.spark.range(1)

        alone()  # type: ignore[call-arg,misc]  # as above
    op = task_of(dag, "alone", SparkDispatchFunctionOperator)
    assert "environment" in op.template_fields
    ti = FakeTI()
    ti.task_id = "alone"
    ctx = context(ti)
    op.render_template_fields(ctx)
    graph = op._one_vertex_job(ctx).job_graph
    assert isinstance(graph, dict) and graph["vertices"][0]["environment"] == ["tabulate==0.9.0"]


def test_a_decorated_task_names_its_connection_outside_a_group_and_may_not_differ_from_its_group() -> None:
    from datetime import datetime

    from airflow.sdk import DAG, task

    from sparkdispatch.operators import SparkDispatchJobGroup, SparkDispatchVertexOperator

    with DAG("conn_dag", schedule=None, start_date=datetime(2026, 1, 1)) as dag:

        @task.sparkdispatch(sparkdispatch_conn_id="sparkdispatch_prod")
        def alone(ctx: Any) -> Any:
            return ctx.spark.range(1)

        alone()  # type: ignore[call-arg,misc]  # as above
        with SparkDispatchJobGroup(group_id="same", sparkdispatch_conn_id="sparkdispatch_prod"):

            @task.sparkdispatch(sparkdispatch_conn_id="sparkdispatch_prod")
            def inside(ctx: Any) -> Any:
                return ctx.spark.range(1)

            inside()  # type: ignore[call-arg,misc]
    assert task_of(dag, "alone", SparkDispatchVertexOperator).sparkdispatch_conn_id == "sparkdispatch_prod"
    assert task_of(dag, "alone", SparkDispatchVertexOperator).hook.sparkdispatch_conn_id == "sparkdispatch_prod"
    assert task_of(dag, "same.inside", SparkDispatchVertexOperator).sparkdispatch_conn_id == "sparkdispatch_prod"
    with pytest.raises(
        ValueError,
        match="task 'other.inside' names connection 'sparkdispatch_prod', but the "
        "vertices of SparkDispatchJobGroup 'other' use the group's, "
        "'sparkdispatch_default'",
    ):
        with DAG("conn_dag_2", schedule=None, start_date=datetime(2026, 1, 1)):
            with SparkDispatchJobGroup(group_id="other"):

                @task.sparkdispatch(sparkdispatch_conn_id="sparkdispatch_prod")
                def inside(ctx: Any) -> Any:  # a second DAG's task of the same name
                    return ctx.spark.range(1)

                inside()  # type: ignore[call-arg,misc]


@pytest.mark.parametrize("cancel_on_kill", [False, True])
def test_a_vertex_task_whose_deferral_times_out_fails_alone_unless_it_cancels_on_kill(
    cluster: Cluster, cancel_on_kill: bool
) -> None:
    from airflow.sdk.bases.operator import TriggerFailureReason
    from airflow.sdk.exceptions import TaskDeferralTimeout

    dag, group = sales_group(deferrable=True, poll_interval=0.02, cancel_on_kill=cancel_on_kill)
    launch_ti = FakeTI()
    launch_ti.task_id = "sales.launch"
    job_id = task_of(dag, "sales.launch", BaseOperator).execute(context(launch_ti))
    ti = FakeTI()
    ti.task_id = "sales.b"
    ti.others[("sales.launch", "return_value")] = job_id
    with pytest.raises(TaskDeferred):
        dag.task_dict["sales.b"].execute(context(ti))
    with pytest.raises(TaskDeferralTimeout):
        dag.task_dict["sales.b"].resume_execution(
            "__fail__", {"error": TriggerFailureReason.TRIGGER_TIMEOUT}, context(ti)
        )
    if cancel_on_kill:
        cluster.wait_for_status(job_id, "CANCELED")
    else:
        assert cluster.status(job_id) == "RUNNING"  # the other vertex tasks still wait for it


# -- names, params, deferral defaults ---------------------------------------------------------------


def test_the_earlier_names_warn_and_work_as_the_new_ones() -> None:
    from airflow.exceptions import AirflowProviderDeprecationWarning

    from sparkdispatch.operators import (
        JobResultSensor,
        JobResultTrigger,
        SparkDispatchJobSensor,
        SparkDispatchVertexTrigger,
        SubmitJobGraphOperator,
        VertexTrigger,
    )

    with pytest.warns(AirflowProviderDeprecationWarning, match="use SparkDispatchSubmitJobOperator"):
        submit = SubmitJobGraphOperator(task_id="old", job_graph=GRAPH, conn_id="sd_old")
    assert isinstance(submit, SparkDispatchSubmitJobOperator) and submit.sparkdispatch_conn_id == "sd_old"
    with pytest.warns(AirflowProviderDeprecationWarning, match="use SparkDispatchJobSensor"):
        sensor = JobResultSensor(task_id="old_sensor", job_id="j")
    assert isinstance(sensor, SparkDispatchJobSensor)
    with pytest.warns(AirflowProviderDeprecationWarning, match=r"conn_id=\.\.\.\) is deprecated"):
        trigger = JobResultTrigger(job_id="j", conn_id="sd_old")
    assert trigger.serialize()[1]["sparkdispatch_conn_id"] == "sd_old"
    with pytest.warns(AirflowProviderDeprecationWarning, match="use SparkDispatchVertexTrigger"):
        vertex = VertexTrigger(job_id="j", vertex_id="v")
    assert isinstance(vertex, SparkDispatchVertexTrigger)
    with pytest.warns(AirflowProviderDeprecationWarning, match=r"use sparkdispatch_conn_id=\.\.\."):
        SparkDispatchSubmitJobOperator(task_id="new_old_arg", job_graph=GRAPH, conn_id="sd_old")


def test_vertex_params_are_the_vertexs_and_airflows_params_stay_airflows() -> None:
    """`vertex_params` render in the vertex task's own context; `default_args={"params": ...}` and the
    DAG's params are Airflow's, not the vertex's; `params=` (the earlier name) warns and still works."""
    from datetime import datetime

    from airflow.exceptions import AirflowProviderDeprecationWarning
    from airflow.sdk import DAG

    from sparkdispatch.operators import SparkDispatchJobGroup, SparkDispatchVertexOperator

    with DAG(
        "params_dag",
        schedule=None,
        start_date=datetime(2026, 1, 1),
        params={"rows": 5},
        default_args={"params": {"airflow_only": 1}},
    ) as dag:
        with SparkDispatchJobGroup(group_id="g"):
            mine = SparkDispatchVertexOperator(
                task_id="mine",
                entrypoint="m:f",
                vertex_params={"me": "{{ task.task_id }}", "rows": "{{ params.rows }}"},
            )
            with pytest.warns(AirflowProviderDeprecationWarning, match=r"use vertex_params=\.\.\."):
                old = SparkDispatchVertexOperator(task_id="old", entrypoint="m:f", params={"kept": "yes"})
    assert old.vertex_params == {"kept": "yes"}
    launch = task_of(dag, "g.launch", SparkDispatchSubmitJobOperator)
    ti = FakeTI()
    ti.task_id = "g.launch"
    graph = launch.load_graph(context(ti, durable=False, task=launch, params={"rows": 5}))
    specs = {v["id"]: v["params"] for v in graph["vertices"]}
    assert specs["mine"] == {"me": "g.mine", "rows": "5"}  # rendered as the vertex task's, not g.launch's
    assert set(mine.vertex_params) == {"me", "rows"}  # nothing of default_args' or the DAG's params


def test_a_groups_taskexecutor_pool_is_its_graphs_pool_and_not_airflows() -> None:
    from datetime import datetime

    from airflow.sdk import DAG

    from sparkdispatch.operators import SparkDispatchJobGroup, SparkDispatchVertexOperator

    with DAG("pool_dag", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        with SparkDispatchJobGroup(group_id="g", taskexecutor_pool="team-a"):
            SparkDispatchVertexOperator(task_id="v", entrypoint="m:f")
        with SparkDispatchJobGroup(group_id="h"):
            SparkDispatchVertexOperator(task_id="v", entrypoint="m:f")
    for group, pool in (("g", "team-a"), ("h", None)):
        launch = task_of(dag, f"{group}.launch", SparkDispatchSubmitJobOperator)
        ti = FakeTI()
        ti.task_id = f"{group}.launch"
        graph = launch.load_graph(context(ti, durable=False, task=launch))
        assert graph.get("pool") == pool
        assert launch.pool == "default_pool"  # Airflow's own pool is untouched


def test_a_groups_results_and_its_vertices_result_kinds_reach_its_graph() -> None:
    from datetime import datetime

    from airflow.sdk import DAG, task

    from sparkdispatch.operators import SparkDispatchJobGroup, SparkDispatchVertexOperator

    with DAG("results_dag", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        with SparkDispatchJobGroup(group_id="g"):

            @task.sparkdispatch(result="durable")
            def kept(ctx: Any) -> Any:
                return ctx.spark.range(3)

            mid = SparkDispatchVertexOperator(task_id="mid", entrypoint="m:f")
            kept() >> mid >> SparkDispatchVertexOperator(task_id="last", entrypoint="m:g")  # type: ignore[call-arg,misc]
        with SparkDispatchJobGroup(group_id="h", results="durable"):
            SparkDispatchVertexOperator(task_id="v", entrypoint="m:f")

    def graph_of(group: str) -> dict[str, Any]:
        launch = task_of(dag, f"{group}.launch", SparkDispatchSubmitJobOperator)
        ti = FakeTI()
        ti.task_id = f"{group}.launch"
        return launch.load_graph(context(ti, durable=False, task=launch))

    g = graph_of("g")
    assert {v["id"]: v.get("result") for v in g["vertices"]} == {"kept": "durable", "mid": None, "last": None}
    assert "results" not in g
    assert graph_of("h")["results"] == "durable"
    with DAG("bad_results_dag", schedule=None, start_date=datetime(2026, 1, 1)):
        with pytest.raises(
            ValueError, match="result is 'fast'; it must be one of 'auto', 'chained', 'kept', 'durable'"
        ):
            SparkDispatchVertexOperator(task_id="bad", entrypoint="m:f", result="fast")
        with pytest.raises(ValueError, match="results is 'chained'; it must be one of 'auto', 'durable'"):
            SparkDispatchJobGroup(group_id="bad", results="chained")


def test_a_mapped_decorated_task_unmapped_by_airflow_does_not_warn_of_params() -> None:
    """Airflow's unmapping passes its merged `params` to every mapped task: that is no `params=` of
    the user's, so it neither warns nor becomes vertex params."""
    import warnings
    from datetime import datetime

    from airflow.sdk import DAG, task
    from airflow.sdk.definitions.mappedoperator import MappedOperator

    with DAG("mapped_params_dag", schedule=None, start_date=datetime(2026, 1, 1), params={"rows": 5}) as dag:

        @task.sparkdispatch(parallelism=2)
        def sized(ctx: Any, rows: int) -> Any:
            return ctx.spark.range(rows)

        sized.expand(rows=[2, 3])
    mapped = task_of(dag, "sized", MappedOperator)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        unmapped = mapped.unmap({"op_kwargs": {"rows": 2}})
    assert isinstance(unmapped, SparkDispatchFunctionOperator) and unmapped.vertex_params == {}


def test_vertex_tasks_defer_by_default_and_the_setting_still_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkdispatch.operators import SparkDispatchVertexOperator

    monkeypatch.delenv("AIRFLOW__SPARKDISPATCH__DEFAULT_DEFERRABLE", raising=False)
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "False")  # stock Airflow's
    assert SparkDispatchVertexOperator(task_id="v", entrypoint="m:f").deferrable is True
    assert SparkDispatchVertexOperator(task_id="w", entrypoint="m:f", deferrable=False).deferrable is False
    assert operator(deferrable=None).deferrable is False  # a submit operator still follows Airflow's default
    monkeypatch.setenv("AIRFLOW__SPARKDISPATCH__DEFAULT_DEFERRABLE", "False")
    assert SparkDispatchVertexOperator(task_id="x", entrypoint="m:f").deferrable is False


# -- TaskFlow ----------------------------------------------------------------------------------------


def test_decorated_vertices_take_xcom_arguments_as_inputs_and_values_resolved_at_launch() -> None:
    from datetime import datetime

    from airflow.sdk import DAG, task

    from sparkdispatch.operators import SparkDispatchJobGroup
    from sparkdispatch.operators.decorators import CALL_PARAM

    with DAG("flow_dag", schedule=None, start_date=datetime(2026, 1, 1)) as dag:

        @task
        def threshold() -> int:
            return 3

        minimum = threshold()
        with SparkDispatchJobGroup(group_id="g"):

            @task.sparkdispatch(parallelism=2)
            def numbers(ctx: Any) -> Any:
                return ctx.spark.range(10)

            @task.sparkdispatch(multiple_outputs=True)
            def total(ctx: Any, numbers: Any, minimum: int, column: str = "id") -> Any:
                return numbers.where(f"{column} >= {minimum}")

            result = total(numbers(), minimum, column="{{ task.task_id }}")  # type: ignore[call-arg,misc]
            total.override(task_id="total_again")(numbers(), 1)  # type: ignore[call-arg,misc]
    assert isinstance(result, PlainXComArg) and isinstance(result.operator, SparkDispatchFunctionOperator)
    assert result.operator.multiple_outputs is True
    launch = task_of(dag, "g.launch", SparkDispatchSubmitJobOperator)
    assert "threshold" in launch.upstream_task_ids  # a value from outside the group is made before the job
    assert dag.task_dict["g.total"].upstream_task_ids == {"g.numbers", "g.launch", "threshold"}
    assert "g.total_again" in dag.task_dict
    ti = FakeTI()
    ti.task_id = "g.launch"
    ti.others[("threshold", "return_value")] = 3
    graph = launch.load_graph(context(ti, durable=False, task=launch))
    total_spec = next(v for v in graph["vertices"] if v["id"] == "total")
    assert total_spec["inputs"] == ["numbers"]
    assert total_spec["params"][CALL_PARAM] == {
        "args": [{"input": "numbers"}, {"value": 3}],
        "kwargs": {"column": {"value": "g.total"}},
    }


def test_the_decorated_functions_entrypoint_calls_it_with_its_arguments(tmp_path: Path) -> None:
    """The module shipped to the TaskExecutors, imported and called as a slot process calls it."""
    import importlib.util
    from types import SimpleNamespace

    from sparkdispatch.operators.decorators import CALL_PARAM, function_source

    def total(ctx: Any, numbers: Any, minimum: int, column: str = "id") -> Any:
        return (ctx.params["tag"], numbers, minimum, column)

    path = tmp_path / "shipped.py"
    path.write_text(function_source(total))
    spec = importlib.util.spec_from_file_location("shipped", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ctx = SimpleNamespace(
        inputs={"numbers": "the numbers DataFrame"},
        params={
            "tag": "t",
            CALL_PARAM: {"args": [{"input": "numbers"}, {"value": 3}], "kwargs": {"column": {"value": "x"}}},
        },
    )
    assert module.total(ctx) == ("t", "the numbers DataFrame", 3, "x")


def test_a_decorated_task_maps_outside_a_group_and_is_refused_mapped_in_one() -> None:
    from datetime import datetime

    from airflow.sdk import DAG, task

    from sparkdispatch.operators import SparkDispatchJobGroup

    with DAG("mapped_dag", schedule=None, start_date=datetime(2026, 1, 1)) as dag:

        @task.sparkdispatch
        def sized(ctx: Any, rows: int) -> Any:
            return ctx.spark.range(rows)

        sized.expand(rows=[1, 2, 3])
    assert dag.task_dict["sized"].operator_class.__name__ == "SparkDispatchFunctionOperator"
    with pytest.raises(ValueError, match="g.sized is mapped .* map it outside a group"):
        with DAG("mapped_group_dag", schedule=None, start_date=datetime(2026, 1, 1)):
            with SparkDispatchJobGroup(group_id="g"):

                @task.sparkdispatch
                def sized(ctx: Any, rows: int) -> Any:
                    return ctx.spark.range(rows)

                sized.expand(rows=[1, 2])


# -- OpenLineage of a vertex task -------------------------------------------------------------------

#: OpenLineage's JSON schemas, copied from its spec (see the folder's README).
OPENLINEAGE_SPEC = Path(__file__).with_name("openlineage_spec")


def openlineage_errors(event: dict[str, Any]) -> list[str]:
    """What OpenLineage's JSON schemas find wrong with `event` (a serialized RunEvent): the event
    against the schema its `schemaURL` names, each run facet against its `_schemaURL`'s; a URL
    naming a schema not in OPENLINEAGE_SPEC fails (jsonschema's Unresolvable)."""
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource

    schemas = [json.loads(path.read_text()) for path in OPENLINEAGE_SPEC.glob("*.json")]
    registry: Registry[Any] = Registry().with_resources(
        (schema["$id"], Resource.from_contents(schema)) for schema in schemas
    )
    facets = event["run"]["facets"].values()
    checked = [(event["schemaURL"], event), *((facet["_schemaURL"], facet) for facet in facets)]
    return [
        f"{url}: {error.message}"
        for url, document in checked
        for error in Draft202012Validator(
            {"$ref": url}, registry=registry, format_checker=Draft202012Validator.FORMAT_CHECKER
        ).iter_errors(document)
    ]


def read_files(tdd: TaskDeploymentDescriptor) -> TaskOutcome:
    """Vertex b's subtasks say they read an orders table (both) and a customers table (subtask 1)."""
    read = {0: ("file:///data/orders",), 1: ("file:///data/orders", "s3a://lake/customers")}
    return TaskOutcome(
        rows=1, result_path=tdd.result_path, input_files=read[tdd.subtask_index] if tdd.vertex_id == "b" else ()
    )


def test_a_vertex_tasks_lineage_names_what_it_read_as_inputs_and_its_result_as_output(cluster: Cluster) -> None:
    """Inputs: the vertices it read and the tables its subtasks' DataFrames read (reported with
    FINISHED, once each). The datasets and facets make a RunEvent of openlineage-python's model
    (generated from the OpenLineage JSON schema), which serializes with every facet's schema URL."""
    import uuid
    from datetime import UTC, datetime

    from openlineage.client.event_v2 import Dataset, Job, Run, RunEvent, RunState
    from openlineage.client.facet_v2 import parent_run
    from openlineage.client.serde import Serde

    dag, group = sales_group(deferrable=False, poll_interval=0.02)
    launch_ti = FakeTI()
    launch_ti.task_id = "sales.launch"
    job_id = dag.task_dict["sales.launch"].execute(context(launch_ti))
    cluster.end(job_id, read_files)
    ti = FakeTI()
    ti.task_id = "sales.b"
    ti.others[("sales.launch", "return_value")] = job_id
    b = dag.task_dict["sales.b"]
    b.execute(context(ti))
    lineage = b.get_openlineage_facets_on_complete(None)
    paths = {vertex: result.result_path for vertex, result in cluster.result(job_id).vertices.items()}
    assert paths["a"] is not None and paths["b"] is not None
    assert lineage.inputs == [
        Dataset(namespace="file", name=paths["a"]),
        Dataset(namespace="file", name="/data/orders"),
        Dataset(namespace="s3://lake", name="customers"),
    ]
    assert lineage.outputs == [Dataset(namespace="file", name=paths["b"])]
    assert cluster.result(job_id).vertices["b"].input_files == ("file:///data/orders", "s3a://lake/customers")
    parent = parent_run.ParentRunFacet(
        run=parent_run.Run(runId=str(uuid.uuid4())), job=parent_run.Job(namespace="airflow", name="sales_dag.sales.b")
    )
    event = RunEvent(
        eventType=RunState.COMPLETE,
        eventTime=datetime.now(UTC).isoformat(),
        run=Run(runId=str(uuid.uuid4()), facets={**lineage.run_facets, "parent": parent}),
        job=Job(namespace="airflow", name="sales_dag.sales.b"),
        producer="https://example.org/sparkdispatch",
        inputs=lineage.inputs,
        outputs=lineage.outputs,
    )
    body = json.loads(Serde.to_json(event))
    assert body["eventType"] == "COMPLETE" and set(body["run"]["facets"]) == {"externalQuery", "parent"}
    assert openlineage_errors(body) == []
    assert [d["name"] for d in body["inputs"]] == [paths["a"], "/data/orders", "customers"]
