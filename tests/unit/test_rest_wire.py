"""The REST answers on the wire, byte for byte: key order, Flink's dashed names, and `null` where a
value is absent (docs/rest-api.md). Clients of other languages and Flink's own CLI read these bytes.

A view of fixed data is compared with its exact text; a live master's answers, whose ids and times
change from run to run, with their skeleton: the same keys in the same order, each value replaced
by its JSON type (`null` kept as it is).
"""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp

from sparkdispatch.model.job_result import Failure, JobResult, VertexResult
from sparkdispatch.model.repair import Repair
from sparkdispatch.model.snapshot import JobOverview, JobSnapshot, SubtaskSnapshot, VertexSnapshot
from sparkdispatch.model.states import ExecutionState, JobStatus
from sparkdispatch.rest import views
from sparkdispatch.storage.attempt_logs import LOG_DIR
from sparkdispatch.testing.master import InProcessMaster, TaskOutcome
from sparkdispatch.testing.waiting import eventually

JOB_ID = "ab" * 16
GRAPH_JOB_ID = "cd" * 16
GRAPH = {
    "job_id": GRAPH_JOB_ID,
    "name": "wire",
    "restart_strategy": {"type": "none"},
    "vertices": [{"id": "a", "entrypoint": "m:f", "parallelism": 2}, {"id": "b", "entrypoint": "m:g", "inputs": ["a"]}],
}


def compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def snapshot() -> JobSnapshot:
    overview = JobOverview(
        job_id=JOB_ID,
        name="sales",
        status=JobStatus.RUNNING,
        start_time=1_000,
        end_time=None,
        duration_ms=2_500,
        last_modification=3_000,
        tasks={ExecutionState.FINISHED: 1, ExecutionState.RUNNING: 1},
    )
    return JobSnapshot(
        overview,
        (
            VertexSnapshot(
                "extract",
                ExecutionState.RUNNING,
                2,
                subtasks=(
                    SubtaskSnapshot(0, ExecutionState.FINISHED, 0, "te-1"),
                    SubtaskSnapshot(1, ExecutionState.RUNNING, 1),
                ),
            ),
            VertexSnapshot("old", ExecutionState.FINISHED, None, attempts=2),
        ),
        (Repair(1, ("extract",), ("extract",), 5_000, JobStatus.FAILED), Repair(2, ("extract",), ("extract",), 6_000)),
    )


def test_the_views_answer_byte_for_byte() -> None:
    job = snapshot()
    assert compact(views.job_summary(job.overview).to_dict()) == (
        f'{{"id":"{JOB_ID}","name":"sales","status":"RUNNING","start_time":1000,"end_time":null,"duration_ms":null}}'
    )
    assert compact(views.flink_job_details(job.overview).to_dict()) == (
        f'{{"jid":"{JOB_ID}","name":"sales","state":"RUNNING","start-time":1000,"end-time":-1,"duration":2500,'
        '"last-modification":3000,"pending-operators":0,"tasks":{"created":0,"scheduled":0,"deploying":0,'
        '"initializing":0,"running":1,"finished":1,"canceling":0,"canceled":0,"failed":0,"reconciling":0,"total":2}}'
    )
    assert compact(views.job_details(job).to_dict()) == (
        f'{{"id":"{JOB_ID}","name":"sales","status":"RUNNING","start_time":1000,"end_time":null,"vertices":['
        '{"id":"extract","state":"RUNNING","parallelism":2,"inputs":[],"subtasks":['
        '{"index":0,"state":"FINISHED","attempt":0,"taskmanager":"te-1"},'
        '{"index":1,"state":"RUNNING","attempt":1,"taskmanager":null}]},'
        '{"id":"old","state":"FINISHED","parallelism":null,"inputs":[],"subtasks":[],"attempts":2}],"repairs":['
        '{"number":1,"requested":["extract"],"vertices":["extract"],"requested_at":5000,"status":"FAILED"},'
        '{"number":2,"requested":["extract"],"vertices":["extract"],"requested_at":6000,"status":null}]}'
    )
    vertex = VertexResult(ExecutionState.FAILED, 3, failure=Failure("ValueError", "bad row", "Traceback"))
    assert compact(views.vertex_result(JOB_ID, JobStatus.FAILED, "clean", vertex).to_dict()) == (
        f'{{"job_id":"{JOB_ID}","job_status":"FAILED","vertex":"clean","result":{{"state":"FAILED","attempts":3,'
        '"failure":{"class":"ValueError","message":"bad row","traceback":"Traceback"}}}'
    )
    finished = VertexResult(ExecutionState.FINISHED, 1, rows=5, result_path="/r/a", partitions=("/r/a/0",))
    result = JobResult(JOB_ID, "sales", JobStatus.FINISHED, 1_000, 4_000, {"a": finished})
    assert compact(result.to_dict()) == (
        f'{{"job_id":"{JOB_ID}","name":"sales","status":"FINISHED","start_time":1000,"end_time":4000,'
        '"duration_ms":3000,"vertices":{"a":{"state":"FINISHED","attempts":1,"rows":5,"result_path":"/r/a",'
        '"partitions":["/r/a/0"]}}}'
    )


def skeleton(value: object) -> object:
    """`value` with each leaf replaced by its JSON type, keys in order, `null`s kept, a list by its first item."""
    if isinstance(value, dict):
        return {key: skeleton(item) for key, item in value.items()}
    if isinstance(value, list):
        return [skeleton(value[0])] if value else []
    if value is None:
        return None
    return {bool: "bool", int: "int", str: "str", float: "float"}[type(value)]


