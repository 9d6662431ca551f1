"""The jobs of a soak: what a long-lived cluster runs day after day, one job at a time.

`SoakJobs(base_url, work_dir).run(index)` submits job number `index` and waits for its end. By
its index a job is (`kind_of`):

- `udf`: two vertices, `extract` (parallelism 2) and `report` (1, reading `extract`), each running a
  Python UDF of the job's module (`soak_tasks`), which Spark's Python workers import from the job's
  artifact. Pairs of jobs take turns (`durable_results`): `extract` chained into `report`'s task
  (the master's choice), then `extract`'s two subtasks as tasks of their own, on both slots, with
  durable results;
- `retry`: as `udf`, whose `report` fails its first attempt and is restarted (FINISHED, 2 attempts);
- `repair`: as `udf`, whose `report` fails until the soak repairs the job: FAILED, then repaired
  (`POST /jobs/{id}/repair`) to FINISHED;
- `cancel`: one vertex running a Spark operation until the job is cancelled, once that operation
  has run for `CANCEL_AFTER_S`: CANCELED. (Cancelled sooner, before Spark started the operation's
  job, Spark 4.3 may leave the job running after the operation ended: the interrupt finds no job to
  cancel and nothing cancels it later. That holds the executors' cores for good.)

Every other job ships a new version of the module (a new artifact, as a redeployed pipeline does);
the others reuse one of `STABLE_VERSIONS` uploaded once, so slot processes are both replaced and
reused. All waiting is on the master's long poll or with sleeps between calls.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkdispatch.testing.http import http_json, upload_artifact
from sparkdispatch.testing.waiting import eventually_blocking

STABLE_VERSIONS = 4
MODULE = "soak_tasks"
JOB_TIMEOUT_S = 600.0
POLL_S = 0.5  # between two questions that the master answers at once
CANCEL_AFTER_S = 3.0  # how long the Spark operation of a job to be cancelled runs first

_SOURCE = '''"""A soak job's code, version {version}."""

import time
from pathlib import Path

from pyspark.sql import functions as F
from pyspark.sql.types import LongType

VERSION = {version}


def _tag(value):
    return value * 2 + VERSION


def extract(ctx):
    tag = F.udf(_tag, LongType())
    rows = ctx.spark.range(200).where(F.col("id") % ctx.parallelism == ctx.subtask_index)
    return rows.select(tag("id").alias("v"))


def report(ctx):
    if ctx.params.get("fail_first") and ctx.attempt == 0:
        raise RuntimeError("soak: the first attempt fails")
    until = ctx.params.get("fail_until")
    if until and not Path(until).exists():
        raise RuntimeError("soak: failing until the job is repaired")
    tag = F.udf(_tag, LongType())
    return ctx.inputs["extract"].select(tag("v").alias("w"))


def endless(ctx):
    Path(ctx.params["started"]).touch()
    ctx.spark.range(0, 10**12, numPartitions=2).selectExpr("sum(id % 7)").collect()
