"""Result partitions: where they live, how they are written, read and removed, and when one is lost.

A subtask that returns a DataFrame writes it as Parquet to its attempt's directory,

    <results_dir>/<job_id>/<vertex_id>/<subtask_index>-<execution_id>

on storage every TaskExecutor can reach (a local path, `file://`, `hdfs://`, `s3a://`, ...).
A vertex's result is all of its finished subtasks' partitions read together. These paths are
recorded in the ProgressStore, so a new leader reads the partitions its predecessor's tasks
wrote: the layout must not change.

The master imports this module; pyspark is only imported by the slot processes' calls into it.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sparkdispatch.model.job_result import Failure

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.connect.session import SparkSession as ConnectSession

log = logging.getLogger(__name__)

K = TypeVar("K")

# What a task's failure says when it could not read an input partition (Spark's
# AnalysisException [PATH_NOT_FOUND], Hadoop's FileNotFoundException, ...).
_MISSING_FILE_MARKERS = (
    "PATH_NOT_FOUND",
    "Path does not exist",
    "FileNotFoundException",
    "No such file or directory",
    "PartitionNotFound",
)


@dataclass(frozen=True)
class ResultLayout:
    """The directory tree of result partitions under `results_dir` (a path or a URI Spark can write)."""

    results_dir: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "results_dir", self.results_dir.rstrip("/"))

    @property
    def is_local(self) -> bool:
        """A local path or `file://` URI, which this process can remove itself."""
        return _is_local(self.results_dir)

    def job_dir(self, job_id: str) -> str:
        """All result partitions of one job: `<results_dir>/<job_id>`."""
        return f"{self.results_dir}/{job_id}"

    def vertex_dir(self, job_id: str, vertex_id: str) -> str:
        """A vertex's result (the JobResult's `result_path`): `<results_dir>/<job_id>/<vertex_id>`."""
        return f"{self.job_dir(job_id)}/{vertex_id}"

    def attempt_path(self, job_id: str, vertex_id: str, subtask_index: int, execution_id: str) -> str:
        """The partition one attempt writes: `<vertex_dir>/<subtask_index>-<execution_id>`."""
        return f"{self.vertex_dir(job_id, vertex_id)}/{subtask_index}-{execution_id}"


def job_dir_of(attempt_path: str) -> str:
    """The job's results directory (`ResultLayout.job_dir`) an attempt's partition path lies in."""
    return attempt_path.rstrip("/").rsplit("/", 2)[0]


@dataclass(frozen=True)
class WrittenPartition:
    """What writing a partition observed: its row count, and its schema as Spark's JSON
    (`StructType.json()`, every field nullable, as Parquet gives it back) for its readers."""

    rows: int
    schema: str


# Hadoop settings of a partition's write job (a DataFrameWriter's options reach its Hadoop
# configuration). Each attempt writes a directory of its own that is recorded only once the write
# succeeded, so the `_SUCCESS` marker tells a reader nothing.
_WRITE_OPTIONS = {"mapreduce.fileoutputcommitter.marksuccessfuljobs": "false"}
# On a local filesystem, Hadoop's LocalFileSystem adds a `.crc` file beside every file it writes,
# which no reader of the partition checks; the raw filesystem writes the data alone. A new
# instance for these writes only (not the JVM's cached `file:` filesystem, which others share).
_LOCAL_WRITE_OPTIONS = {"fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem", "fs.file.impl.disable.cache": "true"}


def write_partition(frame: DataFrame, path: str) -> WrittenPartition:
    """Write `frame` as the Parquet partition at `path`, replacing what an earlier try left; its row
    count and schema.

    The count is observed on the write itself (`DataFrame.observe`), so it costs no second job; the
    schema is the plan's (an analysis, no job). No `_SUCCESS` marker, and on a local path no `.crc`
    files. The files are as many as the plan's last stage has non-empty partitions: after a shuffle,
    adaptive execution has already coalesced small ones (`spark.sql.adaptive.*`), and adding a
    shuffle to cut them further would cost a result of any size more than the files do.
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    rows = Observation()
    options = {**_WRITE_OPTIONS, **(_LOCAL_WRITE_OPTIONS if _is_local(path) else {})}
    frame.observe(rows, F.count(F.lit(1)).alias("rows")).write.mode("overwrite").options(**options).parquet(path)
    return WrittenPartition(rows=int(rows.get["rows"]), schema=nullable_schema(frame.schema.json()))


def nullable_schema(schema: str) -> str:
    """A schema JSON (`StructType.json()`) with every field, array element and map value nullable:
    the schema Spark reads back from Parquet it wrote."""

    def loosen(data: Any) -> Any:
        if isinstance(data, dict):
            loosened = {key: loosen(value) for key, value in data.items()}
            for flag in ("nullable", "containsNull", "valueContainsNull"):
                if flag in loosened:
                    loosened[flag] = True
            return loosened
        if isinstance(data, list):
            return [loosen(item) for item in data]
        return data

    return json.dumps(loosen(json.loads(schema)), separators=(",", ":"))


def read_partitions(
    session: SparkSession | ConnectSession, paths: Sequence[str], schema: str | None = None
) -> DataFrame | None:
    """One vertex's result: its partitions as one DataFrame, None when it wrote none.

    With the `schema` its producer reported (`WrittenPartition.schema`), Spark reads without
    inferring it (no job, no footers read up front); without it (progress recorded before schemas
    travelled), Spark infers it as before.
    """
    if not paths:
        return None
    if schema is None:
        return session.read.parquet(*paths)
    from pyspark.sql.types import StructType

    return session.read.schema(StructType.fromJson(json.loads(schema))).parquet(*paths)


def remove_job_results(layout: ResultLayout, job_id: str) -> None:
    """Delete a job's result partitions; remote ones (`hdfs://`, `s3a://`, ...) are left alone.

    Blocking. A missing directory is not an error.
    """
    if not layout.is_local:
        log.info(
            "results of job %s live on %s; leaving them to that filesystem's lifecycle rules",
            job_id,
            layout.results_dir,
        )
        return
    shutil.rmtree(layout.job_dir(job_id).removeprefix("file://"), ignore_errors=True)


def remove_attempt_partition(path: str) -> None:
    """Delete the partition of an attempt whose result no JobMaster took (`ResultLayout.attempt_path`),
    and its vertex and job directories once they are empty: an attempt that ran on after its job
    was cleaned up must not bring the job's directory back. Remote paths are left alone.

    Blocking. A missing partition is not an error.
    """
    if not _is_local(path):
        log.debug("partition %s is remote; leaving it to that filesystem's lifecycle rules", path)
        return
    partition = Path(path.removeprefix("file://"))
    shutil.rmtree(partition, ignore_errors=True)
    for directory in (partition.parent, partition.parent.parent):  # <vertex_id>, then <job_id>
        try:
            directory.rmdir()
        except OSError:  # not empty (other attempts' partitions), or gone already
            return


def _is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def unreadable_partitions(failure: Failure, partitions: Mapping[K, str]) -> list[K]:
    """The keys of `partitions` (key → partition path) that `failure` says could not be read.

    A failure blames a partition when it looks like a missing file (`PATH_NOT_FOUND`,
    `FileNotFoundException`, ...) and names that partition's path; any other failure blames none.
    """
    text = f"{failure.cls}\n{failure.message}\n{failure.traceback}"
    if not any(marker in text for marker in _MISSING_FILE_MARKERS):
        return []
    return [key for key, path in partitions.items() if path and path.rstrip("/") in text]
