"""What a task function sees: its `ctx` (docs/task-contract.md), built in its slot process."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from sparkdispatch.storage.results import read_partitions

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.connect.session import SparkSession


class LazyInputs(Mapping[str, "DataFrame | None"]):
    """Upstream vertex id → its whole result as one DataFrame, read on first access.

    `None` for an upstream vertex whose subtasks returned nothing. A vertex in `schemas` (its
    result's schema JSON, as its producers reported it) is read with that schema, the others with
    the schema Spark infers.
    """

    def __init__(
        self,
        spark: SparkSession,
        paths: Mapping[str, tuple[str, ...]],
        schemas: Mapping[str, str] | None = None,
    ) -> None:
        self._spark = spark
        self._paths = dict(paths)
        self._schemas = dict(schemas or {})
        self._read: dict[str, DataFrame | None] = {}

    def __getitem__(self, vertex_id: str) -> DataFrame | None:
        if vertex_id not in self._read:
            self._read[vertex_id] = read_partitions(self._spark, self._paths[vertex_id], self._schemas.get(vertex_id))
        return self._read[vertex_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)

    def __repr__(self) -> str:
        return f"LazyInputs({sorted(self._paths)})"


class TaskContext:
    """The `ctx` argument of a task function (docs/task-contract.md).

    `spark` is the job's Spark Connect session in this slot process: the RDD API
    (`spark.sparkContext`, `DataFrame.rdd`) does not exist on it.
    """

    def __init__(
        self,
        *,
        spark: SparkSession,
        params: Mapping[str, Any],
        subtask_index: int,
        parallelism: int,
        job_id: str,
        vertex_id: str,
        attempt: int,
        inputs: Mapping[str, DataFrame | None],
    ) -> None:
        self.spark = spark
        self.params = params
        self.subtask_index = subtask_index
        self.parallelism = parallelism
        self.job_id = job_id
        self.vertex_id = vertex_id
        self.attempt = attempt
        self.inputs = inputs

    def __repr__(self) -> str:
        return (
            f"TaskContext(job_id={self.job_id!r}, vertex_id={self.vertex_id!r}, "
            f"subtask={self.subtask_index}/{self.parallelism}, attempt={self.attempt})"
        )
