"""Processes that are not masters follow the leader through a real ZooKeeper and create no znode."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from sparkdispatch.client import RetryPolicy, SparkDispatchClient
from sparkdispatch.client.leader import ZooKeeperTarget
from sparkdispatch.config import Configuration
from sparkdispatch.config.options import HA_CLUSTER_ID, HA_ZOOKEEPER_QUORUM
from sparkdispatch.ha import ClosableLeaderRetrieval, LeaderInfo, create_leader_retrieval
from sparkdispatch.testing.master import InProcessMaster
from sparkdispatch.testing.services import ZooKeeperServer
from sparkdispatch.testing.waiting import eventually

WAIT_S = 30.0  # an upper bound for anything to happen; no timing is asserted
PATIENT = RetryPolicy(attempts=60, initial_backoff=0.05, max_backoff=0.5)


@pytest.fixture
def zk(zookeeper_server: ZooKeeperServer) -> Iterator[KazooClient]:
    """The test's own view of the tree."""
    client = KazooClient(hosts=zookeeper_server.hosts)
    client.start(timeout=WAIT_S)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def tree(zk: KazooClient, path: str) -> set[str]:
    """Every znode at and below `path`; empty if `path` does not exist."""
    try:
        children = zk.get_children(path)
    except NoNodeError:
        return set()
    nodes = {path}
    for child in children:
        nodes |= tree(zk, f"{path}/{child}")
    return nodes


def follows(retrieval: ClosableLeaderRetrieval, master: InProcessMaster) -> bool:
    """Whether `retrieval` names `master`, and `master` leads, under the session it leads."""
    info = retrieval.current()
    return info is not None and master.master.is_leader and info == LeaderInfo(master.url, master.session_id)


async def test_followers_create_no_znode_and_follow_the_leader(
    zk_config: Configuration, zk: KazooClient, zk_root: str
) -> None:
    target = ZooKeeperTarget(
        quorum=zk_config.get(HA_ZOOKEEPER_QUORUM), cluster_id=zk_config.get(HA_CLUSTER_ID), root=zk_root
    )
    task_executor_side = create_leader_retrieval(zk_config)
    first = InProcessMaster(overrides=zk_config.to_flat())
    second = InProcessMaster(overrides=zk_config.to_flat())
    try:
        async with SparkDispatchClient(zookeeper=target, retry=PATIENT) as client:
            # No master yet: both watch a leader node whose parents do not exist, and create none.
            await asyncio.to_thread(task_executor_side.start)
            finding = asyncio.create_task(client.leader())
            await asyncio.sleep(0.5)  # room for a leader found or a znode made, which must not come
            assert not finding.done() and task_executor_side.current() is None
            assert await asyncio.to_thread(tree, zk, zk_root) == set()

            await first.start()
            await first.wait_for_leadership()
            assert await asyncio.wait_for(finding, WAIT_S) == first.url
            await eventually(lambda: follows(task_executor_side, first), "the TaskExecutor side to see the leader")
            await second.start()
            await eventually(lambda: second.master.leader_address() == first.url, "the standby to know the leader")

            # Followers that come while the masters run leave the masters' tree as it is.
            before = await asyncio.to_thread(tree, zk, zk_root)
            assert f"{zk_root}/default/leader/connection_info" in before
            late = create_leader_retrieval(zk_config)
            await asyncio.to_thread(late.start)
            await asyncio.to_thread(late.wait_for_leader, WAIT_S)
            assert follows(late, first)
            late.close()
            async with SparkDispatchClient(zookeeper=target, retry=PATIENT) as another:
                assert await another.jobs() == [] and another.leader_address == first.url
            assert await asyncio.to_thread(tree, zk, zk_root) == before

            # The leader goes: both follow the standby that takes over.
            await first.stop()
            await eventually(
                lambda: follows(task_executor_side, second), "the TaskExecutor side to follow the new leader"
            )
            assert await client.jobs() == [] and client.leader_address == second.url
    finally:
        task_executor_side.close()
        await second.stop()
        await first.stop()
