"""The master's side of the TaskExecutors: deploy, cancel and release kept results over Celery.

Every method blocks on the broker, for at most a few `broker.timeout`s (a hung broker
included); the master's components call them with `asyncio.to_thread(...)`. The worker's side
of the same app is `sparkdispatch.taskexecutor.app`; what both agree on is
`sparkdispatch.broker.celery_app`.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from celery import Celery
from kombu.exceptions import EncodeError

from sparkdispatch.broker.celery_app import (
    APP_NAME,
    CANCEL_COMMAND,
    DEPLOY_TASK,
    RELEASE_RESULTS_COMMAND,
    configure_celery_app,
    remove_stale_pidbox_messages,
)
from sparkdispatch.config import Configuration
from sparkdispatch.errors import ServiceUnavailable
from sparkdispatch.model.protocol import TaskDeploymentDescriptor

log = logging.getLogger(__name__)

Replies = list[dict[str, Any]]


class SlotAddress(Protocol):
    """Where a deployment goes: an `AllocatedSlot` or anything with its queue and worker host name."""

    @property
    def queue(self) -> str:
        """The TaskExecutor's own Celery queue, where its deployments go."""

    @property
    def hostname(self) -> str:
        """The TaskExecutor's Celery worker host name, where remote-control calls go."""


class CeleryTaskExecutorGateway:
    """`TaskExecutorGateway` of docs/internals.md over a Celery broker."""

    def __init__(self, config: Configuration, *, reply_timeout: float = 2.0) -> None:
        self._config = config
        self._app = Celery(APP_NAME, set_as_current=False)
        configure_celery_app(self._app, config)
        self._reply_timeout = reply_timeout

    def deploy(self, slot: SlotAddress, tdd: TaskDeploymentDescriptor, session_id: str) -> None:
        """Send the task to the slot's TaskExecutor queue; `ServiceUnavailable` if the broker is down or
        did not take it within `broker.timeout`."""
        try:
            self._app.send_task(
                DEPLOY_TASK,
                args=[tdd.to_dict(), session_id],
                queue=slot.queue,
                routing_key=slot.queue,
                ignore_result=True,
            )
        except EncodeError:
            raise  # the deployment itself is bad: no broker would take it
        except Exception as exc:  # kombu raises transport-specific errors
            raise ServiceUnavailable(
                f"cannot send execution {tdd.execution_id} of job {tdd.job_id} to {slot.queue}: {exc}"
            ) from exc
        log.debug("job %s: execution %s sent to %s (session %s)", tdd.job_id, tdd.execution_id, slot.queue, session_id)

    def cancel(self, task_executor_hostname: str, execution_id: str) -> bool:
        """Ask one worker to cancel an execution; True if it answered that it runs it, False if
        it answered that it does not. `ServiceUnavailable` if the broker is down or the worker
        does not answer within the reply timeout."""
        replies = self._broadcast(CANCEL_COMMAND, task_executor_hostname, {"execution_id": execution_id})
        if not replies:
            raise ServiceUnavailable(
                f"TaskExecutor {task_executor_hostname} did not answer the cancellation of "
                f"execution {execution_id} within {self._reply_timeout:g}s"
            )
        return any(bool(body.get("found")) for reply in replies for body in reply.values() if isinstance(body, dict))

    def release_results(self, task_executor_hostname: str, job_id: str, vertex_id: str | None) -> bool:
        """Ask one worker to delete the results it keeps of a job's vertex (None: of the whole job);
        True once it answered, False if it did not within the reply timeout (a broadcast reaches
        only workers listening at that moment). `ServiceUnavailable` if the broker is down."""
        arguments = {"job_id": job_id, "vertex_id": vertex_id or ""}
        return bool(self._broadcast(RELEASE_RESULTS_COMMAND, task_executor_hostname, arguments))

    def close(self) -> None:
        self._app.close()

    def _broadcast(self, command: str, hostname: str, arguments: dict[str, Any]) -> Replies:
        """One worker's replies to a remote-control command (none if it did not answer in time)."""
        try:
            replies: Replies = (
                self._app.control.broadcast(
                    command, arguments=arguments, destination=[hostname], reply=True, timeout=self._reply_timeout
                )
                or []
            )
        except Exception as exc:  # kombu raises transport-specific errors
            raise ServiceUnavailable(f"the Celery broker did not take a remote-control call: {exc}") from exc
        # A dead worker's binding keeps collecting message files on the filesystem broker.
        remove_stale_pidbox_messages(self._config)
        return replies
