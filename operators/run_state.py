"""Why Airflow stopped a vertex task: asked of Airflow itself, from the task or from its trigger.

Airflow calls a deferred task's trigger `on_kill` (3.3 and later) and a running task's `on_kill`
for a clear, a mark success or failed, a timeout of the task and a timeout of its DAG run alike.
Only the DAG run's timeout leaves the task instance SKIPPED (a clear leaves it without a state,
a mark leaves it SUCCESS or FAILED), so that state tells the one stop that ends the whole job
from those that end one task.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)

SKIPPED = "skipped"


@dataclass(frozen=True)
class TaskInstanceRef:
    """Which task instance: its DAG, run, task and map index (-1 when not mapped)."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1


def stopped_by_run_timeout(ref: TaskInstanceRef) -> bool:
    """Whether the task instance was SKIPPED, as its DAG run's timeout leaves the tasks it stops.

    Asked through the task SDK's supervisor (a task's, or the triggerer's); False when it cannot
    be asked (logged). Blocking: a trigger calls it in a thread.
    """
    try:
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

        states = RuntimeTaskInstance.get_task_states(
            dag_id=ref.dag_id,
            run_ids=[ref.run_id],
            task_ids=[ref.task_id],
            map_index=None if ref.map_index < 0 else ref.map_index,
        )
    except Exception as exc:  # noqa: BLE001 - no supervisor (a test), or an older Airflow: not a timeout
        log.info("the state of %s could not be asked: %s", ref, exc)
        return False
    key = ref.task_id if ref.map_index < 0 else f"{ref.task_id}_{ref.map_index}"
    return bool(states.get(ref.run_id, {}).get(key) == SKIPPED)
