"""A real TaskExecutor fences its deployments and unregisters when it stops.

The master side is an aiohttp server in the test process serving the TaskExecutor routes with
the real ResourceManager; the JobMaster's end records the state reports. Deployments go through
the real Celery gateway over the embedded `filesystem://` broker. A task function writes a
marker file, so a refused deployment is seen never to have run user code.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from aiohttp import web

from sparkdispatch.config import Configuration
from sparkdispatch.errors import SparkDispatchError
from sparkdispatch.ha import STANDALONE_SESSION_ID, create_ha_services
from sparkdispatch.jobgraph import ExecutionState
from sparkdispatch.protocol import ExecutionReport, ExecutionStateUpdate, TaskDeploymentDescriptor
from sparkdispatch.resourcemanager import AllocatedSlot, ResourceManager
from sparkdispatch.resourcemanager.celery_gateway import CeleryTaskExecutorGateway
from sparkdispatch.rest.taskexecutor_routes import add_task_executor_routes
from sparkdispatch.settings import ResourceManagerSettings
from sparkdispatch.testing.services import free_port

WAIT_S = 120.0  # a TaskExecutor starts a JVM on a shared 2-core machine
FORMER_SESSION = "99999999-2222-3333-4444-555555555555"


class JobEnd:
    """A JobMaster's end, recorded: allocated slots, state reports, lost TaskExecutors."""

    def __init__(self) -> None:
        self.slots: list[AllocatedSlot] = []
        self.updates: list[ExecutionStateUpdate] = []
        self.lost: list[tuple[str, list[str], str]] = []

    def slots_allocated(self, slots: Sequence[AllocatedSlot]) -> None:
        self.slots.extend(slots)

    def slot_request_failed(self, error: SparkDispatchError) -> None:
        raise AssertionError(f"slot request failed: {error}")

    def task_executor_lost(self, task_executor_id: str, allocation_ids: Sequence[str], reason: str) -> None:
        self.lost.append((task_executor_id, list(allocation_ids), reason))

    def task_executor_heartbeat(self, task_executor_id: str, executions: Sequence[ExecutionReport]) -> None:
        pass

    def update_execution_state(self, update: ExecutionStateUpdate) -> None:
        self.updates.append(update)

    def final(self, execution_id: str) -> ExecutionStateUpdate | None:
        return next((u for u in self.updates if u.execution_id == execution_id and u.state.is_terminal), None)


class Master:
    """The TaskExecutor routes and a ResourceManager, leading under the standalone session."""

    def __init__(self, config: Configuration) -> None:
        self.config = config
        self.session_id = STANDALONE_SESSION_ID
        self.resource_manager = ResourceManager(ResourceManagerSettings.from_config(config), self.session_id)
        self.job = JobEnd()
        self._runner: web.AppRunner | None = None

    def job_master(self, job_id: str) -> JobEnd:
        return self.job

    async def start(self) -> None:
        self.resource_manager.start()
        app = web.Application()
        add_task_executor_routes(app, lambda: self)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.config["rest.port"]).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        self.resource_manager.stop()


