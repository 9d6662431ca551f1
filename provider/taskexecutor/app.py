"""The TaskExecutor's Celery app: the deployment task and the cancel and release commands it serves.

The settings, names and queues it shares with the master's sender are in
`sparkdispatch.broker.celery_app`.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from celery import Celery
from celery.worker.control import control_command

from sparkdispatch.broker.celery_app import (
    APP_NAME,
    CANCEL_COMMAND,
    DEPLOY_TASK,
    RELEASE_RESULTS_COMMAND,
    configure_celery_app,
)
from sparkdispatch.config import Configuration
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.model.protocol import TaskDeploymentDescriptor
from sparkdispatch.taskexecutor import kept_results

if TYPE_CHECKING:
    from sparkdispatch.taskexecutor.main import TaskExecutor


class TaskExecutorApp(Celery):
    """A Celery app that knows the TaskExecutor it runs tasks for."""

    task_executor: TaskExecutor | None = None


def create_celery_app(config: Configuration, *, task_executor: TaskExecutor | None = None) -> TaskExecutorApp:
    """The app of a TaskExecutor, with the deployment task registered."""
    app = TaskExecutorApp(APP_NAME, set_as_current=False)
    configure_celery_app(app, config)
    app.task_executor = task_executor

    @app.task(name=DEPLOY_TASK, bind=True, ignore_result=True, acks_late=False)
    def deploy_task(self: Any, tdd_dict: dict[str, Any], session_id: str) -> str:
        runtime: TaskExecutor | None = self.app.task_executor
        if runtime is None:
            raise RuntimeError(f"{DEPLOY_TASK} runs only in a TaskExecutor")
        tdd = TaskDeploymentDescriptor.from_dict(tdd_dict)
        # fenced: a deployment of a former leader, or sent before this process registered, never runs
        refusal = runtime.connection.admits(tdd, session_id)
        if refusal is not None:
            runtime.connection.refuse(tdd, session_id, refusal)
            return ExecutionState.FAILED.value
        return runtime.runner.run(tdd, session_id).value

    return app


@control_command(name=CANCEL_COMMAND, args=[("execution_id", str)], signature="<execution_id>")
def sparkdispatch_cancel(state: Any, execution_id: str, **_: Any) -> dict[str, Any]:
    """Cancel one execution running on this worker (its Spark job group)."""
    runtime = getattr(state.consumer.app, "task_executor", None)
    if runtime is None:
        return {"error": "not a sparkdispatch TaskExecutor"}
    found = runtime.runner.cancel(execution_id)
    return {"ok": "cancelling" if found else "not running here", "found": found}


@control_command(
    name=RELEASE_RESULTS_COMMAND, args=[("job_id", str), ("vertex_id", str)], signature="<job_id> <vertex_id>"
)
def sparkdispatch_release_results(state: Any, job_id: str, vertex_id: str = "", **_: Any) -> dict[str, Any]:
    """Delete the results this worker keeps of a job's vertex (an empty vertex id: of the whole job),
    in a thread of its own: a large result takes a while, and a cancel must not wait for it."""
    runtime = getattr(state.consumer.app, "task_executor", None)
    if runtime is None:
        return {"error": "not a sparkdispatch TaskExecutor"}
    arguments = (runtime.kept_results_dir, job_id, vertex_id or None)
    threading.Thread(target=kept_results.release, args=arguments, daemon=True, name="release-kept").start()
    return {"ok": "releasing"}
