"""A vertex boundary on a real Spark Connect server: what a result's directory holds, and what its
consumer's read costs, counted in the server's Spark UI (its REST API's jobs)."""

from __future__ import annotations

import json
import shutil
import socket
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.request import urlopen

import pytest

from sparkdispatch.model.protocol import ChainedTask
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.storage.attempt_logs import attempt_log_path, chained_log_path
from sparkdispatch.taskexecutor.connect_server import ConnectServer
from sparkdispatch.taskexecutor.settings import SlotPoolSettings
from sparkdispatch.taskexecutor.slot_pool import SlotProcessPool
from sparkdispatch.taskexecutor.slot_protocol import AttemptState
from sparkdispatch.testing.slot_attempts import (
    connect_settings_for_tests,
    artifact,
    deployment,
    new_job_id,
    run,
    slot_processes,
)
from sparkdispatch.testing.waiting import eventually_blocking

pytestmark = pytest.mark.slow

TASKS = Path(__file__).with_name("boundary_tasks.py")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class SparkUi:
    """The jobs the server's Spark UI lists (its REST API)."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}/api/v1/applications"

    def _get(self, path: str) -> Any:
        with urlopen(self.base + path, timeout=10) as answer:
            return json.load(answer)

    def jobs(self) -> list[dict[str, Any]]:
        [application] = self._get("")
        jobs: list[dict[str, Any]] = self._get(f"/{application['id']}/jobs")
        return jobs

    def last_job_id(self) -> int:
        return max((job["jobId"] for job in self.jobs()), default=-1)


@pytest.fixture(scope="module")
def ui_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def connect_server(
    tmp_path_factory: pytest.TempPathFactory, service_missing: Callable[[str], None], ui_port: int
) -> Iterator[ConnectServer]:
    if shutil.which("java") is None:
        service_missing("Spark needs java on PATH")
    settings = connect_settings_for_tests(
        **{"spark.ui.enabled": "true", "spark.ui.port": str(ui_port), "spark.ui.host": "127.0.0.1"}
    )
    server = ConnectServer(settings, work_dir=tmp_path_factory.mktemp("connect-server"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pool(connect_server: ConnectServer) -> Iterator[SlotProcessPool]:
    pool = SlotProcessPool(
        SlotPoolSettings(spares=0, cancellation_timeout=2.0),
        connect_url=connect_server.url,
        driver_log=str(connect_server.log_path),
    )
    pool.start()
    try:
        yield pool
    finally:
        pool.close()
    assert slot_processes() == set(), "slot processes left after close()"


def produce(pool: SlotProcessPool, tmp_path: Path) -> tuple[str, str, AttemptState, str]:
    """The boundary tasks as an artifact, a new job's id, its `produce` attempt, FINISHED, and its result's path."""
    tasks = artifact(tmp_path, "boundary_tasks.py", TASKS.read_bytes())
    (tmp_path / "markers").mkdir()
    job_id = new_job_id()
    produced = run(pool, deployment(tmp_path, "boundary_tasks:produce", job_id=job_id), [tasks])
    assert produced.state is ExecutionState.FINISHED and produced.result_path is not None, produced
    return tasks, job_id, produced, produced.result_path


def test_a_result_holds_only_data_files_and_its_consumer_reads_it_without_an_inference_job(
    pool: SlotProcessPool, ui_port: int, tmp_path: Path
) -> None:
    tasks = artifact(tmp_path, "boundary_tasks.py", TASKS.read_bytes())
    (tmp_path / "markers").mkdir()
    ui = SparkUi(ui_port)
    job_id = new_job_id()

    produced = run(pool, deployment(tmp_path, "boundary_tasks:produce", job_id=job_id), [tasks])
    assert produced.state is ExecutionState.FINISHED and produced.result_path is not None, produced
    assert produced.rows == 1000 and produced.result_schema is not None
    files = sorted(p.name for p in Path(produced.result_path).iterdir())
    assert files and all(name.startswith("part-") and name.endswith(".parquet") for name in files), files

    def jobs_of_a_read(schemas: dict[str, str]) -> list[dict[str, Any]]:
        """The Spark jobs a consumer's read of the result ran, once a tagged job behind it is listed."""
        before = ui.last_job_id()
        name, tag = f"read-{len(schemas)}", f"after-read-{uuid.uuid4().hex}"
        inputs = {"up": (produced.result_path,)}
        params = {"name": name}
        read = deployment(
            tmp_path, "boundary_tasks:read_input", job_id=job_id, params=params, inputs=inputs, input_schemas=schemas
        )
        assert run(pool, read, [tasks]).state is ExecutionState.FINISHED
        marker = deployment(tmp_path, "boundary_tasks:tagged_job", job_id=job_id, params={"tag": tag})
        assert run(pool, marker, [tasks]).state is ExecutionState.FINISHED
        eventually_blocking(
            lambda: any(tag in t for job in ui.jobs() for t in job.get("jobTags", [])),
            f"the tagged job {tag} listed in the Spark UI",
            timeout=60,
        )
        return [job for job in ui.jobs() if job["jobId"] > before and not any(tag in t for t in job.get("jobTags", []))]

    assert jobs_of_a_read({"up": produced.result_schema}) == []
    with_schema = (tmp_path / "markers" / "read-1").read_text()
    inferred = jobs_of_a_read({})
    assert len(inferred) >= 1, "without the producer's schema Spark infers it with a job"
    # the schema given is the one Spark infers from the files: the consumer sees the same columns
    assert json.loads(with_schema) == json.loads((tmp_path / "markers" / "read-0").read_text())


