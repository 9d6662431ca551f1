"""SubmitJobGraphOperator and JobResultSensor against a fake Dispatcher on a loopback server."""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred

from sparkdispatch.operators import JobResultSensor, JobResultTrigger, SubmitJobGraphOperator
from sparkdispatch.operators.jobs import attempt_job_id, result_summary, task_job_id
from sparkdispatch.testing.services import free_port

GRAPH = {"name": "sales", "vertices": [{"id": "a", "entrypoint": "pipelines.sales:generate"},
                                       {"id": "b", "entrypoint": "pipelines.sales:clean", "inputs": ["a"]}]}
TRACEBACK = 'Traceback (most recent call last):\n  File "sales.py", line 3\nValueError: bad row 7\n'


class Dispatcher:
    """Just enough of the master's REST API, with jobs in a dict; runs on its own thread."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.jobs: dict[str, dict[str, Any]] = {}
        self.posts: list[str] = []
        self.blobs: dict[str, bytes] = {}
        self.outcome = "FINISHED"  # what a job ends as when `finish` is called
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    def finish(self, job_id: str, status: str | None = None) -> None:
        job = self.jobs[job_id]
        job["status"] = status or self.outcome
        failure = None
        if job["status"] == "FAILED":
            failure = {"class": "ValueError", "message": "bad row 7", "traceback": TRACEBACK}
        job["result"] = {"job_id": job_id, "name": job["graph"]["name"], "status": job["status"],
                         "start_time": 0, "end_time": 1500, "duration_ms": 1500, "failure": failure,
                         "vertices": {"a": {"state": "FINISHED", "attempts": 1, "rows": 10},
                                      "b": {"state": job["status"], "attempts": 2, "failure": failure}}}

    async def _app(self) -> web.Application:
        async def submit(request: web.Request) -> web.Response:
            graph = await request.json()
            job_id = graph["job_id"]
            self.posts.append(job_id)
            if job_id in self.jobs:
                if self.jobs[job_id]["graph"] != graph:
                    return web.json_response({"errors": [f"job {job_id} cannot be submitted: other graph"]},
                                             status=409)
                return web.json_response({"job_id": job_id}, status=200)
            self.jobs[job_id] = {"graph": graph, "status": "RUNNING", "result": None}
            return web.json_response({"job_id": job_id}, status=202)

        def job_or_404(request: web.Request) -> dict[str, Any] | None:
            return self.jobs.get(request.match_info["job_id"])

        async def details(request: web.Request) -> web.Response:
            job = job_or_404(request)
            if job is None:
                return web.json_response({"errors": ["no job with id " + request.match_info["job_id"]]}, status=404)
            return web.json_response({"id": request.match_info["job_id"], "status": job["status"]})

        async def result(request: web.Request) -> web.Response:
            job = job_or_404(request)
            if job is None:
                return web.json_response({"errors": ["no job"]}, status=404)
            if job["result"] is None:
                return web.json_response({"status": {"id": "IN_PROGRESS"}})
            return web.json_response({"status": {"id": "COMPLETED"}, "job_execution_result": job["result"]})

        async def cancel(request: web.Request) -> web.Response:
            job_id = request.match_info["job_id"]
            if self.jobs[job_id]["result"] is not None:
                return web.json_response({"errors": [f"job {job_id} already reached FINISHED"]}, status=409)
            self.finish(job_id, "CANCELED")
            return web.json_response({}, status=202)

        async def artifact(request: web.Request) -> web.Response:
            form = await request.post()
            data = form["file"].file.read()
            key = hashlib.sha256(data).hexdigest()
            self.blobs[key] = data
            return web.json_response({"key": key, "filename": form["file"].filename}, status=201)

        async def overview(request: web.Request) -> web.Response:
            return web.json_response({"is_leader": True, "leader": self.url})

        app = web.Application()
        app.router.add_post("/jobs", submit)
        app.router.add_get("/jobs/{job_id}", details)
        app.router.add_patch("/jobs/{job_id}", cancel)
        app.router.add_get("/jobs/{job_id}/execution-result", result)
        app.router.add_post("/artifacts", artifact)
        app.router.add_get("/overview", overview)
        return app

    def start(self) -> None:
        self._thread.start()

        async def up() -> None:
            self._runner = web.AppRunner(await self._app())
            await self._runner.setup()
            await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

        asyncio.run_coroutine_threadsafe(up(), self._loop).result(10)

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


class FakeTI:
    def __init__(self, run_id: str = "manual__1", map_index: int = -1) -> None:
        self.dag_id, self.run_id, self.task_id, self.map_index = "sales_dag", run_id, "submit", map_index
        self.xcom: dict[str, Any] = {}
        self.stats_tags: dict[str, str] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


class FakeStore(dict):
    def set(self, key: str, value: Any) -> None:
        self[key] = value


@pytest.fixture
def dispatcher(monkeypatch: pytest.MonkeyPatch) -> Iterator[Dispatcher]:
    server = Dispatcher()
    server.start()
    monkeypatch.setenv("AIRFLOW_CONN_SPARKDISPATCH_DEFAULT", json.dumps(
        {"conn_type": "sparkdispatch", "host": "127.0.0.1", "port": server.port}))
    try:
        yield server
    finally:
        server.stop()


def context(ti: FakeTI | None = None, **extra: Any) -> dict[str, Any]:
    return {"ti": ti or FakeTI(), "task_state_store": FakeStore(), **extra}


def operator(**kwargs: Any) -> SubmitJobGraphOperator:
    return SubmitJobGraphOperator(task_id="submit", **{"job_graph": GRAPH, "poll_interval": 0.02,
                                                       "deferrable": False, **kwargs})


def finish_when_submitted(dispatcher: Dispatcher, status: str | None = None) -> threading.Thread:
    """Let the next submitted job end (as its TaskExecutors would) once it exists."""
    known = set(dispatcher.jobs)

    def run() -> None:
        for _ in range(2000):
            fresh = [j for j in dispatcher.jobs if j not in known]
            if fresh:
                dispatcher.finish(fresh[0], status)
                return
            threading.Event().wait(0.005)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_job_ids_are_deterministic_per_task_instance() -> None:
    first = task_job_id("d", "r", "t", -1)
    assert first == task_job_id("d", "r", "t", None) and len(first) == 32 and int(first, 16) >= 0
    others = {task_job_id("d", "r", "t", 0), task_job_id("d", "r2", "t", -1), task_job_id("d", "r", "t2", -1),
              task_job_id("d2", "r", "t", -1), task_job_id("d", "rt", "", -1)}
    assert first not in others and len(others) == 5
    chain = [attempt_job_id(first, n) for n in range(4)]
    assert chain[0] == first and len(set(chain)) == 4 and chain == [attempt_job_id(first, n) for n in range(4)]


def test_blocking_run_submits_once_links_the_job_and_returns_its_id(dispatcher: Dispatcher) -> None:
    ctx = context()
    finish_when_submitted(dispatcher)
    job_id = operator().execute(ctx)
    assert job_id == task_job_id("sales_dag", "manual__1", "submit", -1)
    assert dispatcher.posts == [job_id] and dispatcher.jobs[job_id]["status"] == "FINISHED"
    assert ctx["ti"].xcom["sparkdispatch_job_url"] == f"{dispatcher.url}/ui/jobs/{job_id}"
    assert ctx["task_state_store"]["sparkdispatch_job_id"] == job_id


def test_a_retry_reattaches_to_the_running_job_instead_of_submitting_again(dispatcher: Dispatcher) -> None:
    op = operator(wait_for_completion=False)
    job_id = op.execute(context())
    assert op.execute(context()) == job_id  # the "retry": a fresh context, same task instance
    assert dispatcher.posts == [job_id]
    # a blocking retry attaches too and waits for the same job
    threading.Timer(0.2, dispatcher.finish, args=(job_id,)).start()
    assert operator().execute(context()) == job_id
    assert dispatcher.posts == [job_id] and len(dispatcher.jobs) == 1


def test_a_retry_after_a_finished_job_returns_without_running_it_again(dispatcher: Dispatcher) -> None:
    finish_when_submitted(dispatcher)
    job_id = operator().execute(context())
    assert operator().execute(context()) == job_id
    assert dispatcher.posts == [job_id]


def test_a_failed_job_fails_the_task_with_the_remote_cause_and_a_retry_runs_a_fresh_job(
        dispatcher: Dispatcher, capfd: pytest.CaptureFixture[str]) -> None:
    dispatcher.outcome = "FAILED"
    finish_when_submitted(dispatcher)
    with pytest.raises(AirflowException, match="ended FAILED: ValueError: bad row 7"):
        operator().execute(context())
    first = dispatcher.posts[0]
    log = capfd.readouterr().out
    assert "ValueError: bad row 7" in log and TRACEBACK.splitlines()[1] in log  # the remote traceback
    assert "b: FAILED, 2 attempt(s)" in log  # the per-vertex summary
    dispatcher.outcome = "FINISHED"
    finish_when_submitted(dispatcher)
    second = operator().execute(context())
    assert second == attempt_job_id(first, 1) and dispatcher.posts == [first, second]


def test_on_kill_cancels_the_running_job(dispatcher: Dispatcher) -> None:
    op = operator()
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            op.execute(context())
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    while op.job_id is None or op.job_id not in dispatcher.jobs:
        threading.Event().wait(0.01)
    op.on_kill()
    thread.join(10)
    assert dispatcher.jobs[op.job_id]["status"] == "CANCELED"
    assert len(outcome) == 1 and "ended CANCELED" in str(outcome[0])


def test_deferrable_submits_then_defers_to_the_trigger(dispatcher: Dispatcher) -> None:
    op = operator(deferrable=True)
    ctx = context()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    job_id = dispatcher.posts[0]
    trigger = deferred.value.trigger
    assert isinstance(trigger, JobResultTrigger) and trigger.job_id == job_id and trigger.cancel_on_kill
    assert deferred.value.method_name == "execute_complete"
    assert ctx["task_state_store"]["sparkdispatch_job_id"] == job_id
    dispatcher.finish(job_id)
    event = {"status": "terminal", "job_id": job_id, "result": dispatcher.jobs[job_id]["result"]}
    assert op.execute_complete(ctx, event) == job_id
    with pytest.raises(AirflowException, match="master is gone"):
        op.execute_complete(ctx, {"status": "error", "job_id": job_id, "message": "master is gone"})


def test_artifacts_are_uploaded_and_added_to_the_graph(dispatcher: Dispatcher, tmp_path: Path) -> None:
    package = tmp_path / "pipelines"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "sales.py").write_text("def generate(ctx):\n    return None\n")
    job_id = operator(artifacts=[str(package)], wait_for_completion=False).execute(context())
    (key,) = dispatcher.blobs
    assert dispatcher.jobs[job_id]["graph"]["artifacts"] == [key]


def test_a_graph_file_is_found_beside_the_dag_and_rendered(dispatcher: Dispatcher, tmp_path: Path) -> None:
    (tmp_path / "graphs").mkdir()
    (tmp_path / "graphs" / "g.yaml").write_text(
        "name: rows-{{ params.rows }}\nvertices:\n  - {id: a, entrypoint: 'm:f', params: {rows: '{{ params.rows }}'}}\n")

    class Dag:
        folder = str(tmp_path)
        template_searchpath = None

    op = operator(job_graph="graphs/g.yaml", wait_for_completion=False)
    graph = op.load_graph(context(dag=Dag(), params={"rows": 7}))
    assert graph == {"name": "rows-7", "vertices": [{"id": "a", "entrypoint": "m:f", "params": {"rows": "7"}}]}
    with pytest.raises(Exception, match="no JobGraph file"):
        operator(job_graph="graphs/missing.json").load_graph(context(dag=Dag()))


def test_the_sensor_pokes_until_the_job_ends(dispatcher: Dispatcher) -> None:
    job_id = operator(wait_for_completion=False).execute(context())
    sensor = JobResultSensor(task_id="wait", job_id=job_id, deferrable=False)
    ctx = context()
    assert not sensor.poke(ctx)
    assert ctx["ti"].xcom["sparkdispatch_job_url"].endswith(f"/ui/jobs/{job_id}")
    dispatcher.finish(job_id)
    done = sensor.poke(ctx)
    assert done.is_done and done.xcom_value["status"] == "FINISHED"


def test_the_sensor_fails_with_the_remote_cause(dispatcher: Dispatcher, capfd: pytest.CaptureFixture[str]) -> None:
    job_id = operator(wait_for_completion=False).execute(context())
    dispatcher.finish(job_id, "FAILED")
    sensor = JobResultSensor(task_id="wait", job_id=job_id, deferrable=False, poke_interval=0.01)
    # AirflowFailException is what the base class turns into a skip under soft_fail
    with pytest.raises(AirflowFailException, match="ValueError: bad row 7"):
        sensor.poke(context())
    assert TRACEBACK.splitlines()[1] in capfd.readouterr().out
    with pytest.raises(AirflowException, match="bad row 7"):
        sensor.execute_complete(context(), {"status": "terminal", "job_id": job_id,
                                            "result": dispatcher.jobs[job_id]["result"]})


def test_the_sensor_soft_fail_skips_on_a_failed_job(dispatcher: Dispatcher) -> None:
    from airflow.sdk.exceptions import AirflowSkipException

    job_id = operator(wait_for_completion=False).execute(context())
    dispatcher.finish(job_id, "CANCELED")
    sensor = JobResultSensor(task_id="wait", job_id=job_id, deferrable=False, soft_fail=True, poke_interval=0.01)
    with pytest.raises(AirflowSkipException):
        sensor.execute(context())


def test_the_deferrable_sensor_defers_while_the_job_runs(dispatcher: Dispatcher) -> None:
    job_id = operator(wait_for_completion=False).execute(context())
    sensor = JobResultSensor(task_id="wait", job_id=job_id, deferrable=True, poke_interval=0.5)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(context())
    assert deferred.value.trigger.job_id == job_id and not deferred.value.trigger.cancel_on_kill


def test_the_summary_lists_every_vertex() -> None:
    result = {"job_id": "j", "name": "n", "status": "FINISHED", "duration_ms": 4200,
              "vertices": {"a": {"state": "FINISHED", "attempts": 1, "rows": 10}}}
    assert result_summary(result) == "job j (n) FINISHED in 4.2s\n  a: FINISHED, 1 attempt(s), 10 rows"
