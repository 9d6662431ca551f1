"""Partitions on a multi-host cluster: each process group in a network namespace of its own, a
3-node ZooKeeper ensemble, Redis, two masters and two TaskExecutors (sparkdispatch.testing.hosts).
The test process is the client, on the bridge.

One cluster serves the scenarios in turn (it takes about 40 s to start on 2 cores): the leader
master cut off, one ZooKeeper node cut off, a TaskExecutor whose packets are dropped, the broker
cut off from the masters, the ZooKeeper majority cut off. After each, every job submitted finished once with its rows.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest

from sparkdispatch.client import RetryPolicy, SparkDispatchClient
from sparkdispatch.model.job_result import JobResult
from sparkdispatch.testing.hosts import CLUSTER_TOKEN, ZOOKEEPER_PORT, MultiHostCluster, available
from sparkdispatch.testing.waiting import eventually

pytestmark = pytest.mark.slow

TASKS = Path(__file__).with_name("job_tasks.py")
SESSION_TIMEOUT_S = 4.0
WAIT_S = 120.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, service_missing: Any) -> Iterator[MultiHostCluster]:
    if not available():
        service_missing("network namespaces need root (CAP_NET_ADMIN) and iproute2's `ip`")
    hosts = MultiHostCluster(
        workdir=tmp_path_factory.mktemp("hosts"),
        extra={
            "high-availability.zookeeper.session-timeout": f"{SESSION_TIMEOUT_S:g}s",
            "taskexecutor.slots": "1",
            "spark.sql.shuffle.partitions": "1",
            "heartbeat.interval": "500ms",
            "heartbeat.timeout": "4s",
            "taskexecutor.registration.max-backoff": "1s",
            "rest.execution-result.long-poll": "200ms",
            "slot.request.timeout": "60s",
            "taskexecutor.cancellation.timeout": "3s",
        },
    )
    hosts.start()
    try:
        yield hosts
    finally:
        hosts.stop()


@pytest.fixture
async def client(cluster: MultiHostCluster) -> AsyncIterator[SparkDispatchClient]:
    async with SparkDispatchClient(
        addresses=cluster.master_addresses,
        token=CLUSTER_TOKEN,
        retry=RetryPolicy(attempts=30, max_backoff=1.0),
        request_timeout=5.0,
    ) as made:
        yield made


async def overviews(cluster: MultiHostCluster, among: list[str] | None = None) -> dict[str, dict[str, Any] | None]:
    """Each master's own `/overview` (None when it does not answer)."""
    answers: dict[str, dict[str, Any] | None] = {}
    headers = {"Authorization": f"Bearer {CLUSTER_TOKEN}"}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2), headers=headers) as session:
        for address in among or cluster.master_addresses:
            try:
                async with session.get(f"{address}/overview") as answer:
                    answers[address] = await answer.json() if answer.status == 200 else None
            except (aiohttp.ClientError, TimeoutError):
                answers[address] = None
    return answers


async def leaders(cluster: MultiHostCluster, among: list[str] | None = None) -> list[str]:
    return [
        address for address, overview in (await overviews(cluster, among)).items() if overview and overview["is_leader"]
    ]


