"""The vertices chained into an attempt (docs/jobgraph.md, "Result kinds"), in its slot process.

Each chained vertex's function runs once per subtask, in the attempt, with a `ctx` of its own; what
its subtasks return is unioned (by column name, as reading their Parquet partitions together would)
into the DataFrame its consumer in the chain gets as `ctx.inputs[...]`. Nothing is written between
them: the chain's functions build one plan, which runs when the attempt's own function acts on it
(its returned DataFrame is written, or it runs an action itself).

What a chained function prints or logs while it runs goes to its own subtask's log file
(`attempt_logs.chained_log_path`), served as its vertex's log; what Spark runs later in the
attempt's plan logs to the attempt's own.

A chained vertex's rows are counted by one observation on the union of its subtasks' DataFrames
(one per `SUBTASKS_PER_OBSERVATION` of them), so the plan counts them as it runs, in no job of
their own. Each subtask's rows are counted apart by a conditional count on a column of its index,
added before the union and dropped after the observation. One observation per vertex rather than
per subtask, since each is a plan node that ends a compiled stage (docs/internals.md, "Where a
chained task's Connect server CPU goes"). A DataFrame the plan never ran (the consumer did not
read that input) has no count: None, as for a subtask that returned nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from functools import reduce
from typing import TYPE_CHECKING, Any

from sparkdispatch.model.protocol import ChainedTask, TaskDeploymentDescriptor
from sparkdispatch.taskexecutor.task_context import LazyInputs, TaskContext

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Observation
    from pyspark.sql.connect.session import SparkSession

TaskFunction = Callable[[TaskContext], Any]
#: The column that tells a chained vertex's subtasks apart for its observation (dropped after it).
SUBTASK_COLUMN = "__sparkdispatch_subtask"
#: Most subtasks one observation counts: each row is compared with each of its subtasks' indexes.
SUBTASKS_PER_OBSERVATION = 16
#: where a chained subtask's output goes while its function runs: (vertex id, subtask index) → context
OutputOf = Callable[[str, int], AbstractContextManager[None]]


def as_dataframe(result: object) -> DataFrame:
    """A task function's non-None result, which the contract says is a DataFrame."""
    from pyspark.sql import DataFrame

    if not isinstance(result, DataFrame):
        raise TypeError(f"a task function returns a pyspark.sql.DataFrame or None, not {type(result).__name__}")
    return result


class ChainInputs(Mapping[str, "DataFrame | None"]):
    """A function's `ctx.inputs`: the results of its upstream vertices read from their partitions,
    and those chained into the same attempt as the DataFrames built for them, in the order of `names`."""

    def __init__(self, names: tuple[str, ...], read: LazyInputs, built: Mapping[str, DataFrame | None]) -> None:
        self._names = names
        self._read = read
        self._built = built

    def __getitem__(self, vertex_id: str) -> DataFrame | None:
        if vertex_id in self._built:
            return self._built[vertex_id]
        if vertex_id not in self._names:
            raise KeyError(vertex_id)
        return self._read[vertex_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return f"ChainInputs({list(self._names)})"


class ChainedFrames:
    """The DataFrames of the vertices chained into one attempt, built in chain order, and their rows."""

    def __init__(
        self,
        session: SparkSession,
        tdd: TaskDeploymentDescriptor,
        output: OutputOf = lambda *_: nullcontext(),
        before_each: Callable[[], None] = lambda: None,
    ) -> None:
        self._session = session
        self._tdd = tdd
        self._output = output
        self._before_each = before_each  # called right before each function; raises to start none
        self._built: dict[str, DataFrame | None] = {}
        self._observed: dict[str, tuple[tuple[Observation, str] | None, ...]] = {}  # each subtask's counter

    def build(self, load: Callable[[str], TaskFunction]) -> None:
        """Run every chained vertex's function, each subtask's, in the order the deployment lists them."""
        for task in self._tdd.chained:
            self._build(task, load(task.entrypoint))

    def inputs(self, paths: Mapping[str, tuple[str, ...]], schemas: Mapping[str, str]) -> ChainInputs:
        """`ctx.inputs` of a function whose upstream vertices are `paths`' keys."""
        unbuilt = {name: partitions for name, partitions in paths.items() if name not in self._built}
        built = {name: self._built[name] for name in paths if name in self._built}
        return ChainInputs(tuple(paths), LazyInputs(self._session, unbuilt, schemas), built)

    def rows(self) -> dict[str, tuple[int | None, ...]]:
        """Each chained vertex's rows by subtask, as the attempt's plan counted them."""
        return {vertex_id: tuple(_count(c) for c in counters) for vertex_id, counters in self._observed.items()}

    def _build(self, task: ChainedTask, function: TaskFunction) -> None:
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        inputs = self.inputs(task.inputs, task.input_schemas)
        frames: list[DataFrame] = []
        returned: list[int] = []  # the subtask index of each of `frames`
        for index in range(task.parallelism):
            ctx = TaskContext(
                spark=self._session,
                params=dict(task.params),
                subtask_index=index,
                parallelism=task.parallelism,
                job_id=self._tdd.job_id,
                vertex_id=task.vertex_id,
                attempt=self._tdd.attempt,
                inputs=inputs,
            )
            self._before_each()
            with self._output(task.vertex_id, index):
                result = function(ctx)
            if result is None:
                continue
            frames.append(as_dataframe(result))
            returned.append(index)
        counters: list[tuple[Observation, str] | None] = [None] * task.parallelism
        observed: list[DataFrame] = []
        for first in range(0, len(frames), SUBTASKS_PER_OBSERVATION):
            chunk = range(first, min(first + SUBTASKS_PER_OBSERVATION, len(frames)))
            rows = Observation()
            if len(chunk) == 1:
                observed.append(frames[first].observe(rows, F.count(F.lit(1)).alias("rows")))
                counters[returned[first]] = (rows, "rows")
                continue
            tagged = [frames[i].withColumn(SUBTASK_COLUMN, F.lit(i)) for i in chunk]
            counts = [F.count_if(F.col(SUBTASK_COLUMN) == i).alias(f"rows_{i}") for i in chunk]
            union = reduce(lambda a, b: a.unionByName(b), tagged)
            observed.append(union.observe(rows, *counts).drop(SUBTASK_COLUMN))
            for i in chunk:
                counters[returned[i]] = (rows, f"rows_{i}")
        self._observed[task.vertex_id] = tuple(counters)
        self._built[task.vertex_id] = reduce(lambda a, b: a.unionByName(b), observed) if observed else None


def _count(counter: tuple[Observation, str] | None) -> int | None:
    """A subtask's rows from its vertex's observation: None when it returned nothing, or when the
    plan never ran its DataFrame (the observation got no row)."""
    if counter is None:
        return None
    observation, key = counter
    value = observation.get.get(key)  # empty when the plan never ran it
    return None if value is None else int(value)
