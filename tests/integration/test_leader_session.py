"""A master of `high-availability.mode: none` leads under a session drawn at each start: a
TaskExecutor asks it for the session (with the cluster secret), and what was sent under a former
run's session is refused after a restart."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sparkdispatch.errors import FencingTokenMismatch
from sparkdispatch.ha.leader import StandaloneLeaderRetrieval
from sparkdispatch.model.protocol import SlotReport, TaskExecutorRegistration
from sparkdispatch.taskexecutor.leader_session import AskedLeaderSession
from sparkdispatch.taskexecutor.master_client import MasterClient
from sparkdispatch.testing.http import request_json
from sparkdispatch.testing.master import InProcessMaster

SECRET = "cluster-secret-0123456789"


def register(client: MasterClient, address: str, session_id: str) -> None:
    registration = TaskExecutorRegistration(
        task_executor_id="te-1",
        hostname="te-1@host",
        queue="sparkdispatch.te.te-1",
        slots=1,
        slot_report=SlotReport.free(1),
        spark_master="local[1]",
    )
    client.register(address, session_id, registration)


async def test_a_restarted_master_leads_under_a_new_session_which_taskexecutors_ask_it_for(tmp_path: Path) -> None:
    overrides = {"cluster.secret": SECRET, "rest.auth.token": "users-token-0123456789"}
    first = InProcessMaster(storage_dir=tmp_path, overrides=overrides)
    client = MasterClient(first.config)  # a TaskExecutor's, with the cluster secret
    retrieval = StandaloneLeaderRetrieval(first.config.rest_url)
    retrieval.start()
    asked = AskedLeaderSession(retrieval, client)
    try:
        async with first:
            url, old_session = first.url, first.session_id
            # the session is the TaskExecutors' to ask for: not a user's, nor anyone's without a credential
            assert (await request_json("GET", f"{url}/taskexecutors/leader-session"))[0] == 401
            status, _ = await request_json("GET", f"{url}/taskexecutors/leader-session", token="users-token-0123456789")
            assert status == 401  # the cluster secret's call
            status, body = await request_json("GET", f"{url}/v1/taskexecutors/leader-session", token=SECRET)
            assert (status, body) == (200, {"session_id": old_session})
            leader = await asyncio.to_thread(asked.current)
            assert leader is not None and (leader.address, leader.session_id) == (first.config.rest_url, old_session)
            await asyncio.to_thread(register, client, leader.address, leader.session_id)
        second = InProcessMaster(storage_dir=tmp_path, port=first.port, overrides=overrides)
        async with second:
            assert second.session_id != old_session
            # a registration (or any call) under the former run's session is refused
            with pytest.raises(FencingTokenMismatch):
                await asyncio.to_thread(register, client, url, old_session)
            assert await asyncio.to_thread(asked.current) == leader  # asked once, kept until refused
            asked.forget()
            again = await asyncio.to_thread(asked.current)
            assert again is not None and again.session_id == second.session_id
            await asyncio.to_thread(register, client, again.address, again.session_id)
    finally:
        retrieval.close()
        await asyncio.to_thread(client.close)