'''


def kind_of(index: int) -> str:
    """Which kind of job number `index` is: mostly `udf`, 1 in 10 `retry`, 1 in 25 `repair` and `cancel`."""
    if index % 25 == 7:
        return "cancel"
    if index % 25 == 13:
        return "repair"
    if index % 10 == 4:
        return "retry"
    return "udf"


@dataclass(frozen=True)
class JobOutcome:
    index: int
    kind: str
    status: str  # FINISHED, CANCELED, or FAILED (a repair job that did not come back FINISHED)
    seconds: float  # from the first submission to the end (for `repair`, to the repaired end)
    expected: bool  # the outcome the kind calls for
    failure: str = ""  # the JobResult's failure when it did not end as expected


def durable_results(index: int) -> bool:
    """Whether job `index` keeps durable results (jobs 2, 3, 6, 7, ...), so its `extract` runs as two
    tasks of its own; the others run it chained into `report` (jobs 0, 1, 4, 5, ...). Each code
    version (new every other job) comes both ways."""
    return index // 2 % 2 == 1


class SoakJobs:
    """Job number `index`, submitted to the master at `base_url` and waited for (`run`)."""

    def __init__(self, base_url: str, work_dir: Path) -> None:
        self.base_url = base_url.rstrip("/")
        self.work_dir = work_dir
        self._stable: list[str] = []

    def run(self, index: int) -> JobOutcome:
        kind = kind_of(index)
        begin = time.monotonic()
        artifact = self._artifact(index)
        if kind == "cancel":
            result = self._cancelled(index, artifact)
        elif kind == "repair":
            result = self._repaired(index, artifact)
        else:
            result = self._wait(
                self._submit(
                    self._graph(index, artifact, {"fail_first": kind == "retry"}, attempts=1 if kind == "retry" else 0)
                )
            )
        status = str(result["status"])
        expected = status == ("CANCELED" if kind == "cancel" else "FINISHED")
        failure = "" if expected else str(result.get("failure") or result.get("vertices"))
        return JobOutcome(index, kind, status, time.monotonic() - begin, expected, failure)

    def _artifact(self, index: int) -> str:
        if not self._stable:
            self._stable = [self._upload(version) for version in range(STABLE_VERSIONS)]
        if index % 2:
            return self._stable[index // 2 % STABLE_VERSIONS]
        return self._upload(STABLE_VERSIONS + index)

    def _upload(self, version: int) -> str:
        path = self.work_dir / "code" / str(version) / f"{MODULE}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_SOURCE.format(version=version))
        return upload_artifact(self.base_url, path, timeout=60)

    def _graph(self, index: int, artifact: str, report_params: dict[str, Any], *, attempts: int) -> dict[str, Any]:
        return {
            "name": f"soak-{index}",
            "artifacts": [artifact],
            "vertices": [
                {"id": "extract", "entrypoint": f"{MODULE}:extract", "parallelism": 2},
                {"id": "report", "entrypoint": f"{MODULE}:report", "inputs": ["extract"], "params": report_params},
            ],
            "restart_strategy": {"type": "fixed-delay", "attempts": attempts, "delay_s": 0.0},
            **({"results": "durable"} if durable_results(index) else {}),
        }

    def _repaired(self, index: int, artifact: str) -> dict[str, Any]:
        fixed = self.work_dir / "fixed" / f"soak-{index}"
        fixed.parent.mkdir(parents=True, exist_ok=True)
        job_id = self._submit(self._graph(index, artifact, {"fail_until": str(fixed)}, attempts=0))
        first = self._wait(job_id)
        if first["status"] != "FAILED":
            return {**first, "failure": f"{first['status']} before its repair, not FAILED"}
        fixed.write_text("")

        def repair_taken() -> bool:
            status, body = self._call("POST", f"/jobs/{job_id}/repair", {"vertices": ["report"]})
            # 409 running: its result is in, its cleanup not done yet; the master says to ask again
            if status not in (200, 202) and not (status == 409 and body.get("running")):
                raise RuntimeError(f"the repair of {job_id} was refused with {status}: {body}")
            return status in (200, 202)

        eventually_blocking(
            repair_taken, f"the repair of job {job_id} to be taken", timeout=JOB_TIMEOUT_S, interval=POLL_S
        )
        return self._wait(job_id, after_end=first["end_time"])

    def _cancelled(self, index: int, artifact: str) -> dict[str, Any]:
        started = self.work_dir / "started" / f"soak-{index}"
        started.parent.mkdir(parents=True, exist_ok=True)
        graph = {
            "name": f"soak-{index}",
            "artifacts": [artifact],
            "vertices": [{"id": "endless", "entrypoint": f"{MODULE}:endless", "params": {"started": str(started)}}],
            "restart_strategy": {"type": "fixed-delay", "attempts": 0, "delay_s": 0.0},
        }
        job_id = self._submit(graph)
        eventually_blocking(
            started.exists, f"job {job_id} to start its Spark operation", timeout=JOB_TIMEOUT_S, interval=POLL_S
        )
        time.sleep(CANCEL_AFTER_S)
        status, body = self._call("PATCH", f"/jobs/{job_id}?mode=cancel")
        if status != 202:
            raise RuntimeError(f"cancelling {job_id} answered {status}: {body}")
        return self._wait(job_id)

    def _submit(self, graph: dict[str, Any]) -> str:
        status, body = self._call("POST", "/jobs", graph)
        if status not in (200, 202):
            raise RuntimeError(f"submission refused with {status}: {body}")
        return str(body["job_id"])

    def _wait(self, job_id: str, *, after_end: int | None = None) -> dict[str, Any]:
        """The job's result once it ended (after `after_end`, the end time of a result it had before)."""

        def ended() -> dict[str, Any] | None:
            status, body = self._call("GET", f"/jobs/{job_id}/execution-result")  # a long poll
            if status != 200:
                raise RuntimeError(f"execution-result of {job_id} answered {status}: {body}")
            result = body.get("job_execution_result")
            # before a repair runs, its former result is still the answer
            if body["status"]["id"] == "COMPLETED" and (after_end is None or result["end_time"] > after_end):
                return dict(result)
            return None

        return eventually_blocking(ended, f"the end of job {job_id}", timeout=JOB_TIMEOUT_S, interval=POLL_S)

    def _call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return http_json(method, self.base_url + path, body, timeout=60)
