"""TaskExecutors as real Celery worker processes with real Spark, against a real ResourceManager.

The master side is an aiohttp server in the test process serving the TaskExecutor routes with
the real ResourceManager (`MasterForTaskExecutors`); the JobMaster's end of the state reports
is its `ExecutionLog`, which records them. Deployments and cancellations go through the real
Celery gateway.
"""

from __future__ import annotations

import asyncio
import socket
import textwrap
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sparkdispatch.config import Configuration
from sparkdispatch.errors import FencingTokenMismatch
from sparkdispatch.ha import STANDALONE_SESSION_ID, create_ha_services
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.model.protocol import SlotReport, TaskDeploymentDescriptor, TaskExecutorRegistration
from sparkdispatch.resourcemanager import AllocatedSlot
from sparkdispatch.resourcemanager.celery_gateway import CeleryTaskExecutorGateway
from sparkdispatch.rest.taskexecutor_routes import SESSION_HEADER
from sparkdispatch.taskexecutor.master_client import MasterClient
from sparkdispatch.testing.local_cluster import TaskExecutorProcess
from sparkdispatch.testing.master import MasterForTaskExecutors
from sparkdispatch.testing.services import RedisServer, free_port
from sparkdispatch.testing.waiting import eventually

WAIT_S = 90.0  # generous: TaskExecutors start a JVM each on a 2-core machine


def cluster_config(tmp_path: Path, broker_url: str, **extra: str) -> Configuration:
    return Configuration.from_mapping(
        {
            "rest.port": str(free_port()),
            "storage.dir": str(tmp_path / "storage"),
            "broker.url": broker_url,
            "heartbeat.interval": "300ms",
            "heartbeat.timeout": "2s",
            "taskexecutor.slots": "2",
            "taskexecutor.registration.max-backoff": "500ms",
            "spark.master": "local[2]",
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            **extra,
        }
    )


def user_code(config: Configuration, source: str) -> tuple[str, str]:
    """A uniquely named user module stored in the cluster's blob store: (module, blob key)."""
    module = f"te_tasks_{uuid.uuid4().hex[:10]}"
    store = create_ha_services(config).blob_store
    return module, store.put_blocking(textwrap.dedent(source).encode(), f"{module}.py")


def deployment(
    config: Configuration,
    slot: AllocatedSlot,
    job_id: str,
    vertex_id: str,
    entrypoint: str,
    artifact: str,
    **fields: Any,
) -> TaskDeploymentDescriptor:
    execution_id = uuid.uuid4().hex
    return TaskDeploymentDescriptor(
        job_id=job_id,
        job_master_id="jm-1",
        execution_id=execution_id,
        vertex_id=vertex_id,
        entrypoint=entrypoint,
        subtask_index=0,
        parallelism=1,
        attempt=0,
        allocation_id=slot.allocation_id,
        slot_index=slot.slot_index,
        registration_id=slot.registration_id,
        result_path=f"{config.results_dir}/{job_id}/{vertex_id}/0-{execution_id}",
        artifacts=(artifact,),
        **fields,
    )


async def scrape(port: int) -> dict[str, float]:
    """A TaskExecutor's /metrics, parsed by prometheus_client: `name{label=value,...}` -> value
    (the `taskexecutor` label left out)."""
    from prometheus_client.parser import text_string_to_metric_families

    status, text = await asyncio.to_thread(http_text, f"http://127.0.0.1:{port}/metrics")
    assert status == 200, text
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()) if k != "taskexecutor")
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples


