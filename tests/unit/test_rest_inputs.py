"""What REST requests bring, checked before use: ids in paths, body sizes, body types, parsing off
the loop, and an OpenAPI document that states the real bodies. Against an in-process master over
loopback HTTP."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from sparkdispatch.dispatcher.archive import ArchivedJob
from sparkdispatch.errors import (
    BlobError,
    InvalidJobGraph,
    InvalidRequest,
    MethodNotAllowed,
    RequestTooLarge,
    error_from_body,
)
from sparkdispatch.model.states import ExecutionState, JobStatus
from sparkdispatch.model.job_graph import JobGraph
from sparkdispatch.model.job_result import JobResult, VertexResult
from sparkdispatch.rest import inputs
from sparkdispatch.rest.taskexecutor_routes import SESSION_HEADER
from sparkdispatch.model.snapshot import JobSnapshot
from sparkdispatch.testing.master import InProcessMaster

PLANTED = "feed" * 8
LIMIT = 256 * 1024  # rest.max-body-size of these tests


@pytest.fixture
async def master() -> AsyncIterator[InProcessMaster]:
    async with InProcessMaster(overrides={"rest.max-body-size": LIMIT}) as running:
        yield running


async def call(method: str, url: str, **kwargs: Any) -> tuple[int, str, dict[str, str]]:
    async with aiohttp.ClientSession() as http, http.request(method, url, **kwargs) as answer:
        return answer.status, await answer.text(), dict(answer.headers)


def graph(**overrides: Any) -> dict[str, Any]:
    return {"name": "g", "vertices": [{"id": "a", "entrypoint": "m:f"}], **overrides}


# -- ids in paths --------------------------------------------------------------------------------


async def test_a_job_id_cannot_name_a_file_outside_the_archive(master: InProcessMaster) -> None:
    result = JobResult(
        job_id=PLANTED,
        name="planted",
        status=JobStatus.FINISHED,
        start_time=1,
        end_time=2,
        vertices={"a": VertexResult(ExecutionState.FINISHED, 1)},
    )
    planted = master.config.storage_dir / "x.json"  # the archive is <storage.dir>/archive/<cluster-id>
    planted.write_text(json.dumps(ArchivedJob(result, JobSnapshot.from_result(result)).to_dict()))
    for method, path in (
        ("GET", "/jobs/..%2F..%2Fx"),
        ("GET", "/jobs/..%2F..%2Fx/execution-result"),
        ("PATCH", "/jobs/..%2F..%2Fx?mode=cancel"),
        ("GET", "/v1/jobs/..%2F..%2Fx"),
    ):
        status, text, headers = await call(method, master.url + path)
        error = error_from_body(status, text, header=headers.get("X-SparkDispatch-Error"))
        assert status == 400 and isinstance(error, InvalidRequest), (path, text)
        assert error.field_errors == {"job_id": ["must be 32 lowercase hex characters, got '../../x'"]}
    status, page, _ = await call("GET", master.url + "/ui/jobs/..%2F..%2Fx")
    assert status == 400 and "32 lowercase hex" in page
    status, text, _ = await call("GET", master.url + "/jobs")
    assert status == 200 and json.loads(text) == {"jobs": [], "next": None}


@pytest.mark.parametrize(
    ("method", "path", "field"),
    [
        ("GET", "/jobs/NOT-A-JOB", "job_id"),
        ("GET", "/jobs/" + "a" * 33, "job_id"),
        ("PATCH", "/jobs/overview", None),  # not a job id: the resource takes GET only
        ("POST", "/taskexecutors/..%2Fte/heartbeat", "task_executor_id"),
        ("POST", "/taskexecutors/%20te/unregister", "task_executor_id"),
        ("POST", f"/jobs/{'ab' * 16}/executions/..%2Fx/state", "execution_id"),
        ("POST", "/jobs/ab/executions/e1/state", "job_id"),
    ],
)
async def test_every_route_names_a_malformed_id(
    master: InProcessMaster, method: str, path: str, field: str | None
) -> None:
    status, text, headers = await call(method, master.url + path, json={}, headers={SESSION_HEADER: master.session_id})
    error = error_from_body(status, text)
    if field is None:
        assert status == 405 and isinstance(error, MethodNotAllowed) and headers["Allow"] == "GET"
    else:
        assert status == 400 and isinstance(error, InvalidRequest) and field in error.field_errors, text


@pytest.mark.parametrize(
    ("path", "field"),
    [
        (f"/jobs/{'ab' * 16}%0A", "job_id"),
        (f"/v1/jobs/{'ab' * 16}%0A/execution-result", "job_id"),
        (f"/jobs/{'ab' * 16}/vertices/a%0A", "vertex_id"),
    ],
)
async def test_an_id_with_a_trailing_newline_is_refused(master: InProcessMaster, path: str, field: str) -> None:
    status, text, headers = await call("GET", master.url + path)
    error = error_from_body(status, text, header=headers.get("X-SparkDispatch-Error"))
    assert status == 400 and isinstance(error, InvalidRequest) and field in error.field_errors, text


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"job_id": "ab" * 16 + "\n"}, "job_id"),
        ({"vertices": [{"id": "a\n", "entrypoint": "m:f"}]}, "vertices[0].id"),
        ({"vertices": [{"id": "a", "entrypoint": "m:f\n"}]}, "vertices[0].entrypoint"),
        ({"artifacts": ["cd" * 32 + "\n"]}, "artifacts[0]"),
    ],
)
async def test_a_graph_with_a_trailing_newline_in_an_id_is_refused(
    master: InProcessMaster, changes: dict[str, Any], field: str
) -> None:
    status, text, _ = await call("POST", master.url + "/jobs", json=graph(**changes))
    error = error_from_body(status, text)
    assert status == 400 and isinstance(error, InvalidJobGraph) and field in error.field_errors, text
    status, text, _ = await call(
        "POST",
        master.url + "/taskexecutors",
        json={"task_executor_id": "te-1\n", "hostname": "h", "slots": 1},
        headers={SESSION_HEADER: master.session_id},
    )
    error = error_from_body(status, text)
    assert status == 400 and isinstance(error, InvalidRequest) and "task_executor_id" in error.field_errors, text


async def test_a_taskexecutor_call_without_its_session_is_malformed(master: InProcessMaster) -> None:
    status, text, _ = await call("POST", master.url + "/taskexecutors/te-1/heartbeat", json={})
    error = error_from_body(status, text)
    assert status == 400 and isinstance(error, InvalidRequest) and SESSION_HEADER in error.field_errors


# -- bodies --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("restart_strategy", "field"),
    [
        ({"type": {}}, "restart_strategy.type"),
        ({"type": ["fixed-delay"]}, "restart_strategy.type"),
        ({"type": "fixed-delay", "delay_s": "0.5"}, "restart_strategy.delay_s"),
    ],
)
async def test_a_wrong_typed_field_is_a_400_naming_it(
    master: InProcessMaster, restart_strategy: Any, field: str
) -> None:
    status, text, _ = await call("POST", master.url + "/jobs", json=graph(restart_strategy=restart_strategy))
    error = error_from_body(status, text)
    assert status == 400 and isinstance(error, InvalidJobGraph) and list(error.field_errors) == [field], text


async def test_a_body_over_the_limit_is_refused_while_it_is_still_being_sent(master: InProcessMaster) -> None:
    answered = asyncio.Event()

    async def endless_graph() -> AsyncIterator[bytes]:
        yield b'{"name": "big", "vertices": ['
        for _ in range(2 * LIMIT // 1024):
            yield b'{"id": "v", "entrypoint": "m:f"},' * 32
        await answered.wait()  # the rest never comes before the answer: no Content-Length, a stream

    for path in ("/jobs", "/taskexecutors/te-1/heartbeat"):
        async with asyncio.timeout(10):
            status, text, _ = await call(
                "POST",
                master.url + path,
                data=endless_graph(),
                headers={"Content-Type": "application/json", SESSION_HEADER: master.session_id},
            )
        assert status == 413 and isinstance(error_from_body(status, text), RequestTooLarge), text
    answered.set()


async def test_a_large_graph_is_parsed_and_validated_off_the_loop(
    master: InProcessMaster, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[threading.Thread] = []
    parse = inputs._job_graph

    def recording_parse(body: bytes) -> JobGraph:
        threads.append(threading.current_thread())
        return parse(body)

    monkeypatch.setattr(inputs, "_job_graph", recording_parse)
    vertices = [{"id": f"v{i}", "entrypoint": "m:f", "inputs": [f"v{i - 1}"] if i else []} for i in range(2_000)]
    status, text, _ = await call("POST", master.url + "/jobs", json={"name": "large", "vertices": vertices})
    assert status == 202, text
    status, text, _ = await call("POST", master.url + "/jobs", json=graph())
    assert status == 202, text
    assert threads[0] is not threading.main_thread() and threads[1] is threading.main_thread()
    # the large job's details are built and dumped in a thread too; the answer is the same
    jobs = json.loads((await call("GET", master.url + "/jobs"))[1])["jobs"]
    large = next(job["id"] for job in jobs if job["name"] == "large")
    status, text, _ = await call("GET", master.url + f"/jobs/{large}")
    details = json.loads(text)
    assert status == 200 and [v["id"] for v in details["vertices"]] == [f"v{i}" for i in range(2_000)]
    assert details["vertices"][1]["inputs"] == ["v0"] and details["vertices"][0]["state"] == "SCHEDULED"


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("multipart/form-data", b"no boundary"),
        (
            "multipart/form-data; boundary=xx",
            b'--xx\r\nContent-Disposition: form-data; name="\x7f"\r\n\r\n1\r\n--xx--\r\n',
        ),
    ],
)
async def test_a_malformed_multipart_upload_is_a_blob_error(
    master: InProcessMaster, content_type: str, body: bytes
) -> None:
    status, text, _ = await call("POST", master.url + "/artifacts", data=body, headers={"Content-Type": content_type})
    assert status == 400 and isinstance(error_from_body(status, text), BlobError), text


# -- the OpenAPI document ------------------------------------------------------------------------


async def test_the_openapi_document_states_every_body(master: InProcessMaster) -> None:
    status, text, _ = await call("GET", master.url + "/openapi.json")
    document = json.loads(text)
    schemas = document["components"]["schemas"]

    def resolved(schema: dict[str, Any]) -> dict[str, Any]:
        return schemas[schema["$ref"].rsplit("/", 1)[1]] if "$ref" in schema else schema

    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if method == "parameters":
                continue
            for code, response in operation["responses"].items():
                if (method, path, code) == ("get", "/artifacts/{key}", "200"):  # the artifact's bytes
                    assert response["content"]["application/octet-stream"]["schema"]["format"] == "binary"
                    continue
                schema = resolved(response["content"]["application/json"]["schema"])
                assert schema.get("properties") is not None or "oneOf" in schema, (method, path, code)
    assert set(schemas["JobDetails"]["required"]) == {
        "id",
        "name",
        "status",
        "start_time",
        "end_time",
        "vertices",
        "repairs",
    }
    kinds = [
        resolved(choice)["properties"]["type"]["enum"]
        for choice in schemas["JobGraph"]["properties"]["restart_strategy"]["oneOf"]
    ]
    assert kinds == [["none"], ["fixed-delay"], ["exponential-delay"], ["failure-rate"]]


async def test_a_request_line_longer_than_aiohttps_default_still_gets_a_json_answer(master: InProcessMaster) -> None:
    """Found by schemathesis: a query string of 8 KiB was answered by aiohttp's parser in plain text."""
    status, text, headers = await call("GET", f"{master.url}/jobs/{'a' * 32}/vertices/v/log?offset={'1' * 9000}")
    assert status == 400 and headers["Content-Type"].startswith("application/json"), text
    assert json.loads(text)["type"] == "InvalidRequest"


@pytest.mark.parametrize("offset", ["\u00b2", "1" * 19, "-1", "1.5"])
async def test_a_query_integer_that_is_no_small_ascii_number_is_a_400(master: InProcessMaster, offset: str) -> None:
    status, text, _ = await call("GET", f"{master.url}/jobs/{'a' * 32}/vertices/v/log", params={"offset": offset})
    assert status == 400 and "offset: must be a non-negative integer of at most 18 digits" in text, text
