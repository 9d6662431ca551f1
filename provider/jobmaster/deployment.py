"""How a JobMaster hands an attempt to its TaskExecutor: the descriptor, and sending it until the broker takes it.

A deployment the broker does not take (`ServiceUnavailable`: Redis restarting, or hung past
`broker.timeout`) is no fault of the attempt: it is sent again with backoff, costing the job no
restart, for as long as the JobMaster still wants it (its attempt current and DEPLOYING). A try
that did reach the broker although the call failed is harmless: a TaskExecutor runs an
execution id once and drops a second delivery.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from sparkdispatch.errors import ServiceUnavailable
from sparkdispatch.jobmaster.execution import ExecutionVertex
from sparkdispatch.jobmaster.execution_graph import ExecutionGraph
from sparkdispatch.jobmaster.gateways import TaskExecutorGateway
from sparkdispatch.model.protocol import ChainedTask, TaskDeploymentDescriptor
from sparkdispatch.resourcemanager import AllocatedSlot
from sparkdispatch.storage.results import ResultLayout

log = logging.getLogger(__name__)

#: Pauses between tries of a deployment the broker did not take: doubling from the first to the last.
RETRY_INITIAL_S = 0.1
RETRY_MAX_S = 2.0


def deployment_descriptor(
    graph: ExecutionGraph, ev: ExecutionVertex, slot: AllocatedSlot, *, job_master_id: str, results: ResultLayout
) -> TaskDeploymentDescriptor:
    """The TaskDeploymentDescriptor of `ev`'s current attempt in `slot`."""
    vertex = ev.vertex
    execution = ev.current
    return TaskDeploymentDescriptor(
        job_id=graph.job_id,
        job_master_id=job_master_id,
        execution_id=execution.execution_id,
        vertex_id=vertex.id,
        entrypoint=vertex.entrypoint,
        subtask_index=ev.subtask_index,
        parallelism=vertex.parallelism,
        attempt=execution.attempt,
        allocation_id=slot.allocation_id,
        slot_index=slot.slot_index,
        registration_id=slot.registration_id,
        result_path=results.attempt_path(graph.job_id, vertex.id, ev.subtask_index, execution.execution_id),
        job_name=graph.name,
        inputs={name: graph.partition_paths(name) for name in vertex.inputs},
        input_schemas={name: schema for name in vertex.inputs if (schema := graph.result_schema(name)) is not None},
        params=dict(vertex.params),
        artifacts=tuple(graph.graph.artifacts),
        spark_conf=dict(graph.graph.config),
        environment=graph.graph.environment_of(vertex.id),
        chained=tuple(chained_task(graph, member) for member in graph.chains.chained_into(vertex.id)),
        keep_result=graph.kept.is_kept(vertex.id),
    )


def chained_task(graph: ExecutionGraph, vertex_id: str) -> ChainedTask:
    """What a chain's head's attempt needs to build `vertex_id`'s DataFrame in its own plan."""
    vertex = graph.graph.vertex(vertex_id)
    return ChainedTask(
        vertex_id=vertex.id,
        entrypoint=vertex.entrypoint,
        parallelism=vertex.parallelism,
        inputs={name: graph.partition_paths(name) for name in vertex.inputs},
        input_schemas={name: schema for name in vertex.inputs if (schema := graph.result_schema(name)) is not None},
        params=dict(vertex.params),
    )


async def send_deployment(
    gateway: TaskExecutorGateway,
    slot: AllocatedSlot,
    tdd: TaskDeploymentDescriptor,
    session_id: str,
    *,
    wanted: Callable[[], bool],
    outcome: Callable[[bool], None],
) -> bool:
    """Send `tdd` until the broker takes it (True) or it is no longer `wanted()` (False).

    `outcome(went_through)` hears about every try, for the TaskExecutor's failure count. Errors
    other than `ServiceUnavailable` are not the broker's and are raised at once.
    """
    pause, tries, started = RETRY_INITIAL_S, 0, time.monotonic()
    attempt = f"{tdd.vertex_id}[{tdd.subtask_index}] attempt {tdd.attempt}"
    while True:
        tries += 1
        try:
            await asyncio.to_thread(gateway.deploy, slot, tdd, session_id)
        except ServiceUnavailable as exc:
            outcome(False)
            if not wanted():
                return False
            (log.warning if tries == 1 else log.debug)(
                "job %s: the broker did not take %s for %s (try %d), trying again in %.1fs: %s",
                tdd.job_id,
                attempt,
                slot.task_executor_id,
                tries,
                pause,
                exc,
            )
            await asyncio.sleep(pause)
            pause = min(pause * 2, RETRY_MAX_S)
            if not wanted():
                return False
        except Exception:
            outcome(False)
            raise
        else:
            outcome(True)
            if tries > 1:
                log.info(
                    "job %s: %s sent to %s after %d tries in %.1fs",
                    tdd.job_id,
                    attempt,
                    slot.task_executor_id,
                    tries,
                    time.monotonic() - started,
                )
            return True