async def test_a_live_masters_answers_keep_their_keys_order_and_nulls(tmp_path: Path) -> None:
    async with InProcessMaster(overrides={"rest.execution-result.long-poll": "0s"}) as master:
        task_executor = await master.add_task_executor("te-1", slots=2)
        async with aiohttp.ClientSession() as http:

            async def call(method: str, path: str, expected: int = 200, **kwargs: object) -> str:
                async with http.request(method, master.url + path, **kwargs) as answer:  # type: ignore[arg-type]
                    text = await answer.text()
                    assert answer.status == expected, text
                    assert answer.content_type == "application/json"
                    assert compact(json.loads(text)) == text  # compact, in the order written
                    return text

            def shape(text: str) -> str:
                return compact(skeleton(json.loads(text)))

            job_id = GRAPH_JOB_ID
            assert (
                shape(await call("POST", "/jobs", 202, json=GRAPH)) == '{"job_id":"str","jobUrl":"str","status":"str"}'
            )
            assert shape(await call("GET", "/overview")) == (
                '{"is_leader":"bool","leader":"str","taskmanagers":"int","slots_total":"int","slots_available":"int",'
                '"jobs_running":"int","jobs_finished":"int","jobs_failed":"int","jobs_cancelled":"int"}'
            )
            assert shape(await call("GET", "/jobs")) == (
                '{"jobs":[{"id":"str","name":"str","status":"str","start_time":"int","end_time":null,'
                '"duration_ms":null}],"next":null}'
            )
            assert shape(await call("GET", "/jobs/overview")) == (
                '{"jobs":[{"jid":"str","name":"str","state":"str","start-time":"int","end-time":"int","duration":"int",'
                '"last-modification":"int","pending-operators":"int","tasks":{"created":"int","scheduled":"int",'
                '"deploying":"int","initializing":"int","running":"int","finished":"int","canceling":"int",'
                '"canceled":"int","failed":"int","reconciling":"int","total":"int"}}]}'
            )
            assert shape(await call("GET", f"/jobs/{job_id}/execution-result")) == '{"status":{"id":"str"}}'
            assert shape(await call("GET", f"/jobs/{job_id}/vertices/b")) == (
                '{"job_id":"str","job_status":"str","vertex":"str","result":{"state":"str","attempts":"int"}}'
            )
            assert shape(await call("GET", "/taskmanagers")) == (
                '{"taskmanagers":[{"id":"str","hostname":"str","queue":"str","spark_master":"str",'
                '"registered_at":"int","slots_total":"int","slots_free":"int","slots":[{"index":"int",'
                '"allocation_id":"str","job_id":"str"}],"idle_since":null,"idle":"bool","last_heartbeat":"int",'
                '"executions":[],"pool":"str"}],"next":null}'
            )
            assert shape(await call("GET", f"/jobs/{job_id}")) == (
                '{"id":"str","name":"str","status":"str","start_time":"int","end_time":null,"vertices":[{"id":"str",'
                '"state":"str","parallelism":"int","inputs":[],"subtasks":[{"index":"int","state":"str",'
                '"attempt":"int","taskmanager":"str"}]}],"repairs":[]}'
            )

            logs = Path(master.config.results_dir) / job_id / "a" / LOG_DIR
            logs.mkdir(parents=True)
            (logs / "0-0-e1.log").write_text("hello\n")
            assert shape(await call("GET", f"/jobs/{job_id}/vertices/a/log?subtask=0")) == (
                '{"job_id":"str","job_status":"str","vertex":"str","vertex_state":"str","subtask":"int",'
                '"attempt":"int","offset":"int","next_offset":"int","text":"str"}'
            )

            await task_executor.end_job(job_id, TaskOutcome(ExecutionState.FAILED, failure=Failure("E", "no")))

            async def completed_answer() -> str | None:
                text = await call("GET", f"/jobs/{job_id}/execution-result")
                return text if '"COMPLETED"' in text else None

            completed = await eventually(completed_answer, "the JobResult")
            assert shape(completed).startswith(
                '{"status":{"id":"str"},"job_execution_result":{"job_id":"str","name":"str","status":"str",'
                '"start_time":"int","end_time":"int","duration_ms":"int","vertices":{"a":{"state":"str",'
                '"attempts":"int","failure":{"class":"str","message":"str","traceback":"str"}},'
            )
            assert shape(await call("PATCH", f"/jobs/{job_id}?mode=cancel", 409)).startswith('{"errors":["str"],')
            await task_executor.end_job(job_id, lambda tdd: None)  # the repair's tasks keep running

            async def repair_accepted() -> str | None:
                # the job's JobMaster may still hand it over to the archive: 409 (`running`) until it has
                async with http.post(master.url + f"/jobs/{job_id}/repair", json={"vertices": ["b"]}) as answer:
                    text = await answer.text()
                    assert answer.status in (202, 409), text
                    return text if answer.status == 202 else None

            assert shape(await eventually(repair_accepted, "the repair accepted")) == (
                '{"job_id":"str","created":"bool","repair":{"number":"int","requested":["str"],"vertices":["str"],'
                '"requested_at":"int","status":null}}'
            )
            assert shape(await call("PATCH", f"/jobs/{job_id}?mode=cancel", 202)) == "{}"

            form = aiohttp.FormData()
            form.add_field("file", b"def f(ctx):\n    pass\n", filename="job.py")
            assert shape(await call("POST", "/artifacts", 201, data=form)) == '{"key":"str","filename":"str"}'
