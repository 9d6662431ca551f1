"""Spark's Python worker daemons forked from the worker-daemon template, on a real Connect server.

One server and one template serve the module, as a TaskExecutor with a local master has them. A
UDF reports its worker's parent (the session's daemon) and that daemon's parent; the tests read
the stubs Spark started as the server's children. The test that kills the template runs last.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkdispatch.taskexecutor.connect_server import ConnectServer
from sparkdispatch.taskexecutor.python_workers import ReleasedSessions, WorkerDaemonReaper, worker_daemons
from sparkdispatch.taskexecutor.slot_sessions import new_session, server_session_id
from sparkdispatch.taskexecutor.worker_daemon_stub import MAX_MESSAGE
from sparkdispatch.taskexecutor.worker_daemon_template import DAEMON_NAME
from sparkdispatch.taskexecutor.worker_daemons import WorkerDaemonTemplate
from sparkdispatch.testing.local_cluster import parent_pid
from sparkdispatch.testing.slot_attempts import connect_settings_for_tests
from sparkdispatch.testing.waiting import eventually_blocking

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerDaemonTemplate]:
    template = WorkerDaemonTemplate(tmp_path_factory.mktemp("python-worker-daemons"))
    template.start()
    try:
        eventually_blocking(template.serving, "the worker-daemon template to listen", timeout=60)
        yield template
    finally:
        template.stop()


@pytest.fixture(scope="module")
def connect_server(
    template: WorkerDaemonTemplate, tmp_path_factory: pytest.TempPathFactory, service_missing: Callable[[str], None]
) -> Iterator[ConnectServer]:
    if shutil.which("java") is None:
        service_missing("Spark needs java on PATH")
    settings = connect_settings_for_tests()
    server = ConnectServer(settings, work_dir=tmp_path_factory.mktemp("connect-server"), daemon_template=template)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def udf_facts(session: Any) -> list[dict[str, Any]]:
    """What each of two partitions' UDF saw: its module's version, its daemon, the daemon's parent and name."""
    from pyspark.sql.connect.functions import builtin as F
    from pyspark.sql.types import StringType

    def facts(_):  # type: ignore[no-untyped-def]  # no hints: Spark would read them as a pandas UDF's
        import json
        import os

        import versioned  # type: ignore[import-not-found]  # the session's own artifact

        daemon = os.getppid()
        with open(f"/proc/{daemon}/stat") as stat:
            daemon_parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{daemon}/comm") as comm:
            name = comm.read().strip()
        return json.dumps({"version": versioned.VERSION, "daemon": daemon, "parent": daemon_parent, "name": name})

    as_facts: Any = F.udf(facts, StringType())
    rows = session.range(2, numPartitions=2).select(as_facts("id").alias("facts")).collect()
    return [json.loads(row["facts"]) for row in rows]


def session_with_version(connect_server: ConnectServer, tmp_path: Path, version: int) -> Any:
    module = tmp_path / f"v{version}" / "versioned.py"
    module.parent.mkdir(parents=True)
    module.write_text(f"VERSION = {version}\n")
    session = new_session(connect_server.url)
    session.addArtifacts(str(module), pyfile=True)
    return session


def test_each_sessions_udfs_run_in_a_daemon_forked_from_the_template_with_the_sessions_own_module(
    connect_server: ConnectServer, template: WorkerDaemonTemplate, tmp_path: Path
) -> None:
    first, second = (session_with_version(connect_server, tmp_path, version) for version in (1, 2))
    try:
        seen = {version: udf_facts(session) for version, session in ((1, first), (2, second))}
    finally:
        first.stop()
        second.stop()
    for version, facts in seen.items():
        assert {fact["version"] for fact in facts} == {version}
        [daemon] = {fact["daemon"] for fact in facts}  # both partitions' workers forked by one daemon
        assert {(fact["parent"], fact["name"]) for fact in facts} == {(template.pid, DAEMON_NAME)}
    assert seen[1][0]["daemon"] != seen[2][0]["daemon"]  # a daemon per session, as Spark keeps them
    stubs = {pid for pid, _ in worker_daemons(connect_server.pid or 0)}
    assert len(stubs) >= 2  # what Spark started stands in for each daemon as the server's child


def test_a_released_sessions_stub_passes_sigterm_on_and_its_daemon_and_the_stub_end(
    connect_server: ConnectServer, tmp_path: Path
) -> None:
    session = session_with_version(connect_server, tmp_path, 3)
    try:
        [fact, _] = udf_facts(session)
        session_id = server_session_id(session)
    finally:
        session.stop()
    assert session_id is not None
    [stub] = [pid for pid, session in worker_daemons(connect_server.pid or 0) if session == session_id]
    released = ReleasedSessions()
    released.add(session_id)
    assert WorkerDaemonReaper(lambda: [connect_server.pid or 0], released).check() == 1
    eventually_blocking(lambda: not Path(f"/proc/{fact['daemon']}").exists(), "the session's daemon to end")
    eventually_blocking(lambda: stub not in {pid for pid, _ in worker_daemons(connect_server.pid or 0)}, "its stub")


def test_a_stub_of_a_job_environment_on_the_same_binary_is_refused(template: WorkerDaemonTemplate) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as channel, open(os.devnull, "rb") as null:
        channel.connect(str(template.socket_path))
        # a job environment's interpreter: the same binary under another prefix
        request = {"python": sys.executable, "prefix": "/opt/job-env", "environment": {}, "cwd": "/", "argv": []}
        socket.send_fds(channel, [json.dumps(request).encode()], [null.fileno()] * 3)
        answer = json.loads(channel.recv(MAX_MESSAGE))
    assert "/opt/job-env" in answer["refused"]
    assert template.serving()


def test_without_its_template_a_sessions_daemon_starts_anew_and_its_udfs_run(
    connect_server: ConnectServer, template: WorkerDaemonTemplate, tmp_path: Path
) -> None:
    assert template.pid is not None
    os.kill(template.pid, signal.SIGKILL)
    eventually_blocking(lambda: not template.alive(), "the template to die")
    session = session_with_version(connect_server, tmp_path, 4)
    try:
        facts = udf_facts(session)
    finally:
        session.stop()
    assert {fact["version"] for fact in facts} == {4}
    [daemon] = {fact["daemon"] for fact in facts}
    assert parent_pid(daemon) == connect_server.pid  # the stub became the daemon itself
