"""A JobMaster's calls that leave its loop's state: background tasks it joins at the end,
ResourceManager calls that log instead of raising, and deployments, cancels and releases of kept
results sent to TaskExecutors.

The outcome of each deployment and cancel is told to the ResourceManager (`record_rpc_failure` /
`record_rpc_success`), so a TaskExecutor that keeps failing them while silent is declared lost.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sparkdispatch.jobmaster.deployment import RETRY_INITIAL_S, RETRY_MAX_S, send_deployment
from sparkdispatch.jobmaster.execution import LIVE, Execution
from sparkdispatch.jobmaster.gateways import TaskExecutorGateway
from sparkdispatch.model.protocol import TaskDeploymentDescriptor
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.resourcemanager import AllocatedSlot, ResourceManagerGateway

log = logging.getLogger(__name__)

#: How long a release of kept results is asked again while its TaskExecutor does not answer.
RELEASE_PATIENCE_S = 120.0
#: Releases block on the broker (for seconds while it restarts): threads of their own, so that they
#: never hold up the master's other calls in the loop's default executor (the JobResult's write).
_RELEASE_THREADS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="sparkdispatch-release")


class TaskExecutorCalls:
    """The background calls of one JobMaster (`job_id` under leader session `session_id`)."""

    def __init__(
        self,
        *,
        job_id: str,
        session_id: str,
        gateway: TaskExecutorGateway,
        resource_manager: ResourceManagerGateway,
    ) -> None:
        self._job_id = job_id
        self._session_id = session_id
        self._gateway = gateway
        self._resource_manager = resource_manager
        self._background: set[asyncio.Task[Any]] = set()

    def call_resource_manager(self, method: Callable[..., object], *args: object) -> None:
        """`method(*args)`, a failure logged: a stopped ResourceManager (leadership lost) raises."""
        try:
            method(*args)
        except Exception:
            log.exception(
                "job %s (session %s): ResourceManager call %s failed",
                self._job_id,
                self._session_id,
                getattr(method, "__name__", method),
            )

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run `coroutine` in the background; `join` waits for it, a failure is logged."""
        task = asyncio.get_running_loop().create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background_done)
        return task

    @property
    def busy(self) -> bool:
        """Whether a background call has not ended yet."""
        return bool(self._background)

    async def join(self) -> None:
        """Wait for every background call, those they start included."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    def record_outcome(self, task_executor_id: str, went_through: bool) -> None:
        """Tell the ResourceManager whether a call to the TaskExecutor went through: failures count
        towards its unreachable threshold, which its heartbeats overrule."""
        resource_manager = self._resource_manager
        record = resource_manager.record_rpc_success if went_through else resource_manager.record_rpc_failure
        self.call_resource_manager(record, task_executor_id)

    async def deploy(self, slot: AllocatedSlot, tdd: TaskDeploymentDescriptor, *, wanted: Callable[[], bool]) -> bool:
        """`send_deployment` of `tdd` to `slot`, each try's outcome told to the ResourceManager."""
        outcome = functools.partial(self.record_outcome, slot.task_executor_id)
        return await send_deployment(self._gateway, slot, tdd, self._session_id, wanted=wanted, outcome=outcome)

    def registered_task_executors(self) -> list[str]:
        """The ids of the TaskExecutors registered with the ResourceManager (none if it stopped)."""
        try:
            return [entry.id for entry in self._resource_manager.task_executors()]
        except Exception as exc:  # noqa: BLE001 - a stopped ResourceManager (leadership lost)
            log.warning("job %s (session %s): no TaskExecutors listed: %s", self._job_id, self._session_id, exc)
            return []

    def task_executor_hostname(self, task_executor_id: str) -> str | None:
        """The Celery hostname of a registered TaskExecutor, as the ResourceManager knows it."""
        return self._resource_manager.task_executor_hostname(task_executor_id)

    def stop(self, execution: Execution, *, release: Callable[[Execution], None]) -> asyncio.Task[Any] | None:
        """Cancel `execution` if it is not terminal: on its TaskExecutor if it was deployed there
        (returning that call), its slot then given back by `release`."""
        if execution.state.is_terminal:
            return None
        call = None
        if execution.state in LIVE:
            if execution.state is not ExecutionState.CANCELING:
                execution.transition(ExecutionState.CANCELING)
            slot = execution.slot
            assert slot is not None
            call = self.cancel(slot.task_executor_id, slot.hostname, execution.execution_id)
            release(execution)
        execution.transition(ExecutionState.CANCELED)
        return call

    def cancel(self, task_executor_id: str, hostname: str, execution_id: str) -> asyncio.Task[Any]:
        """Cancel `execution_id` on its TaskExecutor, in the background."""
        return self.spawn(self._cancel_on(task_executor_id, hostname, execution_id))

    async def _cancel_on(self, task_executor_id: str, hostname: str, execution_id: str) -> None:
        try:
            await asyncio.to_thread(self._gateway.cancel, hostname, execution_id)
        except Exception as exc:  # noqa: BLE001 - the task may run on; its reports are refused as stale
            log.warning(
                "job %s (session %s): cancelling %s on %s failed: %s",
                self._job_id,
                self._session_id,
                execution_id,
                hostname,
                exc,
            )
            self.record_outcome(task_executor_id, False)
        else:
            self.record_outcome(task_executor_id, True)

    def release_results(self, task_executor_id: str, vertex_id: str | None) -> None:
        """Ask a TaskExecutor to delete the results it keeps of `vertex_id` (None: of the whole job),
        in the background, again until it answers (a broker restarting, a worker reconnecting) for
        `RELEASE_PATIENCE_S`; one that is not registered (any more) took them with it."""
        self.spawn(self._release_on(task_executor_id, vertex_id))

    async def _release_on(self, task_executor_id: str, vertex_id: str | None) -> None:
        what = "" if vertex_id is None else f" of {vertex_id}"
        pause, deadline = RETRY_INITIAL_S, time.monotonic() + RELEASE_PATIENCE_S
        while (hostname := self.task_executor_hostname(task_executor_id)) is not None:
            try:
                release = functools.partial(self._gateway.release_results, hostname, self._job_id, vertex_id)
                if await asyncio.get_running_loop().run_in_executor(_RELEASE_THREADS, release):
                    return
                problem = "no answer"
            except Exception as exc:  # noqa: BLE001 - the broker's trouble: ask again
                problem = str(exc)
            if time.monotonic() + pause > deadline:
                log.warning(
                    "job %s (session %s): %s did not release the kept results%s (%s); they stay until it restarts",
                    self._job_id,
                    self._session_id,
                    task_executor_id,
                    what,
                    problem,
                )
                return
            await asyncio.sleep(pause)
            pause = min(pause * 2, RETRY_MAX_S)

    def _background_done(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "job %s (session %s): background call failed",
                self._job_id,
                self._session_id,
                exc_info=task.exception(),
            )
