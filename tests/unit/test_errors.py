"""The error contract: every error's REST body names its class and fields, and turns back into it.

The registry round trip is checked for every SparkDispatchError subclass; the master's own
answers (routes, methods, sizes, internal errors) carry `type`; the TaskExecutor's client raises
the master's own classes for real answers of an in-process master.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from sparkdispatch import errors
from sparkdispatch.config import Configuration
from sparkdispatch.errors import (
    ERROR_TYPES,
    FencingTokenMismatch,
    InvalidRequest,
    SparkDispatchError,
    StaleExecution,
    UnknownJob,
    UnknownTaskExecutor,
    error_from_body,
)
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.model.protocol import ExecutionStateUpdate, SlotReport, TaskExecutorRegistration
from sparkdispatch.rest.responses import create_error_middleware
from sparkdispatch.rest.settings import RestSettings
from sparkdispatch.taskexecutor.master_client import SESSION_HEADER, MasterClient
from sparkdispatch.testing.master import Deployment, InProcessMaster
from sparkdispatch.testing.waiting import eventually

JOB = "0123456789abcdef0123456789abcdef"
SESSION = "6f1c8e5a-3b2d-4c7e-9a10-2b3c4d5e6f70"

# One instance of each class, with every field set.
EXAMPLES: list[SparkDispatchError] = [
    SparkDispatchError("something failed", details=["first detail", "second detail"]),
    errors.ConfigurationError("configuration key 'x' is unknown", details=["did you mean 'y'?"]),
    errors.TlsError("rest.ssl.key: '/etc/sparkdispatch/master.key' is not a file"),
    errors.InvalidJobGraph({"vertices[0].parallelism": ["must be at least 1"], "name": ["missing"]}),
    errors.JobTooLarge(subtasks=100_000_000, limit=100_000, option="jobgraph.max-subtasks"),
    errors.InvalidRequest("TaskExecutor registration", {"slots": ["must be at least 1"], "queue": ["missing"]}),
    errors.InvalidShape("JobDetails", {"vertices[0].state": ["must be one of: CREATED, RUNNING"]}),
    errors.IllegalStateTransition("a job cannot go from FINISHED to RUNNING"),
    errors.UnknownJob(JOB),
    errors.DuplicateJobSubmission(JOB, "a job with this id runs with another graph"),
    errors.JobAlreadyTerminated(JOB, "FINISHED"),
    errors.RepairNotPossible(JOB, "results.retention is `delete`", running=False),
    errors.FencingTokenMismatch("ResourceManager", SESSION, "stale-session"),
    errors.StaleExecution(JOB, "exec-7", "that attempt is FAILED"),
    errors.NoLeader("no master leads at the moment"),
    errors.SlotRequestTimeout("no slot for job within 300 s"),
    errors.UnknownTaskExecutor("TaskExecutor te-1 is not registered with this ResourceManager; register again"),
    errors.SlotProcessLost("the slot process (pid 4242) died during the task: killed by signal 11 (SIGSEGV)"),
    errors.StoreError("the stored JobGraph cannot be read"),
    errors.StoreUnavailable("the JobGraph store could not reach ZooKeeper (ConnectionLoss); retry"),
    errors.JobResultEntryExists(f"job {JOB} has a JobResult stored already"),
    errors.NoSuchJobResult(f"no JobResult of job {JOB} is stored"),
    errors.BlobError("artifact 'x.txt' must be a .py or .zip file"),
    errors.BlobNotFound("no blob abc"),
    errors.BlobTooLarge("x.zip is 200 bytes; blob.max-size allows 100"),
    errors.CorruptedBlob("blob abc is corrupted"),
    errors.RequestTooLarge("the JobGraph is 2000 bytes; rest.max-body-size allows 1000"),
    errors.RequestTimeout("the JobGraph sent nothing for 30 s (rest.body-timeout)"),
    errors.UnsupportedMediaType("POST /jobs: the JobGraph must be sent as application/json, not text/plain"),
    errors.Unauthorized("missing or wrong bearer token"),
    errors.Forbidden("POST /jobs needs the role submitter; grafana is a viewer (rest.auth.tokens-file)"),
    errors.CsrfRefused("POST /jobs with the web UI's session needs its X-CSRF-Token header"),
    errors.HostRefused("Host 'evil.example:8081' is none of this master's names (rest.allowed-hosts)"),
    errors.OriginRefused("POST /jobs from a page of 'http://evil.example' refused (rest.allowed-origins)"),
    errors.TooManyLoginAttempts("5 failed logins from 10.0.0.7 within 5min", retry_after=240),
    errors.RouteNotFound("GET /nowhere: Not Found"),
    errors.MethodNotAllowed("PUT", "/jobs", ["POST", "GET"]),
    errors.InternalError("internal error: KeyError: 'x'"),
    errors.EnvironmentBuildFailed(
        "no version of nosuchlib matches nosuchlib==9.9 (uv: No solution found when resolving dependencies)",
        requirement="nosuchlib==9.9",
    ),
    errors.EntrypointNotFound("entrypoint 'pipelines.sales:gen': module 'pipelines.sales' has no function 'gen'"),
    errors.MissingExtra("sparkdispatch master needs the 'master' extra", extra="master"),
    errors.ConnectServerError(
        "the Spark Connect server exited with code 1 before it served; its log is /w/s.log",
        log_file="/w/s.log",
        details=["ERROR SparkContext: Error initializing SparkContext."],
    ),
    errors.ServiceUnavailable("this master is a standby; the leader is http://m1:8081", leader="http://m1:8081"),
    errors.LeadershipLost("JobGraph store"),
    errors.RecoveryInProgress("this master is recovering its jobs", leader="http://m1:8081", retry_after=1),
]


def all_error_classes() -> set[type[SparkDispatchError]]:
    found: set[type[SparkDispatchError]] = set()
    pending: list[type[SparkDispatchError]] = [SparkDispatchError]
    while pending:
        cls = pending.pop()
        found.add(cls)
        pending.extend(cls.__subclasses__())
    return {cls for cls in found if not cls.__module__.startswith(("tests.", "test_"))}


def test_the_registry_names_every_error_class_and_every_class_has_an_example() -> None:
    classes = all_error_classes()
    assert set(ERROR_TYPES.values()) == classes
    assert all(ERROR_TYPES[cls.__name__] is cls for cls in classes)
    assert {type(example) for example in EXAMPLES} == classes


@pytest.mark.parametrize("error", EXAMPLES, ids=lambda e: type(e).__name__)
def test_a_body_round_trips_to_the_same_class_fields_and_messages(error: SparkDispatchError) -> None:
    body = error.to_body()
    assert body["type"] == type(error).__name__
    assert body["errors"] == error.messages() and all(isinstance(m, str) for m in body["errors"])
    assert {k: v for k, v in body.items() if k not in ("errors", "type")} == error.fields()
    rebuilt = error_from_body(error.http_status, json.dumps(body))
    assert type(rebuilt) is type(error)
    assert rebuilt.to_body() == body
    assert rebuilt.messages() == error.messages()
    assert rebuilt.fields() == error.fields()
    assert rebuilt.http_status == error.http_status
    for name in error.fields():
        assert getattr(rebuilt, name) == getattr(error, name)


def test_a_class_declares_its_fields_once_as_annotations() -> None:
    assert list(errors.JobTooLarge.field_types) == ["field_errors", "subtasks", "limit", "option"]  # the base's first
    assert list(errors.RecoveryInProgress.field_types) == ["leader", "retry_after"]
    assert list(errors.LeadershipLost.field_types) == ["component"]  # own_fields_only: not the base's `leader`
    assert list(StaleExecution.field_types) == ["job_id", "execution_id", "reason"]
    assert errors.NoLeader.field_types == {}


def test_a_class_of_another_package_is_not_registered_and_a_field_of_another_type_is_refused() -> None:
    class Elsewhere(SparkDispatchError):
        code: int

        def __init__(self, message: str, *, code: int) -> None:
            super().__init__(message)
            self.code = code

    assert "Elsewhere" not in ERROR_TYPES  # a body naming it cannot make code of another package run
    assert Elsewhere("boom", code=7).to_body() == {"errors": ["boom"], "type": "Elsewhere", "code": 7}
    assert Elsewhere.from_fields(["boom"], {"code": 7}).code == 7
    for wrong in ("7", True, None):
        with pytest.raises(ValueError, match="code must be int"):
            Elsewhere.from_fields(["boom"], {"code": wrong})
    with pytest.raises(KeyError):
        Elsewhere.from_fields(["boom"], {})


def test_structured_fields_come_back_as_attributes() -> None:
    rebuilt = error_from_body(409, json.dumps(errors.JobAlreadyTerminated(JOB, "FAILED").to_body()))
    assert isinstance(rebuilt, errors.JobAlreadyTerminated) and (rebuilt.job_id, rebuilt.status) == (JOB, "FAILED")
    invalid = error_from_body(400, json.dumps(errors.InvalidJobGraph({"name": ["missing"]}).to_body()))
    assert isinstance(invalid, errors.InvalidJobGraph) and invalid.field_errors == {"name": ["missing"]}
    stale = error_from_body(409, json.dumps(StaleExecution(JOB, "e1", "gone").to_body()))
    assert isinstance(stale, FencingTokenMismatch)  # the TaskExecutor treats both as a stale report
    assert isinstance(stale, StaleExecution)
    assert (stale.job_id, stale.execution_id) == (JOB, "e1")


def test_a_fencing_refusal_keeps_the_session_ids_out_of_its_body() -> None:
    error = FencingTokenMismatch("ResourceManager", SESSION, "stale-session")
    assert SESSION in str(error) and "stale-session" in str(error)  # the master's own log names them
    text = json.dumps(error.to_body())
    assert SESSION not in text and "stale-session" not in text
    assert "fencing token mismatch at the ResourceManager" in error.messages()[0]


@pytest.mark.parametrize(
    ("status", "text", "messages"),
    [
        (502, "<html><body>Bad Gateway</body></html>", ["<html><body>Bad Gateway</body></html>"]),
        (500, json.dumps({"errors": ["boom", "more"], "type": "NoSuchErrorClass"}), ["boom", "more"]),
        (404, json.dumps({"errors": ["no job"], "type": "UnknownJob"}), ["no job"]),  # its field is missing
        (409, json.dumps({"errors": ["old master"]}), ["old master"]),
        (503, "", ["HTTP 503 without a body"]),
    ],
)
def test_answers_naming_no_known_class_become_the_root_class_with_status_and_text(
    status: int, text: str, messages: list[str]
) -> None:
    error = error_from_body(status, text)
    assert type(error) is SparkDispatchError
    assert error.http_status == status and error.messages() == messages


async def test_the_middleware_answers_an_unexpected_exception_as_internal_error() -> None:
    async def broken(request: web.Request) -> web.Response:
        raise KeyError("lost")

    settings = RestSettings.from_config(Configuration.from_mapping({}))
    app = web.Application(middlewares=[create_error_middleware(settings)])
    app.router.add_get("/broken", broken)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    try:
        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/broken") as answer:
            text = await answer.text()
            status = answer.status
    finally:
        await runner.cleanup()
    assert status == 500 and json.loads(text)["type"] == "InternalError"
    error = error_from_body(status, text)
    assert isinstance(error, errors.InternalError) and "KeyError" in error.message


# -- the master's own answers ------------------------------------------------------------------


@pytest.fixture
async def master() -> AsyncIterator[InProcessMaster]:
    overrides = {"rest.max-body-size": "2kb", "blob.max-size": "1kb"}
    async with InProcessMaster(overrides=overrides) as running:
        yield running


async def answer(
    method: str, url: str, *, data: bytes | None = None, json_body: object = None, headers: dict[str, str] | None = None
) -> tuple[int, str, dict[str, str]]:
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, url, data=data, json=json_body, headers=headers) as response,
    ):
        return response.status, await response.text(), dict(response.headers)


async def test_aiohttps_own_refusals_carry_a_type(master: InProcessMaster) -> None:
    status, text, _ = await answer("GET", master.url + "/no/such/route")
    assert status == 404 and isinstance(error_from_body(status, text), errors.RouteNotFound)

    status, text, headers = await answer("PUT", master.url + "/jobs")
    error = error_from_body(status, text)
    assert status == 405 and isinstance(error, errors.MethodNotAllowed)
    assert set(headers["Allow"].split(",")) == {"GET", "POST"} == set(error.allowed)

    status, text, _ = await answer(
        "POST",
        master.url + "/taskexecutors",
        data=b"x" * 200_000,
        headers={"Content-Type": "application/json", SESSION_HEADER: master.session_id},
    )
    assert status == 413 and isinstance(error_from_body(status, text), errors.RequestTooLarge)


async def test_v1_errors_have_flinks_error_body_and_the_class_in_a_header(master: InProcessMaster) -> None:
    # Flink's REST client takes an error body with any field beside `errors` for a success
    status, text, headers = await answer("PATCH", master.url + f"/v1/jobs/{JOB}?mode=cancel")
    assert status == 404 and json.loads(text) == {"errors": [f"no job with id {JOB}"]}
    assert json.loads(headers[errors.ERROR_HEADER]) == {"type": "UnknownJob", "job_id": JOB}
    error = error_from_body(status, text, header=headers[errors.ERROR_HEADER])
    assert type(error) is UnknownJob and error.job_id == JOB

    status, text, headers = await answer("GET", master.url + "/v1/no/such/route")
    assert status == 404 and set(json.loads(text)) == {"errors"}
    assert json.loads(headers[errors.ERROR_HEADER]) == {"type": "RouteNotFound"}


async def test_every_error_answer_of_the_master_names_its_class(master: InProcessMaster) -> None:
    for method, path, expected in [
        ("GET", f"/jobs/{JOB}", UnknownJob),
        ("PATCH", f"/jobs/{JOB}?mode=stop", InvalidRequest),
        ("POST", "/jobs", errors.InvalidJobGraph),
    ]:
        status, text, _ = await answer(method, master.url + path, json_body={"name": "no vertices"})
        body = json.loads(text)
        assert body["type"] == expected.__name__ and isinstance(body["errors"], list)
        assert all(isinstance(message, str) for message in body["errors"])  # the Flink CLI reads these
        assert type(error_from_body(status, text)) is expected


# -- the TaskExecutor's client -----------------------------------------------------------------


async def test_the_taskexecutor_client_raises_the_masters_own_classes(master: InProcessMaster) -> None:
    client = MasterClient(master.config)

    def register(session_id: str, slots: int = 2) -> object:
        registration = TaskExecutorRegistration(
            task_executor_id="te-1",
            hostname="te-1@h",
            queue="sparkdispatch.te.te-1",
            slots=slots,
            slot_report=SlotReport.free(2),
            spark_master="local[1]",
        )
        return client.register(master.url, session_id, registration)

    try:
        with pytest.raises(FencingTokenMismatch) as fenced:
            await asyncio.to_thread(register, "stale-session")
        assert type(fenced.value) is FencingTokenMismatch and fenced.value.component == "master"
        assert master.session_id not in str(fenced.value)  # the answer does not hand out the session

        with pytest.raises(InvalidRequest) as invalid:
            await asyncio.to_thread(register, master.session_id, 0)
        assert invalid.value.what == "TaskExecutor registration" and "slots" in invalid.value.field_errors

        with pytest.raises(UnknownTaskExecutor, match="register again"):
            await asyncio.to_thread(
                client.heartbeat,
                master.url,
                master.session_id,
                "te-unknown",
                slot_report=SlotReport.free(1),
                executions=[],
            )

        update = ExecutionStateUpdate(
            job_id=JOB, job_master_id=master.session_id, execution_id="e1", state=ExecutionState.RUNNING
        )
        with pytest.raises(UnknownJob) as unknown:
            await asyncio.to_thread(client.report_state, master.url, master.session_id, update)
        assert unknown.value.job_id == JOB

        await master.add_task_executor("te-2")
        async with aiohttp.ClientSession() as http:
            async with http.post(
                master.url + "/jobs",
                json={"job_id": JOB, "name": "held", "vertices": [{"id": "a", "entrypoint": "m:f"}]},
            ) as submitted:
                assert submitted.status == 202
        (deployment,) = await _deployments(master, JOB, 1)
        stale = ExecutionStateUpdate(
            job_id=JOB,
            job_master_id=deployment.tdd.job_master_id,
            execution_id="not-an-attempt",
            state=ExecutionState.RUNNING,
        )
        with pytest.raises(StaleExecution) as refused:
            await asyncio.to_thread(client.report_state, master.url, deployment.session_id, stale)
        assert (refused.value.job_id, refused.value.execution_id) == (JOB, "not-an-attempt")
    finally:
        await asyncio.to_thread(client.close)


async def _deployments(master: InProcessMaster, job_id: str, count: int) -> list[Deployment]:
    await eventually(lambda: len(master.gateway.of_job(job_id)) >= count, f"{count} deployment(s) of {job_id}")
    return list(master.gateway.of_job(job_id))
