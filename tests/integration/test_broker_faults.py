"""A real master (in the test process) and a real TaskExecutor against broker trouble.

A deployment lost on the way fails over once the TaskExecutor's heartbeats keep omitting it
(the JobMaster's reconciliation); a Redis restart while a job deploys costs the job no restart
and loses no TaskExecutor; a hung Redis (SIGSTOP) holds no broker call past its timeout.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from sparkdispatch.client import SparkDispatchClient
from sparkdispatch.config import Configuration
from sparkdispatch.errors import ServiceUnavailable
from sparkdispatch.entrypoint.master import Master
from sparkdispatch.model.protocol import TaskDeploymentDescriptor
from sparkdispatch.resourcemanager import AllocatedSlot
from sparkdispatch.resourcemanager.celery_gateway import CeleryTaskExecutorGateway
from sparkdispatch.testing.local_cluster import TaskExecutorProcess, task_executors_registered
from sparkdispatch.testing.services import RedisServer, free_port
from sparkdispatch.testing.waiting import eventually

pytestmark = pytest.mark.slow

TASKS = Path(__file__).with_name("job_tasks.py")
WAIT_S = 120.0  # a TaskExecutor starts a JVM on a shared 2-core machine


class DroppingGateway(CeleryTaskExecutorGateway):
    """The Celery gateway, but the first deployment of `vertex_id` is lost on the way: the broker
    "takes" it and nobody ever gets it (as in a Redis restart after the publish)."""

    def __init__(self, config: Configuration, vertex_id: str) -> None:
        super().__init__(config)
        self.vertex_id = vertex_id
        self.sent: list[tuple[float, TaskDeploymentDescriptor]] = []
        self.dropped: TaskDeploymentDescriptor | None = None
        self._lock = threading.Lock()

    def deploy(self, slot: Any, tdd: TaskDeploymentDescriptor, session_id: str) -> None:
        with self._lock:
            self.sent.append((time.monotonic(), tdd))
            if tdd.vertex_id == self.vertex_id and self.dropped is None:
                self.dropped = tdd
                return
        super().deploy(slot, tdd, session_id)


def master_config(tmp_path: Path, broker_url: str, **extra: str) -> Configuration:
    return Configuration.from_mapping(
        {
            "rest.port": str(free_port()),
            "storage.dir": str(tmp_path / "storage"),
            "broker.url": broker_url,
            "taskexecutor.slots": "1",
            "spark.master": "local[1]",
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "1",
            "rest.execution-result.long-poll": "200ms",
            "taskexecutor.registration.max-backoff": "500ms",
            **extra,
        }
    )


def graph(name: str, key: str, log_dir: Path, *, sleep_s: float, restart: dict[str, Any]) -> dict[str, Any]:
    """numbers (10 rows, after `sleep_s`) → double, each a task of its own (durable results: a
    deployment of each is what the faults hit)."""
    return {
        "name": name,
        "artifacts": [key],
        "restart_strategy": restart,
        "results": "durable",
        "vertices": [
            {
                "id": "numbers",
                "entrypoint": "job_tasks:numbers",
                "parallelism": 1,
                "params": {"log_dir": str(log_dir), "rows": 10, "sleep_s": sleep_s},
            },
            {
                "id": "double",
                "entrypoint": "job_tasks:double",
                "parallelism": 1,
                "inputs": ["numbers"],
                "params": {"log_dir": str(log_dir)},
            },
        ],
    }


async def test_a_deployment_lost_on_the_way_fails_over_and_the_job_finishes(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    config = master_config(
        tmp_path,
        redis_server.url,
        **{"heartbeat.interval": "300ms", "heartbeat.timeout": "3s", "heartbeat.missing-execution-threshold": "3"},
    )
    gateway = DroppingGateway(config, "double")
    master = Master(config, task_executor_gateway=gateway)
    await master.start()
    te = TaskExecutorProcess(config, tmp_path)
    try:
        async with SparkDispatchClient(addresses=[master.address]) as client:
            await task_executors_registered(client, 1, processes=[te], timeout=WAIT_S)
            key = await client.upload_artifact(TASKS)
            job_id = (
                await client.submit(
                    graph(
                        "dropped",
                        key,
                        tmp_path,
                        sleep_s=0,
                        restart={"type": "fixed-delay", "attempts": 1, "delay_s": 0.1},
                    )
                )
            ).job_id
            result = await asyncio.wait_for(client.wait_for_result(job_id, poll_interval=0.2), WAIT_S)
        assert result.status == "FINISHED", result.failure
        assert result.vertices["double"].attempts == 2 and result.vertices["numbers"].attempts == 1
        assert result.vertices["double"].rows == 10
        dropped = gateway.dropped
        assert dropped is not None
        lost_at = next(at for at, tdd in gateway.sent if tdd is dropped)
        again_at = next(at for at, tdd in gateway.sent if tdd.vertex_id == "double" and tdd.attempt == 1)
        # grace (heartbeat.timeout) + a few heartbeats + the restart delay, not a hang
        print(f"dropped deployment failed over and sent again after {again_at - lost_at:.2f}s")
        assert 3.0 <= again_at - lost_at < 3.0 + 10 * 0.3 + 5.0
    finally:
        te.kill()
        await master.stop()


async def test_a_redis_restart_while_a_job_deploys_costs_no_restart_and_no_task_executor(tmp_path: Path) -> None:
    redis = RedisServer()
    redis.start()
    config = master_config(
        tmp_path, redis.url, **{"heartbeat.interval": "500ms", "heartbeat.timeout": "15s", "broker.timeout": "1s"}
    )
    master = Master(config)
    await master.start()
    te = TaskExecutorProcess(config, tmp_path)
    try:
        async with SparkDispatchClient(addresses=[master.address]) as client:
            await task_executors_registered(client, 1, processes=[te], timeout=WAIT_S)
            [before] = await client.taskmanagers()
            key = await client.upload_artifact(TASKS)
            # under no restart: any failure would fail the job
            job_id = (
                await client.submit(graph("redis-restart", key, tmp_path, sleep_s=2, restart={"type": "none"}))
            ).job_id
            await eventually(
                lambda: list(tmp_path.glob("numbers.*.run.*")), "`numbers` to run", processes=[te], timeout=WAIT_S
            )
            # Redis dies while `numbers` runs: `double` is deployed while it is down
            port = redis.port
            redis.stop()
            await asyncio.sleep(5.0)  # the outage itself: longer than broker.timeout, shorter than heartbeat.timeout
            redis = RedisServer(port=port)
            redis.start()
            restarted = time.monotonic()
            result = await asyncio.wait_for(client.wait_for_result(job_id, poll_interval=0.2), WAIT_S)
            assert result.status == "FINISHED", result.failure
            assert {vid: v.attempts for vid, v in result.vertices.items()} == {"numbers": 1, "double": 1}
            # its heartbeats go on after the worker reconnected (Celery 5.6 clears the worker's timer
            # then): past a heartbeat timeout, the TaskExecutor is still there, registered once
            await asyncio.sleep(max(0.0, restarted + 15.0 + 2.0 - time.monotonic()))
            [after] = await client.taskmanagers()
            assert after.id == before.id and after.registered_at == before.registered_at
    finally:
        te.kill()
        await master.stop()
        redis.stop()


def test_broker_calls_end_within_their_timeout_while_redis_hangs() -> None:
    redis = RedisServer()
    redis.start()
    config = Configuration.from_mapping({"broker.url": redis.url, "broker.timeout": "1s"})
    gateway = CeleryTaskExecutorGateway(config)
    slot = AllocatedSlot("alloc-1", "te-1", 0, "sparkdispatch.te.te-1", "te-1@host", "reg-1")
    tdd = TaskDeploymentDescriptor(
        job_id=uuid.uuid4().hex,
        job_master_id="s",
        execution_id=uuid.uuid4().hex,
        vertex_id="v",
        entrypoint="m:f",
        subtask_index=0,
        parallelism=1,
        attempt=0,
        allocation_id="alloc-1",
        slot_index=0,
        result_path="/r",
    )
    try:
        gateway.deploy(slot, tdd, "s")  # the connections exist: a hang, not a refusal, comes next
        redis.pause()
        for call in (lambda: gateway.deploy(slot, tdd, "s"), lambda: gateway.cancel("te-1@host", "e-1")):
            started = time.monotonic()
            with pytest.raises(ServiceUnavailable):
                call()
            assert time.monotonic() - started < 4.0
        redis.resume()
        gateway.deploy(slot, tdd, "s")
    finally:
        gateway.close()
        redis.stop()