async def eventually(predicate: Callable[[], bool], what: str, process: subprocess.Popen[bytes], log: Path,
                     *, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if process.poll() is not None:
            raise AssertionError(f"the TaskExecutor exited with {process.returncode}:\n{log.read_text()[-4000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}:\n{log.read_text()[-4000:]}")
        await asyncio.sleep(0.05)


@pytest.mark.slow
async def test_a_deployment_carrying_a_stale_session_is_refused_and_its_function_never_runs(tmp_path: Path) -> None:
    config = Configuration.from_mapping({
        "rest.port": str(free_port()), "storage.dir": str(tmp_path / "storage"), "broker.url": "filesystem://",
        # a long heartbeat timeout: the TaskExecutor is gone at once only because it unregisters
        "heartbeat.interval": "300ms", "heartbeat.timeout": "20s", "taskexecutor.slots": "1",
        "spark.master": "local[1]", "spark.ui.enabled": "false"})
    markers = tmp_path / "markers"
    markers.mkdir()
    module = f"fenced_{uuid.uuid4().hex[:10]}"
    key = create_ha_services(config).blob_store.put_blocking(textwrap.dedent(f"""
        from pathlib import Path

        def task(ctx):
            Path({str(markers)!r}, ctx.params["marker"]).write_text("ran")
    """).encode(), f"{module}.py")
    master = Master(config)
    await master.start()
    te_id = f"te-{uuid.uuid4().hex[:6]}"
    log = tmp_path / f"{te_id}.log"
    with open(log, "wb") as out:
        te = subprocess.Popen([sys.executable, "-m", "sparkdispatch.taskexecutor", "--id", te_id,
                               *config.to_overrides()], stdout=out, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, start_new_session=True,
                              env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    gateway = CeleryTaskExecutorGateway(config)
    rm = master.resource_manager
    try:
        await eventually(lambda: rm.overview().taskmanagers == 1, "the registration", te, log)
        job_id = uuid.uuid4().hex
        rm.declare_requirements(job_id, 1, master.job)
        await eventually(lambda: len(master.job.slots) == 1, "an allocated slot", te, log)
        slot = master.job.slots[0]

        def tdd(marker: str, **fields: str) -> TaskDeploymentDescriptor:
            execution_id = uuid.uuid4().hex
            return TaskDeploymentDescriptor(
                job_id=job_id, job_master_id=master.session_id, execution_id=execution_id, vertex_id="v",
                entrypoint=f"{module}:task", subtask_index=0, parallelism=1, attempt=0,
                allocation_id=slot.allocation_id, slot_index=slot.slot_index, registration_id=slot.registration_id,
                result_path=f"{config.results_dir}/{job_id}/v/0-{execution_id}", artifacts=(key,),
                params={"marker": marker}, **fields)

        # a slot allocated to an earlier registration (e.g. queued before this process registered)
        old_registration = dataclasses.replace(tdd("old-registration"), registration_id=uuid.uuid4().hex)
        await asyncio.to_thread(gateway.deploy, slot, old_registration, master.session_id)
        await eventually(lambda: master.job.final(old_registration.execution_id) is not None, "the refusal", te, log)
        refused = master.job.final(old_registration.execution_id)
        assert refused is not None and refused.state is ExecutionState.FAILED and refused.failure is not None
        assert refused.failure.cls == "DeploymentRefused" and "registration" in refused.failure.message

        # a former leader's deployment: refused; its report is fenced out as well
        former = dataclasses.replace(tdd("former-session"), job_master_id=FORMER_SESSION)
        await asyncio.to_thread(gateway.deploy, slot, former, FORMER_SESSION)
        await eventually(lambda: f"refusing execution {former.execution_id}" in log.read_text(errors="replace"),
                         "the former leader's deployment to be refused", te, log)

        # the current one runs in the same slot: the function does run when admitted
        current = tdd("current")
        await asyncio.to_thread(gateway.deploy, slot, current, master.session_id)
        await eventually(lambda: master.job.final(current.execution_id) is not None, "the current task", te, log)
        done = master.job.final(current.execution_id)
        assert done is not None and done.state is ExecutionState.FINISHED, done
        assert sorted(p.name for p in markers.iterdir()) == ["current"]
        assert master.job.final(former.execution_id) is None

        # stopping unregisters at once, far within the heartbeat timeout
        te.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        while rm.overview().taskmanagers and time.monotonic() - stopped < 1.0:
            await asyncio.sleep(0.02)
        assert rm.task_executors() == [], log.read_text()[-4000:]
        assert master.job.lost == [(te_id, [slot.allocation_id], "it stopped and unregistered")]
    finally:
        if te.poll() is None:
            try:
                os.killpg(te.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        te.wait(timeout=30)
        gateway.close()
        await master.stop()
