"""Region failover for batch jobs: which subtasks a failure restarts.

Flink's RestartPipelinedRegionFailoverStrategy, for graphs whose exchanges are all BLOCKING,
where each subtask is its own pipelined region. Starting from the failed subtasks, a
breadth-first walk adds

1. the producer of every input partition that can no longer be read (its result was lost, or
   kept on a TaskExecutor and released once read: backtracking), and
2. every consumer of an added subtask, downstream and transitively (a consumer that has not
   started yet needs nothing done; it just waits for the new result).

Finished producers whose partitions are still readable are not added: their results are reused.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from sparkdispatch.model.states import ExecutionState
from sparkdispatch.model.job_result import Failure
from sparkdispatch.jobmaster.execution import ExecutionVertex, SubtaskId
from sparkdispatch.jobmaster.execution_graph import ExecutionGraph
from sparkdispatch.storage.results import unreadable_partitions


def tasks_to_restart(
    graph: ExecutionGraph, failed: Iterable[SubtaskId], *, released: Callable[[ExecutionVertex], bool] = lambda _: False
) -> list[SubtaskId]:
    """The subtasks to restart for a failure of `failed`, in topological order; a producer whose
    result was `released` (kept on a TaskExecutor and deleted once read) counts as lost."""
    queue = deque(failed)
    involved = set(queue)
    while queue:
        subtask_id = queue.popleft()
        for producer_vertex in graph.chain_inputs(graph.head_of(subtask_id.vertex_id)):
            for producer in graph.subtasks(producer_vertex):
                if (_partition_lost(producer) or released(producer)) and producer.id not in involved:
                    involved.add(producer.id)
                    queue.append(producer.id)
        for consumer_vertex in graph.consumers_of(subtask_id.vertex_id):
            for consumer in graph.subtasks(consumer_vertex):
                if consumer.id not in involved:
                    involved.add(consumer.id)
                    queue.append(consumer.id)
    return [ev.id for ev in graph.subtasks() if ev.id in involved]


def _partition_lost(producer: ExecutionVertex) -> bool:
    # A producer still running or waiting will write its partition in due course; only a
    # finished one whose partition is gone must run again.
    return producer.state is ExecutionState.FINISHED and producer.partition_lost


def unreadable_inputs(graph: ExecutionGraph, consumer: ExecutionVertex, failure: Failure) -> list[SubtaskId]:
    """Finished producers whose partitions `consumer`'s failure says it could not read.

    Which failures blame which partition is `sparkdispatch.storage.results.unreadable_partitions`'s call.
    """
    finished = {
        producer.id: producer.current.result_path
        for producer_vertex in graph.chain_inputs(consumer.vertex.id)
        for producer in graph.subtasks(producer_vertex)
        if producer.state is ExecutionState.FINISHED and producer.current.result_path is not None
    }
    return unreadable_partitions(failure, finished)