def http_text(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return answer.status, answer.read().decode()


async def start_cluster(
    config: Configuration, tmp_path: Path, count: int
) -> tuple[MasterForTaskExecutors, list[TaskExecutorProcess]]:
    master = MasterForTaskExecutors(config)
    await master.start()
    processes = [
        TaskExecutorProcess(config, tmp_path, task_executor_id=f"te{index}-{uuid.uuid4().hex[:6]}")
        for index in range(count)
    ]
    return master, processes


@pytest.mark.slow
async def test_two_taskexecutors_run_a_pipeline_and_a_killed_one_vanishes(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    config = cluster_config(tmp_path, redis_server.url)
    master, tes = await start_cluster(config, tmp_path, 2)
    gateway = CeleryTaskExecutorGateway(config)
    try:
        rm = master.resource_manager
        await eventually(lambda: rm.overview().taskmanagers == 2, "two registrations", processes=tes, timeout=WAIT_S)
        assert (rm.overview().slots_total, rm.overview().slots_available) == (4, 4)
        assert {e.id for e in rm.task_executors()} == {te.id for te in tes}
        for te in tes:  # the Celery worker answers on its nodename (silence would raise)
            assert not await asyncio.to_thread(gateway.cancel, f"{te.id}@{socket.gethostname()}", uuid.uuid4().hex)

        job_id = uuid.uuid4().hex
        rm.declare_requirements(job_id, 4, master.jobs)
        await eventually(lambda: len(master.jobs.slots) == 4, "four allocated slots", timeout=WAIT_S)
        slot_on = {te.id: next(s for s in master.jobs.slots if s.task_executor_id == te.id) for te in tes}
        module, key = user_code(
            config,
            """
            def extract(ctx):
                return ctx.spark.range(0, 10).withColumn("app", __import__("pyspark.sql.functions").sql.functions.lit(
                    ctx.spark.conf.get("spark.app.id")))
            def clean(ctx):
                return ctx.inputs["extract"].where("id >= 5")
        """,
        )

        upstream = deployment(config, slot_on[tes[0].id], job_id, "extract", f"{module}:extract", key)
        await asyncio.to_thread(gateway.deploy, slot_on[tes[0].id], upstream, master.session_id)
        await eventually(
            lambda: master.jobs.final(upstream.execution_id) is not None,
            "the upstream task",
            processes=tes,
            timeout=WAIT_S,
        )
        done = master.jobs.final(upstream.execution_id)
        assert done is not None and done.state is ExecutionState.FINISHED, done
        assert (done.rows, done.result_path, done.task_executor_id) == (10, upstream.result_path, tes[0].id)
        # DEPLOYING is the JobMaster's own; the others arrive in order, the terminal one last
        assert master.jobs.states(upstream.execution_id) == [
            ExecutionState.INITIALIZING,
            ExecutionState.RUNNING,
            ExecutionState.FINISHED,
        ]

        downstream = deployment(
            config,
            slot_on[tes[1].id],
            job_id,
            "clean",
            f"{module}:clean",
            key,
            inputs={"extract": (upstream.result_path,)},
        )
        await asyncio.to_thread(gateway.deploy, slot_on[tes[1].id], downstream, master.session_id)
        await eventually(
            lambda: master.jobs.final(downstream.execution_id) is not None,
            "the downstream task",
            processes=tes,
            timeout=WAIT_S,
        )
        done = master.jobs.final(downstream.execution_id)
        assert done is not None and done.state is ExecutionState.FINISHED, done
        assert (done.rows, done.task_executor_id) == (5, tes[1].id)

        # SIGKILL one TaskExecutor: it times out, its slots vanish, the job hears which it lost
        victim, survivor = tes
        victim.kill()
        await eventually(
            lambda: rm.overview().taskmanagers == 1,
            "the killed TaskExecutor to be dropped",
            processes=[survivor],
            timeout=WAIT_S,
        )
        assert (rm.overview().slots_total, [e.id for e in rm.task_executors()]) == (2, [survivor.id])
        [(lost_id, allocations, reason)] = master.jobs.lost
        assert lost_id == victim.id and set(allocations) == {
            s.allocation_id for s in master.jobs.slots if s.task_executor_id == victim.id
        }
        assert "heartbeat" in reason
    finally:
        for te in tes:
            te.kill()
        gateway.close()
        await master.stop()


async def test_registration_with_a_stale_session_is_refused(tmp_path: Path) -> None:
    config = cluster_config(tmp_path, "redis://127.0.0.1:1/0")
    master = MasterForTaskExecutors(config, session_id=str(uuid.uuid4()))
    await master.start()
    client = MasterClient(config)
    try:
        with pytest.raises(FencingTokenMismatch, match="fencing token mismatch"):
            await asyncio.to_thread(
                client.register,
                config.rest_url,
                STANDALONE_SESSION_ID,
                registration("te-stale"),
            )
        async with aiohttp.ClientSession() as http:
            async with http.post(
                f"{config.rest_url}/taskexecutors", headers={SESSION_HEADER: "stale"}, json={"task_executor_id": "x"}
            ) as response:
                assert response.status == 409
                assert "fencing token mismatch" in (await response.json())["errors"][0]
            # the right session but a bad body: 400 naming the field, nothing registered
            async with http.post(
                f"{config.rest_url}/v1/taskexecutors",
                headers={SESSION_HEADER: master.session_id},
                json={"task_executor_id": "x", "hostname": "h", "queue": "q", "slots": 0},
            ) as response:
                assert response.status == 400
                assert "slots" in " ".join((await response.json())["errors"])
        assert master.resource_manager.overview().taskmanagers == 0

        ack = await asyncio.to_thread(
            client.register,
            config.rest_url,
            master.session_id,
            registration("te-ok"),
        )
        assert ack.resource_manager_id == master.resource_manager.resource_manager_id
        assert (ack.heartbeat_interval_s, ack.heartbeat_timeout_s) == (0.3, 2.0)
        assert master.resource_manager.overview().taskmanagers == 1
    finally:
        client.close()
        await master.stop()


@pytest.mark.slow
async def test_cancelling_one_slots_task_leaves_the_other_slot_running(tmp_path: Path) -> None:
    # Over the embedded `filesystem://` broker: remote control works there too.
    metrics_port = free_port()
    config = cluster_config(tmp_path, "filesystem://", **{"taskexecutor.metrics.port": str(metrics_port)})
    master, [te] = await start_cluster(config, tmp_path, 1)
    gateway = CeleryTaskExecutorGateway(config)
    try:
        rm = master.resource_manager
        await eventually(lambda: rm.overview().taskmanagers == 1, "the registration", processes=[te], timeout=WAIT_S)
        job_id = uuid.uuid4().hex
        rm.declare_requirements(job_id, 2, master.jobs)
        await eventually(lambda: len(master.jobs.slots) == 2, "two allocated slots", timeout=WAIT_S)
        module, key = user_code(
            config,
            """
            import time

            from pyspark.sql import functions as F

            def slow(_):
                for _ in range(1200):  # two minutes unless cancelled
                    time.sleep(0.1)
                return 1

            def short(x):
                time.sleep(0.5)
                return x

            def long_task(ctx):
                ctx.spark.range(1).select(F.udf(slow, "long")("id")).collect()
                return ctx.spark.range(1)

            def short_task(ctx):
                return ctx.spark.range(len(ctx.spark.range(0, 4, numPartitions=1).select(F.udf(short, "long")("id"))
                                           .collect()))
        """,
        )
        first, second = master.jobs.slots
        long_tdd = deployment(config, first, job_id, "long", f"{module}:long_task", key)
        short_tdd = deployment(config, second, job_id, "short", f"{module}:short_task", key)
        await asyncio.to_thread(gateway.deploy, first, long_tdd, master.session_id)
        await eventually(
            lambda: ExecutionState.RUNNING in master.jobs.states(long_tdd.execution_id),
            "the long task to run",
            processes=[te],
            timeout=WAIT_S,
        )
        await asyncio.to_thread(gateway.deploy, second, short_tdd, master.session_id)
        await eventually(
            lambda: ExecutionState.RUNNING in master.jobs.states(short_tdd.execution_id),
            "the short task to run",
            processes=[te],
            timeout=WAIT_S,
        )
        # the heartbeat shows both slots busy with this job
        await eventually(
            lambda: rm.overview().slots_available == 0 and len(rm.task_executors()[0].executions) == 2,
            "both executions in a heartbeat",
            processes=[te],
            timeout=WAIT_S,
        )
        busy = await scrape(metrics_port)
        assert (
            busy["sparkdispatch_taskexecutor_slots"],
            busy["sparkdispatch_taskexecutor_slots_busy"],
            busy["sparkdispatch_taskexecutor_connect_server_up"],
        ) == (2, 2, 1), busy

        assert await asyncio.to_thread(gateway.cancel, first.hostname, long_tdd.execution_id)

        await eventually(
            lambda: master.jobs.final(long_tdd.execution_id) is not None,
            "the cancellation",
            processes=[te],
            timeout=WAIT_S,
        )
        await eventually(
            lambda: master.jobs.final(short_tdd.execution_id) is not None,
            "the short task",
            processes=[te],
            timeout=WAIT_S,
        )
        assert master.jobs.final(long_tdd.execution_id).state is ExecutionState.CANCELED  # type: ignore[union-attr]
        short_done = master.jobs.final(short_tdd.execution_id)
        assert short_done is not None and (short_done.state, short_done.rows) == (ExecutionState.FINISHED, 4)
        assert not await asyncio.to_thread(gateway.cancel, first.hostname, long_tdd.execution_id)
        await eventually(
            lambda: rm.task_executors()[0].executions == (),
            "both slots free in a heartbeat",
            processes=[te],
            timeout=WAIT_S,
        )
        after = await scrape(metrics_port)
        assert after["sparkdispatch_taskexecutor_slots_busy"] == 0
        assert (
            after["sparkdispatch_taskexecutor_attempts_total{state=CANCELED}"],
            after["sparkdispatch_taskexecutor_attempts_total{state=FINISHED}"],
        ) == (1, 1), after
        assert after["sparkdispatch_taskexecutor_connect_server_restarts_total"] == 0
    finally:
        te.kill()
        gateway.close()
        await master.stop()


@pytest.mark.slow
async def test_a_taskexecutor_survives_its_resource_manager_restarting(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    config = cluster_config(tmp_path, redis_server.url)
    master, [te] = await start_cluster(config, tmp_path, 1)
    gateway = CeleryTaskExecutorGateway(config)
    try:
        await eventually(
            lambda: master.resource_manager.overview().taskmanagers == 1,
            "the registration",
            processes=[te],
            timeout=WAIT_S,
        )
        job_id = uuid.uuid4().hex
        master.resource_manager.declare_requirements(job_id, 1, master.jobs)
        await eventually(lambda: len(master.jobs.slots) == 1, "an allocated slot", timeout=WAIT_S)
        module, key = user_code(
            config,
            """
            import time
            def task(ctx):
                time.sleep(3)
                return ctx.spark.range(6)
        """,
        )
        slot = master.jobs.slots[0]
        tdd = deployment(config, slot, job_id, "v", f"{module}:task", key)
        await asyncio.to_thread(gateway.deploy, slot, tdd, master.session_id)
        await eventually(
            lambda: ExecutionState.RUNNING in master.jobs.states(tdd.execution_id),
            "the task to run",
            processes=[te],
            timeout=WAIT_S,
        )
        old_rm_id = master.resource_manager.resource_manager_id

        await master.restart_resource_manager()

        # the running task goes on and reports to the (same) JobMaster; the new RM learns the TaskExecutor
        await eventually(
            lambda: master.resource_manager.overview().taskmanagers == 1,
            "the re-registration",
            processes=[te],
            timeout=WAIT_S,
        )
        assert master.resource_manager.resource_manager_id != old_rm_id
        await eventually(
            lambda: master.jobs.final(tdd.execution_id) is not None,
            "the task to finish",
            processes=[te],
            timeout=WAIT_S,
        )
        done = master.jobs.final(tdd.execution_id)
        assert done is not None and (done.state, done.rows) == (ExecutionState.FINISHED, 6)
        await eventually(
            lambda: master.resource_manager.overview().slots_available == 2,
            "free slots",
            processes=[te],
            timeout=WAIT_S,
        )
    finally:
        te.kill()
        gateway.close()
        await master.stop()


class ElectedMaster:
    """A MasterForTaskExecutors that leads only while the ZooKeeper election grants it leadership."""

    def __init__(self, config: Configuration) -> None:
        self.config = config
        self.services = create_ha_services(config)
        self.master: MasterForTaskExecutors | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        await self.services.start()
        self.services.election.start(self)

    def grant_leadership(self, session_id: str) -> None:
        self._spawn(self._lead(session_id))

    def revoke_leadership(self) -> None:
        master, self.master = self.master, None
        if master is not None:
            self._spawn(master.stop())

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _lead(self, session_id: str) -> None:
        master = MasterForTaskExecutors(self.config, session_id=session_id)
        await master.start()
        self.master = master
        self.services.election.confirm_leadership(session_id, self.config.rest_url)

    def registered(self) -> int:
        return self.master.resource_manager.overview().taskmanagers if self.master is not None else 0

    async def close(self) -> None:
        await self.services.close()
        for task in list(self._tasks):
            await task
        if self.master is not None:
            await self.master.stop()


def with_zookeeper_ha(config: Configuration, zk_config: Configuration) -> Configuration:
    """`config` with the high-availability keys of `zk_config` (the test's ZooKeeper root)."""
    return config.with_overrides(
        {key: value for key, value in zk_config.to_flat().items() if key.startswith("high-availability.")}
    )


async def two_elected_masters(config: Configuration) -> tuple[ElectedMaster, ElectedMaster]:
    """Two ElectedMasters of `config` on free ports; the first leads."""
    first = ElectedMaster(config.with_overrides({"rest.port": str(free_port())}))
    second = ElectedMaster(config.with_overrides({"rest.port": str(free_port())}))
    await first.start()
    await eventually(lambda: first.master is not None, "the first master to lead", timeout=WAIT_S)
    await second.start()
    return first, second


@pytest.mark.slow
async def test_a_taskexecutor_follows_the_leader_to_a_new_master(
    redis_server: RedisServer, zk_config: Configuration, tmp_path: Path
) -> None:
    base = with_zookeeper_ha(cluster_config(tmp_path, redis_server.url), zk_config)
    first, second = await two_elected_masters(base)
    te = TaskExecutorProcess(base, tmp_path, task_executor_id=f"te-zk-{uuid.uuid4().hex[:6]}")
    try:
        await eventually(
            lambda: first.registered() == 1, "the registration with the first leader", processes=[te], timeout=WAIT_S
        )

        await first.close()  # leadership passes to the second master, under a new session id

        await eventually(
            lambda: second.registered() == 1, "the registration with the new leader", processes=[te], timeout=WAIT_S
        )
        assert second.master is not None and second.master.session_id != STANDALONE_SESSION_ID
    finally:
        te.kill()
        await first.close()
        await second.close()


@pytest.mark.slow
async def test_a_new_leader_gets_the_former_leaders_slots_at_once_and_its_tasks_are_cancelled(
    redis_server: RedisServer, zk_config: Configuration, tmp_path: Path
) -> None:
    """The former leader was SIGKILLed (here: it stepped down; the TaskExecutor sees the same). Its tasks
    must not run on holding slots the recovered jobs wait for."""
    base = with_zookeeper_ha(
        cluster_config(tmp_path, redis_server.url, **{"taskexecutor.cancellation.timeout": "1s"}), zk_config
    )
    first, second = await two_elected_masters(base)
    te = TaskExecutorProcess(base, tmp_path, task_executor_id=f"te-zk-{uuid.uuid4().hex[:6]}")
    gateway = CeleryTaskExecutorGateway(base)
    beats = tmp_path / "beats"
    try:
        await eventually(
            lambda: first.registered() == 1,
            "the registration with the first leader",
            processes=[te],
            timeout=2 * WAIT_S,
        )
        former = first.master
        assert former is not None
        job_id = uuid.uuid4().hex
        former.resource_manager.declare_requirements(job_id, 1, former.jobs)
        await eventually(lambda: len(former.jobs.slots) == 1, "a slot from the first leader", timeout=WAIT_S)
        module, key = user_code(
            base,
            f"""
            import time
            from pathlib import Path

            def forever(ctx):  # no Spark operation to interrupt: only killing its process stops it
                while True:
                    Path({str(beats)!r}).write_text(repr(time.time()))
                    time.sleep(0.05)

            def quick(ctx):
                return ctx.spark.range(3)
        """,
        )
        [slot] = former.jobs.slots
        old = deployment(base, slot, job_id, "forever", f"{module}:forever", key)
        await asyncio.to_thread(gateway.deploy, slot, old, former.session_id)
        await eventually(
            lambda: ExecutionState.RUNNING in former.jobs.states(old.execution_id),
            "the first leader's task to run",
            processes=[te],
            timeout=WAIT_S,
        )

        await first.close()  # leadership passes to the second master, under a new session

        await eventually(
            lambda: second.registered() == 1, "the registration with the new leader", processes=[te], timeout=WAIT_S
        )
        leader = second.master
        assert leader is not None and leader.session_id != former.session_id
        # the former leader's task holds no slot for the new leader: both are free at once
        assert leader.resource_manager.overview().slots_available == 2
        recovered = uuid.uuid4().hex
        leader.resource_manager.declare_requirements(recovered, 2, leader.jobs)
        await eventually(lambda: len(leader.jobs.slots) == 2, "both slots for the recovered job", timeout=WAIT_S)
        same_slot = next(s for s in leader.jobs.slots if s.slot_index == slot.slot_index)
        new = deployment(base, same_slot, recovered, "quick", f"{module}:quick", key)
        started = time.monotonic()
        await asyncio.to_thread(gateway.deploy, same_slot, new, leader.session_id)
        listed: set[str] = set()  # the states the heartbeats gave the new task

        def finished() -> bool:
            listed.update(
                e.state.value
                for entry in leader.resource_manager.task_executors()
                for e in entry.executions
                if e.execution_id == new.execution_id
            )
            return leader.jobs.final(new.execution_id) is not None

        # it runs in that slot as soon as the cancelled task is gone (killed after the cancellation timeout);
        # meanwhile the heartbeats list it, waiting for its slot: its JobMaster would not take it for lost
        await eventually(finished, "the new leader's task", processes=[te], timeout=30)
        assert "DEPLOYING" in listed, listed
        done = leader.jobs.final(new.execution_id)
        assert done is not None and (done.state, done.rows) == (ExecutionState.FINISHED, 3)
        assert time.monotonic() - started < 15
        # and the former leader's task no longer runs
        last = beats.read_text()
        await asyncio.sleep(0.5)  # ten of its beats, were it still running
        assert beats.read_text() == last
        assert f"execution {old.execution_id} was deployed under the former leader session" in te.log.read_text(
            errors="replace"
        )
    finally:
        te.kill()
        gateway.close()
        await first.close()
        await second.close()


def registration(task_executor_id: str) -> TaskExecutorRegistration:
    return TaskExecutorRegistration(
        task_executor_id=task_executor_id,
        hostname=f"{task_executor_id}@host",
        queue=f"sparkdispatch.te.{task_executor_id}",
        slots=2,
        slot_report=SlotReport.free(2),
        spark_master="local[2]",
    )
