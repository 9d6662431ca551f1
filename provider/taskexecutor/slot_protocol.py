"""What a TaskExecutor and its slot processes tell each other: JSON lines over a socketpair.

The TaskExecutor (`SlotProcessPool`) sends

    {"type": "warm", "connect_url": ..., "python_workers": N}
                                                     make the next job's session and its first calls,
                                                     then start N of Spark's Python workers in it
    {"type": "run", "tdd": {...}, "connect_url": ..., "artifact_paths": [...]}
    {"type": "cancel", "execution_id": ...}          interrupt the attempt's Spark operations
    {"type": "server", "connect_url": ...}           later sessions on this server (one that replaces
                                                     the current one): release those on the old one
    {"type": "stop"}                                 release the session and exit

and the slot process answers

    {"type": "ready", "pid": ...}                    once, after importing pyspark's Connect client
    {"type": "warmed", "error": null | "..."}        after a `warm`
    {"type": "session", "session_id": ..., "server_session_id": ..., "released": [...]}
                                                     the Connect session a run's job uses (user
                                                     SESSION_USER), and the server ids of sessions made
                                                     ahead and released unused since the last message
    {"type": "stopped", "released": [...]}           after a `stop`, before exiting: the same ids
    {"type": "state", "state": "INITIALIZING" | "RUNNING" | terminal, "rows", "result_path", "input_files", "failure"}

A `run` is answered by its states, the terminal one last. Both ends import this module, which
imports no pyspark.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkdispatch.config.options import TASKEXECUTOR_ATTEMPT_LOG_MAX_SIZE
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.model.job_result import Failure
from sparkdispatch.model.protocol import TaskDeploymentDescriptor
from sparkdispatch.taskexecutor.kept_results import job_dir, kept_path

Message = dict[str, Any]

READY = "ready"
WARM = "warm"
WARMED = "warmed"
RUN = "run"
CANCEL = "cancel"
STOP = "stop"
STOPPED = "stopped"
SERVER = "server"
STATE = "state"
SESSION = "session"
#: slot process → TaskExecutor, when a run's `start_before` passed: is there a fresh one?
MAY_START = "may-start"
#: TaskExecutor → slot process, the answer: `{"start_before": float | None}`
START_DEADLINE = "start-deadline"
#: How long a slot process waits for that answer.
MAY_START_WAIT_S = 10.0
#: TaskExecutor → slot-process template, and its answers (slot_template.py)
FORK = "fork"
FORKED = "forked"
EXITED = "exited"
#: The names of the template and of the slot processes it forks, in `ps` and /proc/PID/comm.
TEMPLATE_NAME = "slot-template"
SLOT_PROCESS_NAME = "slot-process"

#: The Connect user of the slot processes' sessions: who may interrupt and release them.
SESSION_USER = "sparkdispatch"


class ControlChannel:
    """One end of the socketpair: whole JSON messages, one per line. `send` is thread-safe."""

    def __init__(self, sock: socket.socket) -> None:
        self._socket = sock
        self._reader = sock.makefile("rb")
        self._send_lock = threading.Lock()

    def send(self, message: Message) -> None:
        """Raises `OSError` when the other end is gone."""
        data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        with self._send_lock:
            self._socket.sendall(data)

    def receive(self) -> Message | None:
        """The next message; None once the other end closed its side (or died)."""
        try:
            line = self._reader.readline()
        except OSError:
            return None
        if not line:
            return None
        message = json.loads(line)
        if not isinstance(message, dict) or not isinstance(message.get("type"), str):
            raise ValueError(f"not a control message: {line[:200]!r}")
        return message

    def settimeout(self, timeout: float | None) -> None:
        """Bound how long `receive` waits (None: for ever); a timeout reads as the other end gone."""
        self._socket.settimeout(timeout)

    def close(self) -> None:
        self._reader.close()
        self._socket.close()


@dataclass(frozen=True)
class RunRequest:
    """One attempt for a slot process: the deployment, the job's Connect server, its log (the driver's
    messages, driver_log.py) and the job's local artifacts."""

    tdd: TaskDeploymentDescriptor
    connect_url: str
    artifact_paths: tuple[str, ...] = ()
    driver_log: str | None = None
    #: `time.monotonic()` (one clock for all processes) after which the function must not start
    start_before: float | None = None
    #: the cap of the attempt's log file (`taskexecutor.attempt-log.max-size`)
    log_max_size: int = TASKEXECUTOR_ATTEMPT_LOG_MAX_SIZE.default
    #: where the TaskExecutor keeps results (`kept_results.py`): a kept vertex's result goes there
    kept_results_dir: str | None = None

    def write_path(self) -> str:
        """Where the attempt writes a returned DataFrame: `tdd.result_path`, or its TaskExecutor's
        disk for a kept result (`ValueError` when the TaskExecutor has no directory for them)."""
        if not self.tdd.keep_result:
            return self.tdd.result_path
        if self.kept_results_dir is None:
            raise ValueError("this TaskExecutor has no directory for kept results")
        return kept_path(Path(self.kept_results_dir), self.tdd)

    def kept_job_dir(self) -> str | None:
        """Where this TaskExecutor keeps the job's results, if it keeps any."""
        return None if self.kept_results_dir is None else str(job_dir(Path(self.kept_results_dir), self.tdd.job_id))

    def to_message(self) -> Message:
        return {
            "type": RUN,
            "tdd": self.tdd.to_dict(),
            "connect_url": self.connect_url,
            "artifact_paths": list(self.artifact_paths),
            "driver_log": self.driver_log,
            "start_before": self.start_before,
            "log_max_size": self.log_max_size,
            "kept_results_dir": self.kept_results_dir,
        }

    @classmethod
    def from_message(cls, message: Message) -> RunRequest:
        driver_log = message.get("driver_log")
        return cls(
            tdd=TaskDeploymentDescriptor.from_dict(message["tdd"]),
            connect_url=str(message["connect_url"]),
            artifact_paths=tuple(str(p) for p in message.get("artifact_paths", ())),
            driver_log=str(driver_log) if driver_log else None,
            start_before=float(message["start_before"]) if message.get("start_before") is not None else None,
            log_max_size=int(message.get("log_max_size", TASKEXECUTOR_ATTEMPT_LOG_MAX_SIZE.default)),
            kept_results_dir=str(message["kept_results_dir"]) if message.get("kept_results_dir") else None,
        )