def test_a_chained_vertex_runs_in_its_consumers_attempt_as_one_plan_and_its_rows_are_counted(
    pool: SlotProcessPool, tmp_path: Path
) -> None:
    tasks, job_id, produced, produced_path = produce(pool, tmp_path)
    half = ChainedTask(
        "half",
        "boundary_tasks:half",
        parallelism=2,
        inputs={"up": (produced_path,)},
        input_schemas={"up": produced.result_schema or ""},
    )

    chain = deployment(tmp_path, "boundary_tasks:total", job_id=job_id, inputs={"half": ()}, chained=(half,))
    finished = run(pool, chain, [tasks])

    assert finished.state is ExecutionState.FINISHED, finished
    assert finished.rows == 1 and finished.chained_rows == {"half": (500, 500)}
    assert (tmp_path / "markers" / "total-inputs").read_text() == "half"
    import pyarrow.parquet

    assert finished.result_path is not None
    assert pyarrow.parquet.read_table(finished.result_path).to_pylist() == [{"n": 1000, "s": 2 * sum(range(1000))}]
    # nothing written for the chained vertex but its subtasks' logs, each with what its function printed
    half_dir = Path(finished.result_path).parent.parent / "half"
    assert [p.name for p in half_dir.iterdir()] == ["_logs"]
    for index in (0, 1):
        log = chained_log_path(chain.result_path, "half", index, chain.attempt)
        assert log is not None and log.read_text().splitlines() == [f"half {index} of 2"]
    head_log = attempt_log_path(chain.result_path, chain.attempt)
    assert head_log is not None and "total" in head_log.read_text() and "half" not in head_log.read_text()

    broken = ChainedTask("half", "boundary_tasks:broken", inputs={"up": (produced_path,)})
    failed = run(
        pool,
        deployment(tmp_path, "boundary_tasks:total", job_id=job_id, inputs={"half": ()}, chained=(broken,)),
        [tasks],
    )
    assert failed.state is ExecutionState.FAILED and failed.failure is not None
    assert (failed.failure.cls, failed.failure.message) == ("ValueError", "broken on purpose")


def test_a_result_read_by_two_vertices_of_one_chain_is_built_once_and_counted_once(
    pool: SlotProcessPool, tmp_path: Path
) -> None:
    """A diamond in one attempt: half (x2) read by evens and odds, both read by the head."""
    tasks, job_id, _, produced_path = produce(pool, tmp_path)
    up = {"up": (produced_path,)}
    chained = (
        ChainedTask("half", "boundary_tasks:half", parallelism=2, inputs=up),
        ChainedTask("evens", "boundary_tasks:parity", inputs={"half": ()}, params={"remainder": 0}),
        ChainedTask("odds", "boundary_tasks:parity", inputs={"half": ()}, params={"remainder": 1}),
    )
    head = deployment(tmp_path, "boundary_tasks:both", job_id=job_id, inputs={"evens": (), "odds": ()}, chained=chained)
    finished = run(pool, head, [tasks])

    assert finished.state is ExecutionState.FINISHED, finished
    # half's two subtasks' functions ran once each (one line in each log), their rows counted once
    assert finished.chained_rows == {"half": (500, 500), "evens": (500,), "odds": (500,)}
    for index in (0, 1):
        log = chained_log_path(head.result_path, "half", index, head.attempt)
        assert log is not None and log.read_text().splitlines() == [f"half {index} of 2"]
    import pyarrow.parquet

    assert finished.result_path is not None
    assert pyarrow.parquet.read_table(finished.result_path).to_pylist() == [{"n": 1000, "s": 2 * sum(range(1000))}]
