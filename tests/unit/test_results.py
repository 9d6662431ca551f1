"""Result partitions: the layout, writing and reading on the session's local Spark, removal, lost ones."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from sparkdispatch.model.job_result import Failure
from sparkdispatch.storage.results import (
    ResultLayout,
    nullable_schema,
    read_partitions,
    remove_attempt_partition,
    remove_job_results,
    unreadable_partitions,
    write_partition,
)

JOB_ID = "ef" * 16


def test_the_layout_is_results_dir_job_vertex_subtask_execution() -> None:
    layout = ResultLayout("/data/results")
    assert layout.job_dir(JOB_ID) == f"/data/results/{JOB_ID}"
    assert layout.vertex_dir(JOB_ID, "clean") == f"/data/results/{JOB_ID}/clean"
    assert layout.attempt_path(JOB_ID, "clean", 1, "e" * 32) == f"/data/results/{JOB_ID}/clean/1-{'e' * 32}"


def test_trailing_slashes_and_uris_keep_the_same_paths() -> None:
    assert ResultLayout("/data/results//") == ResultLayout("/data/results")
    assert ResultLayout("s3a://bucket/results/").vertex_dir(JOB_ID, "v") == f"s3a://bucket/results/{JOB_ID}/v"
    assert ResultLayout("/data").is_local and ResultLayout("file:///data").is_local
    assert not ResultLayout("hdfs://nn:8020/results").is_local


def test_the_master_can_import_it_without_pyspark() -> None:
    probe = "import sys, sparkdispatch.storage.results; assert 'pyspark' not in sys.modules, 'pyspark imported'"
    subprocess.run([sys.executable, "-c", probe], check=True)


def test_a_partition_is_written_counted_and_read_back_with_its_siblings(spark: Any, tmp_path: Path) -> None:
    layout = ResultLayout(str(tmp_path))
    first, second = (layout.attempt_path(JOB_ID, "v", i, f"x{i}") for i in (0, 1))
    assert write_partition(spark.range(0, 10), first).rows == 10
    assert write_partition(spark.range(10, 13), second).rows == 3
    assert write_partition(spark.range(0, 4), first).rows == 4  # a retry replaces what was there

    whole = read_partitions(spark, (first, second))
    assert whole is not None and sorted(r.id for r in whole.collect()) == [0, 1, 2, 3, 10, 11, 12]
    assert read_partitions(spark, ()) is None


def test_removal_deletes_one_local_job_and_tolerates_a_missing_one(tmp_path: Path) -> None:
    for job_id in (JOB_ID, "other"):
        (tmp_path / job_id / "v" / "0-x").mkdir(parents=True)
    remove_job_results(ResultLayout(f"file://{tmp_path}/"), JOB_ID)
    assert not (tmp_path / JOB_ID).exists() and (tmp_path / "other" / "v" / "0-x").is_dir()
    remove_job_results(ResultLayout(str(tmp_path)), JOB_ID)  # already gone: nothing to do


def test_removal_leaves_remote_results_to_their_filesystem(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="sparkdispatch.storage.results"):
        remove_job_results(ResultLayout("s3a://bucket/results"), JOB_ID)
    assert f"results of job {JOB_ID} live on s3a://bucket/results" in caplog.text


def test_an_attempts_partition_is_removed_with_its_directories_once_they_are_empty(tmp_path: Path) -> None:
    layout = ResultLayout(f"file://{tmp_path}")
    first, second = (layout.attempt_path(JOB_ID, "v", i, f"e{i}") for i in (0, 1))
    for path in (first, second):
        Path(path.removeprefix("file://"), "part-0.parquet").parent.mkdir(parents=True)
        Path(path.removeprefix("file://"), "part-0.parquet").write_bytes(b"x")
    remove_attempt_partition(first)
    assert not Path(first.removeprefix("file://")).exists()
    assert Path(second.removeprefix("file://"), "part-0.parquet").is_file()  # its sibling stays, and their directory
    remove_attempt_partition(second)
    assert not (tmp_path / JOB_ID).exists()  # the last one takes the empty vertex and job directories along
    assert tmp_path.is_dir()
    remove_attempt_partition(second)  # already gone: nothing to do
    remove_attempt_partition("s3a://bucket/results/j/v/0-e")  # remote: left to its filesystem


def test_a_missing_file_failure_names_the_partitions_it_could_not_read() -> None:
    partitions = {"a0": f"/r/{JOB_ID}/a/0-x", "a1": f"/r/{JOB_ID}/a/1-y", "b0": f"/r/{JOB_ID}/b/0-z"}
    failure = Failure("AnalysisException", f"[PATH_NOT_FOUND] Path does not exist: file:{partitions['a1']}.", "")
    assert unreadable_partitions(failure, partitions) == ["a1"]
    in_traceback = Failure(
        "Py4JJavaError",
        "An error occurred",
        f"java.io.FileNotFoundException: File {partitions['b0']}/part-0.parquet does not exist",
    )
    assert unreadable_partitions(in_traceback, partitions) == ["b0"]


def test_other_failures_blame_no_partition() -> None:
    partitions = {"a0": f"/r/{JOB_ID}/a/0-x"}
    assert unreadable_partitions(Failure("ValueError", f"bad schema in {partitions['a0']}", ""), partitions) == []
    assert unreadable_partitions(Failure("FileNotFoundException", "/elsewhere/x", ""), partitions) == []


def test_sparks_own_error_for_a_lost_partition_is_recognised(spark: Any, tmp_path: Path) -> None:
    from pyspark.errors import AnalysisException

    layout = ResultLayout(str(tmp_path))
    kept, lost = layout.attempt_path(JOB_ID, "a", 0, "x"), layout.attempt_path(JOB_ID, "a", 1, "y")
    write_partition(spark.range(3), kept)
    with pytest.raises(AnalysisException) as raised:
        read_partitions(spark, (kept, lost))
    failure = Failure.from_exception(raised.value)
    assert unreadable_partitions(failure, {"a0": kept, "a1": lost}) == ["a1"]


def test_a_partition_holds_only_its_data_files_and_reports_the_schema_spark_reads_back(
    spark: Any, tmp_path: Path
) -> None:
    path = ResultLayout(str(tmp_path)).attempt_path(JOB_ID, "v", 0, "x")
    frame = spark.range(5).selectExpr("id", "array(id) as a", "map('k', id) as m", "named_struct('n', id) as s")
    written = write_partition(frame, path)
    files = sorted(p.name for p in Path(path).iterdir())
    assert files and all(name.startswith("part-") and name.endswith(".parquet") for name in files), files
    assert json.loads(written.schema) == json.loads(spark.read.parquet(path).schema.json())


def test_a_read_with_the_producers_schema_runs_no_job_and_one_without_infers_it(spark: Any, tmp_path: Path) -> None:
    path = ResultLayout(str(tmp_path)).attempt_path(JOB_ID, "v", 0, "x")
    written = write_partition(spark.range(5).selectExpr("id", "cast(id as string) as name"), path)
    tracker = spark.sparkContext.statusTracker()

    def jobs_of_a_read(schema: str | None) -> int:
        """The Spark jobs that reading the partition and resolving its columns ran."""
        group = f"read-{uuid.uuid4().hex}"
        spark.sparkContext.setJobGroup(group, "a read of a result")
        try:
            frame = read_partitions(spark, (path,), schema)
            assert frame is not None and frame.columns == ["id", "name"]
        finally:
            spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
        return len(tracker.getJobIdsForGroup(group))

    given, inferred = jobs_of_a_read(written.schema), jobs_of_a_read(None)
    assert (given, inferred >= 1) == (0, True)
    frame = read_partitions(spark, (path,), written.schema)
    assert frame is not None and sorted(r.name for r in frame.collect()) == ["0", "1", "2", "3", "4"]


def test_a_schema_is_made_nullable_throughout_as_parquet_reads_it_back() -> None:
    strict = {
        "type": "struct",
        "fields": [
            {"name": "a", "type": {"type": "array", "elementType": "long", "containsNull": False}, "nullable": False},
            {
                "name": "m",
                "type": {"type": "map", "keyType": "string", "valueType": "long", "valueContainsNull": False},
                "nullable": False,
            },
        ],
    }
    loose = json.loads(nullable_schema(json.dumps(strict)))
    assert [f["nullable"] for f in loose["fields"]] == [True, True]
    assert loose["fields"][0]["type"]["containsNull"] and loose["fields"][1]["type"]["valueContainsNull"]
