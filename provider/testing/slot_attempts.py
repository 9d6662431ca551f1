"""Attempts run in slot processes through a `SlotProcessPool`, as the slot tests drive them: local
artifacts as the TaskExecutor's cache keeps them, deployments, attempts in threads of their own,
their results, and what is left of the processes and sessions.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import grpc  # type: ignore[import-untyped]
import pyarrow.parquet as pq

from sparkdispatch.model.protocol import TaskDeploymentDescriptor
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.storage.results import ResultLayout
from sparkdispatch.taskexecutor.connect_server import ConnectServer
from sparkdispatch.taskexecutor.connect_url import call_metadata, grpc_target
from sparkdispatch.taskexecutor.settings import ConnectServerSettings
from sparkdispatch.taskexecutor.slot_pool import SlotProcessPool
from sparkdispatch.taskexecutor.slot_protocol import SESSION_USER, AttemptLaunch, AttemptState
from sparkdispatch.testing.local_cluster import parent_pid
from sparkdispatch.testing.waiting import eventually_blocking

WAIT_S = 120.0


def connect_settings_for_tests(**spark_properties: str) -> ConnectServerSettings:
    """A Connect server as the slot tests start one: `local[2]` on a free port, 768 MiB, 4 minutes to
    start; no Spark UI and 2 shuffle partitions unless `spark_properties` say otherwise."""
    return ConnectServerSettings(
        spark_master="local[2]",
        port=0,
        start_timeout=240.0,
        driver_memory=768 << 20,
        spark_properties={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2", **spark_properties},
    )


def artifact(root: Path, filename: str, data: bytes) -> str:
    """A local artifact file as the TaskExecutor's cache keeps it: in a directory of its own per content."""
    path = root / "cache" / hashlib.sha256(data).hexdigest() / filename
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return str(path)


def new_job_id() -> str:
    return uuid.uuid4().hex


def deployment(
    tmp_path: Path,
    entrypoint: str,
    *,
    job_id: str,
    slot_index: int = 0,
    subtask_index: int = 0,
    parallelism: int = 1,
    attempt: int = 0,
    params: dict[str, Any] | None = None,
    **fields: Any,
) -> TaskDeploymentDescriptor:
    execution_id = uuid.uuid4().hex
    return TaskDeploymentDescriptor(
        job_id=job_id,
        job_master_id="jm-1",
        execution_id=execution_id,
        vertex_id="v",
        entrypoint=entrypoint,
        subtask_index=subtask_index,
        parallelism=parallelism,
        attempt=attempt,
        allocation_id=f"alloc-{slot_index}",
        slot_index=slot_index,
        result_path=ResultLayout(str(tmp_path / "results")).attempt_path(job_id, "v", subtask_index, execution_id),
        params={"marker_dir": str(tmp_path / "markers"), **(params or {})},
        **fields,
    )


class Attempt:
    """`pool.run` in a thread of its own: its states as they come, its end."""

    def __init__(self, pool: SlotProcessPool, tdd: TaskDeploymentDescriptor, artifacts: list[str]) -> None:
        self.tdd = tdd
        self.states: list[ExecutionState] = []
        self.end: AttemptState | None = None
        self.ended_at = 0.0
        self._thread = threading.Thread(target=self._run, args=(pool, artifacts), daemon=True)
        self._thread.start()

    def _run(self, pool: SlotProcessPool, artifacts: list[str]) -> None:
        self.end = pool.run(AttemptLaunch(self.tdd, tuple(artifacts)), lambda s: self.states.append(s.state))
        self.ended_at = time.monotonic()

    def join(self, timeout: float = WAIT_S) -> AttemptState:
        self._thread.join(timeout)
        assert self.end is not None, f"execution {self.tdd.execution_id} did not end within {timeout:g}s"
        return self.end


def run(pool: SlotProcessPool, tdd: TaskDeploymentDescriptor, artifacts: list[str]) -> AttemptState:
    states: list[ExecutionState] = []
    end = pool.run(AttemptLaunch(tdd, tuple(artifacts)), lambda s: states.append(s.state))
    assert states == [ExecutionState.INITIALIZING, ExecutionState.RUNNING][: len(states)]
    return end


def rows_of(end: AttemptState) -> list[dict[str, Any]]:
    assert end.state is ExecutionState.FINISHED and end.result_path is not None, end
    rows: list[dict[str, Any]] = pq.read_table(end.result_path).to_pylist()
    return rows


def wait_for_marker(tmp_path: Path, name: str, timeout: float = WAIT_S) -> int:
    """The pid a task wrote into its marker file."""
    path = tmp_path / "markers" / name
    return int(
        eventually_blocking(lambda: path.read_text() if path.exists() else None, f"the marker {name}", timeout=timeout)
    )


def session_state(server: ConnectServer, session_id: str) -> str:
    """`open` when the server takes a call in the slot processes' session `session_id`, `closed` when it
    says the session was released (asked with grpc alone: no Connect client in this process)."""
    request = (
        _field(1, session_id.encode()) + _field(2, _field(1, SESSION_USER.encode())) + bytes([4 << 3, 1])
    )  # InterruptRequest{session_id, user_context{user_id}, interrupt_type: ALL}
    with grpc.insecure_channel(grpc_target(server.url)) as channel:
        try:
            channel.unary_unary("/spark.connect.SparkConnectService/Interrupt")(
                request, timeout=10, metadata=call_metadata(server.url)
            )
        except grpc.RpcError as exc:
            if "SESSION_CLOSED" in str(exc.details()):
                return "closed"
            raise
    return "open"


def _field(number: int, payload: bytes) -> bytes:
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


def _processes() -> list[tuple[int, int, bytes]]:
    """Every process: (pid, parent pid, command line)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = parent_pid(int(entry.name))
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        found.append((int(entry.name), parent, command))
    return found


def _templates(processes: list[tuple[int, int, bytes]]) -> set[int]:
    return {pid for pid, parent, command in processes if parent == os.getpid() and b"slot_template" in command}


def slot_templates() -> set[int]:
    """The slot-process templates this test process started that still exist (zombies included)."""
    return _templates(_processes())


def slot_processes() -> set[int]:
    """The slot processes this test process started, itself or through its templates, that still
    exist (zombies included)."""
    processes = _processes()
    templates = _templates(processes)
    return {
        pid
        for pid, parent, command in processes
        if (parent == os.getpid() and b"slot_process" in command) or parent in templates
    }


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False