@dataclass(frozen=True)
class AttemptLaunch:
    """An attempt as the TaskExecutor hands it to its slot's process (`SlotProcessPool.run`), in slot
    `tdd.slot_index`."""

    tdd: TaskDeploymentDescriptor
    #: the job's code: files in the TaskExecutor's artifact cache
    artifact_paths: tuple[str, ...] = ()
    #: the function does not start after what this says (`time.monotonic()`; None: no bound)
    start_deadline: Callable[[], float | None] | None = None
    #: the interpreter of the job's Python environment, None for the TaskExecutor's own
    python: str | None = None


@dataclass(frozen=True)
class AttemptState:
    """A state an attempt reached in its slot process, with its outcome once terminal."""

    state: ExecutionState
    rows: int | None = None
    result_path: str | None = None
    input_files: tuple[str, ...] = ()
    failure: Failure | None = None
    result_schema: str | None = None
    #: FINISHED: the rows of each vertex chained into the attempt's, by subtask
    chained_rows: Mapping[str, tuple[int | None, ...]] = field(default_factory=dict)

    def to_message(self) -> Message:
        return {
            "type": STATE,
            "state": self.state.value,
            "rows": self.rows,
            "result_path": self.result_path,
            "input_files": list(self.input_files),
            "result_schema": self.result_schema,
            "failure": self.failure.to_dict() if self.failure is not None else None,
            "chained_rows": {vertex_id: list(rows) for vertex_id, rows in self.chained_rows.items()},
        }

    @classmethod
    def from_message(cls, message: Message) -> AttemptState:
        failure: Any = message.get("failure")
        rows: Any = message.get("rows")
        chained: Any = message.get("chained_rows") or {}
        return cls(
            state=ExecutionState(message["state"]),
            rows=int(rows) if rows is not None else None,
            result_path=message.get("result_path"),
            input_files=tuple(str(path) for path in message.get("input_files", ())),
            result_schema=message.get("result_schema"),
            chained_rows={
                str(vertex_id): tuple(None if n is None else int(n) for n in counts)
                for vertex_id, counts in chained.items()
            },
            failure=Failure(
                cls=str(failure["class"]), message=str(failure["message"]), traceback=str(failure.get("traceback", ""))
            )
            if failure
            else None,
        )


#: The largest message the template or its TaskExecutor sends.
MAX_PACKET = 4096


def send_packet(channel: socket.socket, message: Message, fds: list[int] | None = None) -> None:
    """One message as one packet of a SOCK_SEQPACKET socket, with `fds` passed along (the template's channel)."""
    socket.send_fds(channel, [json.dumps(message).encode()], fds or [])


def receive_packet(channel: socket.socket) -> tuple[Message | None, list[int]]:
    """The next message and the descriptors it carried; None once the other end closed its side."""
    data, fds, _, _ = socket.recv_fds(channel, MAX_PACKET, 1)
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    message = json.loads(data)
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise ValueError(f"not a template message: {data[:200]!r}")
    return message, fds
