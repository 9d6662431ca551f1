"""A real TaskExecutor fences its deployments and unregisters when it stops.

The master side is an aiohttp server in the test process serving the TaskExecutor routes with
the real ResourceManager (`MasterForTaskExecutors`); the JobMaster's end records the state
reports. Deployments go through the real Celery gateway over the embedded `filesystem://`
broker. A task function writes a marker file, so a refused deployment is seen never to have run
user code.
"""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

from sparkdispatch.config import Configuration
from sparkdispatch.ha import create_ha_services
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.model.protocol import TaskDeploymentDescriptor
from sparkdispatch.resourcemanager.celery_gateway import CeleryTaskExecutorGateway
from sparkdispatch.testing.local_cluster import TaskExecutorProcess
from sparkdispatch.testing.master import MasterForTaskExecutors
from sparkdispatch.testing.services import free_port
from sparkdispatch.testing.waiting import eventually

WAIT_S = 120.0  # a TaskExecutor starts a JVM on a shared 2-core machine
FORMER_SESSION = "99999999-2222-3333-4444-555555555555"


@pytest.mark.slow
async def test_a_deployment_carrying_a_stale_session_is_refused_and_its_function_never_runs(tmp_path: Path) -> None:
    config = Configuration.from_mapping(
        {
            "rest.port": str(free_port()),
            "storage.dir": str(tmp_path / "storage"),
            "broker.url": "filesystem://",
            # a long heartbeat timeout: the TaskExecutor is gone at once only because it unregisters
            "heartbeat.interval": "300ms",
            "heartbeat.timeout": "20s",
            "taskexecutor.slots": "1",
            "spark.master": "local[1]",
            "spark.ui.enabled": "false",
        }
    )
    markers = tmp_path / "markers"
    markers.mkdir()
    module = f"fenced_{uuid.uuid4().hex[:10]}"
    key = create_ha_services(config).blob_store.put_blocking(
        textwrap.dedent(f"""
        from pathlib import Path

        def task(ctx):
            Path({str(markers)!r}, ctx.params["marker"]).write_text("ran")
    """).encode(),
        f"{module}.py",
    )
    master = MasterForTaskExecutors(config)
    await master.start()
    te = TaskExecutorProcess(config, tmp_path)
    gateway = CeleryTaskExecutorGateway(config)
    rm = master.resource_manager

    try:
        await eventually(lambda: rm.overview().taskmanagers == 1, "the registration", processes=[te], timeout=WAIT_S)
        job_id = uuid.uuid4().hex
        rm.declare_requirements(job_id, 1, master.jobs)
        await eventually(lambda: len(master.jobs.slots) == 1, "an allocated slot", processes=[te], timeout=WAIT_S)
        slot = master.jobs.slots[0]

        def tdd(marker: str, **fields: Any) -> TaskDeploymentDescriptor:
            execution_id = uuid.uuid4().hex
            return TaskDeploymentDescriptor(
                job_id=job_id,
                job_master_id=master.session_id,
                execution_id=execution_id,
                vertex_id="v",
                entrypoint=f"{module}:task",
                subtask_index=0,
                parallelism=1,
                attempt=0,
                allocation_id=slot.allocation_id,
                slot_index=slot.slot_index,
                registration_id=slot.registration_id,
                result_path=f"{config.results_dir}/{job_id}/v/0-{execution_id}",
                artifacts=(key,),
                params={"marker": marker},
                **fields,
            )

        # a slot allocated to an earlier registration (e.g. queued before this process registered)
        old_registration = dataclasses.replace(tdd("old-registration"), registration_id=uuid.uuid4().hex)
        await asyncio.to_thread(gateway.deploy, slot, old_registration, master.session_id)
        await eventually(
            lambda: master.jobs.final(old_registration.execution_id) is not None,
            "the refusal",
            processes=[te],
            timeout=WAIT_S,
        )
        refused = master.jobs.final(old_registration.execution_id)
        assert refused is not None and refused.state is ExecutionState.FAILED and refused.failure is not None
        assert refused.failure.cls == "DeploymentRefused" and "registration" in refused.failure.message

        # a former leader's deployment: refused; its report is fenced out as well
        former = dataclasses.replace(tdd("former-session"), job_master_id=FORMER_SESSION)
        await asyncio.to_thread(gateway.deploy, slot, former, FORMER_SESSION)
        await eventually(
            lambda: f"refusing execution {former.execution_id}" in te.log.read_text(errors="replace"),
            "the former leader's deployment to be refused",
            processes=[te],
            timeout=WAIT_S,
        )

        # the current one runs in the same slot: the function does run when admitted
        current = tdd("current")
        await asyncio.to_thread(gateway.deploy, slot, current, master.session_id)
        await eventually(
            lambda: master.jobs.final(current.execution_id) is not None,
            "the current task",
            processes=[te],
            timeout=WAIT_S,
        )
        done = master.jobs.final(current.execution_id)
        assert done is not None and done.state is ExecutionState.FINISHED, done
        assert sorted(p.name for p in markers.iterdir()) == ["current"]
        assert master.jobs.final(former.execution_id) is None

        # stopping unregisters at once, far within the heartbeat timeout
        te.process.send_signal(signal.SIGTERM)
        # (the wait ends well before heartbeat.timeout, 20 s, could drop it)
        await eventually(lambda: not rm.overview().taskmanagers, "the TaskExecutor to unregister", timeout=10)
        assert rm.task_executors() == [], te.log_tail()
        assert master.jobs.lost == [(te.id, [slot.allocation_id], "it stopped and unregistered")]
    finally:
        te.kill()
        gateway.close()
        await master.stop()
