"""The datasets a task read, as the slot process names them from `DataFrame.inputFiles()`, and
how they are kept: the progress record, the JobResult and the TaskExecutor's report."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from sparkdispatch.errors import StoreError
from sparkdispatch.ha.leader import StandaloneLeaderElection
from sparkdispatch.ha.progress_store import FileProgressStore, SubtaskProgress
from sparkdispatch.model.job_result import MAX_INPUT_FILES, VertexResult
from sparkdispatch.model.protocol import ExecutionStateUpdate
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.storage.results import ResultLayout, job_dir_of
from sparkdispatch.taskexecutor.input_datasets import input_datasets, table_directory

JOB = "a" * 32


class Contender:
    session_id = ""

    def grant_leadership(self, session_id: str) -> None:
        self.session_id = session_id

    def revoke_leadership(self) -> None:
        pass


@pytest.mark.parametrize(
    ("file", "table"),
    [
        ("file:///data/orders/part-00000-1.snappy.parquet", "file:///data/orders"),
        ("file:/data/orders/region=eu/dt=2026-11-28/part-0.parquet", "file:///data/orders"),
        ("s3a://lake/sales/year=2026/part-1.parquet", "s3a://lake/sales"),
        ("hdfs://nn:8020/warehouse/t/part-2.orc", "hdfs://nn:8020/warehouse/t"),
        ("/plain/path/data.csv", "/plain/path"),
        ("file:///k=v/part-0.parquet", "file:///"),
    ],
)
def test_a_file_is_named_by_its_table_directory_without_partition_directories(file: str, table: str) -> None:
    assert table_directory(file) == table


def test_the_datasets_of_a_tasks_files_are_its_tables_once_each_without_the_jobs_results() -> None:
    own = ResultLayout("/srv/results").attempt_path(JOB, "up", 0, "e1")
    files = [
        "file:///data/orders/region=eu/part-0.parquet",
        f"file://{own}/part-0.parquet",  # the job's own result, read through ctx.inputs
        "file:///data/orders/region=us/part-1.parquet",
        "/srv/results/" + JOB + "/other/0-e2/part-0.parquet",  # another vertex of the job, by path
        "/srv/results/" + "b" * 32 + "/v/0-e3/part-0.parquet",  # another job's result is a dataset
        "s3a://lake/customers/part-0.parquet",
    ]
    job_dir = job_dir_of(ResultLayout("/srv/results").attempt_path(JOB, "v", 1, "e9"))
    assert job_dir == f"/srv/results/{JOB}"
    assert input_datasets(files, own_results=job_dir, limit=100) == (
        "file:///data/orders",
        "/srv/results/" + "b" * 32 + "/v/0-e3",
        "s3a://lake/customers",
    )
    assert input_datasets(files, own_results=job_dir, limit=2) == (
        "file:///data/orders",
        "/srv/results/" + "b" * 32 + "/v/0-e3",
    )


def test_input_files_travel_in_a_report_and_a_jobresult_and_old_forms_without_them_read() -> None:
    update = ExecutionStateUpdate(
        job_id=JOB, job_master_id="jm", execution_id="e", state=ExecutionState.FINISHED, input_files=("file:/d/t",)
    )
    assert ExecutionStateUpdate.from_dict(update.to_dict()) == update
    assert "input_files" not in ExecutionStateUpdate(JOB, "jm", "e", ExecutionState.RUNNING).to_dict()
    vertex = VertexResult(state=ExecutionState.FINISHED, attempts=1, input_files=("file:/d/t", "s3a://b/k"))
    assert VertexResult.from_dict(vertex.to_dict()) == vertex
    stored_before = {"state": "FINISHED", "attempts": 1, "rows": 3, "result_path": "/r/v"}
    assert VertexResult.from_dict(stored_before).input_files == ()
    assert "input_files" not in VertexResult.from_dict(stored_before).to_dict()
    with pytest.raises(Exception, match="input_files"):
        VertexResult.from_dict({**stored_before, "input_files": ["/d"] * (MAX_INPUT_FILES + 1)})


async def test_the_progress_record_keeps_a_subtasks_input_files_and_reads_records_without_them(tmp_path: Path) -> None:
    election, contender = StandaloneLeaderElection(), Contender()
    election.start(contender)
    await asyncio.sleep(0)  # granted on the loop
    session = contender.session_id
    store = FileProgressStore(tmp_path, election)
    await store.record_subtask(
        session, JOB, "v", 0, SubtaskProgress("/r/v/0", 3, input_files=("file:/d/orders", "s3a://b/k"))
    )
    with open(tmp_path / f"{JOB}.jsonl", "a") as record:  # a record written before input files were kept
        record.write(json.dumps({"vertex_id": "v", "subtask_index": 1, "result_path": "/r/v/1", "rows": 4}) + "\n")
    assert (await store.get(JOB)).finished == {
        "v": {
            0: SubtaskProgress("/r/v/0", 3, input_files=("file:/d/orders", "s3a://b/k")),
            1: SubtaskProgress("/r/v/1", 4),
        }
    }
    with pytest.raises(StoreError, match="input_files"):
        await store.record_subtask(session, JOB, "v", 2, SubtaskProgress(None, None, input_files=["/d"]))  # type: ignore[arg-type]