async def run_job(
    client: SparkDispatchClient, key: str, log_dir: Path, name: str, *, sleep_s: float = 0.0, while_running: Any = None
) -> JobResult:
    job_id = (
        await client.submit(
            {
                "name": name,
                "artifacts": [key],
                "restart_strategy": {"type": "fixed-delay", "attempts": 3, "delay_s": 0.5},
                # numbers' two subtasks tasks of their own, one on each TaskExecutor, for the faults to hit
                "results": "durable",
                "vertices": [
                    {
                        "id": "numbers",
                        "entrypoint": "job_tasks:numbers",
                        "parallelism": 2,
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
        )
    ).job_id
    if while_running is not None:
        await eventually(lambda: _started(log_dir), f"{name} to run", timeout=WAIT_S, interval=0.05)
        await while_running()
    result = await asyncio.wait_for(client.wait_for_result(job_id, poll_interval=0.3), WAIT_S)
    assert result.status == "FINISHED", result.failure
    assert result.vertices["double"].rows == 10
    return result


async def _started(log_dir: Path) -> bool:
    return log_dir.is_dir() and any(log_dir.iterdir())


def successful_runs(log_dir: Path, vertex: str, subtask: int) -> int:
    return len(list(log_dir.glob(f"{vertex}.{subtask}.*.run.*")))


async def test_partitions_of_masters_zookeeper_and_task_executors(
    cluster: MultiHostCluster, client: SparkDispatchClient, tmp_path: Path
) -> None:
    await eventually(lambda: _task_executors(client, 2), "two registered TaskExecutors", timeout=WAIT_S, interval=0.05)
    key = await client.upload_artifact(TASKS)
    await run_job(client, key, tmp_path / "warm", "warm-up")

    # 1. the leader master cut off while a job runs: the standby leads within the session timeout
    #    (+ 1 s), the job finishes, and once the link is back there is one leader
    [leader] = await leaders(cluster)
    network = cluster.network
    assert network is not None
    leader_host = next(h for h in network.hosts.values() if leader.startswith(f"http://{h.address}:"))
    took: list[float] = []

    async def cut_the_leader() -> None:
        network.cut(leader_host.name)
        cut = time.monotonic()
        await eventually(lambda: _other_leads(cluster, leader), "a new leader", timeout=WAIT_S, interval=0.05)
        took.append(time.monotonic() - cut)

    await run_job(client, key, tmp_path / "leader-cut", "leader-cut", sleep_s=2.0, while_running=cut_the_leader)
    print(f"leader cut off: the standby led after {took[0]:.2f}s (session timeout {SESSION_TIMEOUT_S}s)")
    assert took[0] <= SESSION_TIMEOUT_S + 1.0
    network.heal(leader_host.name)
    await asyncio.sleep(SESSION_TIMEOUT_S)  # what must not happen (the returned master leading) has had its chance
    current = await leaders(cluster)
    assert len(current) == 1 and current[0] != leader, current  # the returned master does not lead again

    # 2. one ZooKeeper node cut off, a follower the leader is not connected to: nothing visible, the
    #    leader stays. (Cutting the node the leader is connected to suspends its connection, and so
    #    does cutting the ensemble's own leader, whose followers drop their clients while they elect
    #    another: with tolerate-suspended-connections off, Flink's default, the master steps down.)
    leader_address = urlsplit(current[0]).hostname or ""
    [other_node, *_] = [
        name
        for name in ("zookeeper-1", "zookeeper-2", "zookeeper-3")
        if leader_address not in (stat := zookeeper_stat(network.hosts[name].address)) and "Mode: follower" in stat
    ]
    network.cut(other_node)
    await run_job(client, key, tmp_path / "zk-one", "zookeeper-node-cut")
    assert await leaders(cluster) == current
    network.heal(other_node)

    # 3. a TaskExecutor whose packets are dropped while it runs a task: once it is lost, its work
    #    fails over; back while its stale task still runs, it registers again and the task is cancelled
    async def drop_a_task_executor() -> None:
        network.drop("taskexecutor-1")
        await eventually(lambda: _task_executors(client, 1), "the TaskExecutor lost", timeout=WAIT_S, interval=0.05)
        network.heal("taskexecutor-1")

    result = await run_job(
        client, key, tmp_path / "te-drop", "taskexecutor-dropped", sleep_s=8.0, while_running=drop_a_task_executor
    )
    assert result.vertices["numbers"].attempts == 2
    await eventually(
        lambda: _task_executors(client, 2), "both TaskExecutors registered again", timeout=WAIT_S, interval=0.05
    )
    stale = [
        line
        for name in ("master-1", "master-2")
        for line in cluster.log_lines(name)
        if "still runs stale execution" in line and result.job_id in line
    ]
    assert stale and "taskexecutor-1" in stale[0], stale

    # 4. a TaskExecutor's packets dropped while a job runs, until it ends; right after it is back, the
    #    broker cut off from both masters while a job runs, for less than the heartbeat timeout: a
    #    deployment waits for the broker, nothing fails, no restart is used. (This found the
    #    TaskExecutor's consumer waiting on a BRPOP whose packets were lost, TCP's next retransmission
    #    seconds away, while its deployments were declared lost.)
    async def drop_until_the_end() -> None:
        network.drop("taskexecutor-1")

    await run_job(
        client,
        key,
        tmp_path / "te-drop-long",
        "taskexecutor-dropped-long",
        sleep_s=3.0,
        while_running=drop_until_the_end,
    )
    network.heal("taskexecutor-1")
    await eventually(
        lambda: _task_executors(client, 2), "both TaskExecutors registered again", timeout=WAIT_S, interval=0.05
    )

    async def separate_the_broker() -> None:
        network.separate("redis", ["master-1", "master-2"])
        await asyncio.sleep(2.5)  # the partition itself: shorter than the heartbeat timeout
        network.heal("redis")

    result = await run_job(
        client, key, tmp_path / "broker-cut", "broker-cut", sleep_s=1.0, while_running=separate_the_broker
    )
    assert {vertex: outcome.attempts for vertex, outcome in result.vertices.items()} == {"numbers": 1, "double": 1}

    # 5. the ZooKeeper majority cut off: no master leads; nothing is lost; work resumes afterwards
    network.cut("zookeeper-1")
    network.cut("zookeeper-2")
    await eventually(lambda: _no_leader(cluster), "no leader", timeout=SESSION_TIMEOUT_S * 4, interval=0.05)
    network.heal("zookeeper-1")
    network.heal("zookeeper-2")
    await eventually(lambda: _one_leader(cluster), "a leader again", timeout=WAIT_S, interval=0.05)
    await run_job(client, key, tmp_path / "after-quorum", "after-quorum")
    jobs = await client.jobs()
    assert sorted(job.name for job in jobs if job.status == "FINISHED") == sorted(
        [
            "warm-up",
            "leader-cut",
            "zookeeper-node-cut",
            "taskexecutor-dropped",
            "taskexecutor-dropped-long",
            "broker-cut",
            "after-quorum",
        ]
    )
    for log_dir in ("zk-one", "broker-cut", "after-quorum"):  # nothing failed there: each subtask ran once
        for vertex, subtask in (("numbers", 0), ("numbers", 1), ("double", 0)):
            assert successful_runs(tmp_path / log_dir, vertex, subtask) == 1, (log_dir, vertex, subtask)


def zookeeper_stat(address: str) -> str:
    """What a ZooKeeper node's `stat` says: its clients' addresses and its mode (leader, follower)."""
    with socket.create_connection((address, ZOOKEEPER_PORT), timeout=5) as connection:
        connection.sendall(b"stat")
        return connection.makefile("rb").read().decode(errors="replace")


async def _task_executors(client: SparkDispatchClient, count: int) -> bool:
    try:
        return (await client.overview()).taskmanagers == count
    except Exception:  # noqa: BLE001 - no leader yet
        return False


async def _other_leads(cluster: MultiHostCluster, old: str) -> bool:
    # a leader-only resource: a standby answers 503 at once (its /overview would first ask the cut-off
    # leader for its counts, for up to 2 s)
    headers = {"Authorization": f"Bearer {CLUSTER_TOKEN}"}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1), headers=headers) as session:
        for address in cluster.master_addresses:
            if address != old:
                try:
                    async with session.get(f"{address}/jobs/overview") as answer:
                        if answer.status == 200:
                            return True
                except (aiohttp.ClientError, TimeoutError):
                    pass
    return False


async def _no_leader(cluster: MultiHostCluster) -> bool:
    return not await leaders(cluster)


async def _one_leader(cluster: MultiHostCluster) -> bool:
    return len(await leaders(cluster)) == 1
