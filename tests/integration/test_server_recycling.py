"""A TaskExecutor's Spark Connect server replaced by a successor under running attempts, and the
Python worker daemons of released sessions ended: real servers and slot processes, driven through
`ServerRecycler` and `WorkerDaemonReaper` as the server watch drives them."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sparkdispatch.model.states import ExecutionState
from sparkdispatch.taskexecutor.connect_server import ConnectServer
from sparkdispatch.taskexecutor.python_workers import WorkerDaemonReaper, worker_daemons
from sparkdispatch.taskexecutor.server_recycling import ConnectServers, ServerRecycler
from sparkdispatch.taskexecutor.settings import RecyclePolicy, SlotPoolSettings
from sparkdispatch.taskexecutor.slot_pool import SlotProcessPool
from sparkdispatch.testing.slot_attempts import (
    connect_settings_for_tests,
    Attempt,
    artifact,
    deployment,
    gone,
    new_job_id,
    rows_of,
    run,
    session_state,
    slot_processes,
    wait_for_marker,
)

pytestmark = pytest.mark.slow

TASKS = Path(__file__).with_name("slot_tasks.py")
SETTINGS = connect_settings_for_tests()


@pytest.fixture
def servers(tmp_path: Path, service_missing: Callable[[str], None]) -> Iterator[ConnectServers]:
    if shutil.which("java") is None:
        service_missing("Spark needs java on PATH")

    def new_server() -> ConnectServer:
        return ConnectServer(SETTINGS, work_dir=tmp_path / "te-work")

    first = new_server()
    first.start()
    servers = ConnectServers(first, successor=new_server)
    try:
        yield servers
    finally:
        servers.stop()


@pytest.mark.timeout(900)  # a successor server starts and warms up (its start timeout: 240 s) amid the attempts
def test_a_recycled_server_hands_its_slot_processes_over_without_failing_an_attempt(
    servers: ConnectServers, tmp_path: Path
) -> None:
    old = servers.current
    old_url, old_pid = old.url, old.pid
    assert old_pid is not None
    pool = SlotProcessPool(
        SlotPoolSettings(spares=1, cancellation_timeout=2.0), connect_url=old_url, driver_log=str(old.log_path)
    )
    pool.start()
    try:
        tasks = artifact(tmp_path, "slot_tasks.py", TASKS.read_bytes())
        job_id = new_job_id()
        conf = {"spark.sql.shuffle.partitions": "3"}
        [first] = rows_of(
            run(pool, deployment(tmp_path, "slot_tasks:session_facts", job_id=job_id, spark_conf=conf), [tasks])
        )
        busy = Attempt(
            pool,
            deployment(
                tmp_path,
                "slot_tasks:udf_after_marker",
                job_id=job_id,
                slot_index=1,
                params={"wait_for": "go", "timeout_s": 900},
            ),
            [tasks],
        )
        busy_pid = wait_for_marker(tmp_path, "waiting")
        wait_for_marker(tmp_path, "in-udf")  # its Python UDF runs, in a worker of the old server
        assert pool.sessions_made(old_url) == 2

        recycler = ServerRecycler(servers, pool, RecyclePolicy(sessions=2, thread_growth=0, open_file_growth=0))
        reaper = WorkerDaemonReaper(servers.pids, pool.released_sessions)
        recycler.check()
        reaper.check()  # as the server watch does next: the busy session's daemon is not the released ones'

        new = servers.current
        assert new is not old and new.is_healthy() and new.url != old_url
        assert servers.draining == (old, old_url)
        recycler.check()
        assert old.is_alive(), "the old server stopped while an attempt still ran on it"
        # the job's next task in the idle process: same process, a new session on the new server,
        # the job's configuration set again; its session on the old server was released
        [second] = rows_of(
            run(pool, deployment(tmp_path, "slot_tasks:session_facts", job_id=job_id, spark_conf=conf), [tasks])
        )
        assert second["pid"] == first["pid"] and second["session_id"] != first["session_id"]
        assert second["partitions"] == "3"
        assert session_state(old, first["session_id"]) == "closed"
        assert pool.sessions_made(new.url) == 1 and pool.attempts_on(old_url) == 1

        (tmp_path / "markers" / "go").write_text("")
        end = busy.join()
        assert end.state is ExecutionState.FINISHED and len(rows_of(end)) == 3, end
        assert reaper.check() >= 1  # now its session is released: its daemon goes
        recycler.check()
        assert servers.draining is None and old.pid is None and gone(old_pid)
        # the busy process moved over after its attempt: the next job's task there runs on the new server
        [later] = rows_of(
            run(pool, deployment(tmp_path, "slot_tasks:session_facts", job_id=new_job_id(), slot_index=1), [tasks])
        )
        assert later["pid"] == busy_pid and later["partitions"] == "2"
        assert (servers.recycles, servers.starts) == (1, 1)
    finally:
        pool.close()
    assert slot_processes() == set(), "slot processes left after close()"


def daemons_of(server: ConnectServer) -> set[str]:
    """The sessions (server-side ids) whose Python worker daemon runs under the server."""
    assert server.pid is not None
    return {session for _, session in worker_daemons(server.pid)}


def test_the_worker_daemon_of_a_released_session_ends_and_a_live_sessions_stays(
    servers: ConnectServers, tmp_path: Path
) -> None:
    server = servers.current
    pool = SlotProcessPool(
        SlotPoolSettings(spares=1, cancellation_timeout=2.0), connect_url=server.url, driver_log=str(server.log_path)
    )
    pool.start()
    try:
        tasks = artifact(tmp_path, "slot_tasks.py", TASKS.read_bytes())
        reaper = WorkerDaemonReaper(servers.pids, pool.released_sessions)
        first_job, second_job = new_job_id(), new_job_id()
        assert rows_of(run(pool, deployment(tmp_path, "slot_tasks:python_udf", job_id=first_job), [tasks])) == [
            {"doubled": 0},
            {"doubled": 2},
            {"doubled": 4},
        ]
        [first_session] = daemons_of(server)
        assert reaper.check() == 0  # its session lives: the job may run another task here
        rows_of(run(pool, deployment(tmp_path, "slot_tasks:python_udf", job_id=second_job), [tasks]))
        assert pool.released_sessions.recent() == {first_session}
        assert reaper.check() == 1
        deadline = time.monotonic() + 60
        while first_session in daemons_of(server):
            assert time.monotonic() < deadline, "the released session's daemon did not end"
            time.sleep(0.1)
        [second_session] = daemons_of(server)
        assert second_session != first_session
        # the second job's session lives on: its next task runs its UDF with the daemon it has
        rows_of(run(pool, deployment(tmp_path, "slot_tasks:python_udf", job_id=second_job), [tasks]))
        assert daemons_of(server) == {second_session}
    finally:
        pool.close()
