"""The Spark driver's messages about one attempt, copied from the Connect server's log into the attempt's log.

All slots of a TaskExecutor share one Spark driver, its Connect server, whose log
(connect_server.py) names each line's thread. The server runs every operation of a session on
a thread of its own, `SparkConnectExecuteThread_opId=<operation id>`. The slot process learns
its attempt's operation ids, and the stages they ran, from the Connect client's progress
reports: a `DriverLog` is the session's progress handler, which pyspark calls at the end of each
operation and every `spark.connect.progress.reportInterval` while one runs. A warning or error
of the log is the attempt's when its thread ran one of those operations or it names one of
those stages ("... in stage 12.0 ..."; in local mode the executors' threads are the driver's);
the lines below it that are no log line of their own (a stack trace) go with it, up to
`MAX_CONTINUATION_LINES`. The server logs at WARN but for its own start lines.

The log stays open from the attempt's start to its end, so the attempt reads its own server's log
also when a newer server (a recycled one, server_recycling.py) takes over the file's name meanwhile.

Lines are copied at each progress report and when the attempt ends, so a long operation's
driver messages reach the attempt's log, and from there Airflow, while it runs. A progress
report of an operation whose stages are still running (the server reports every
`spark.connect.progress.reportInterval`, 2 s, so only long operations have one) is written too,
as a line of its stages' tasks, and the operation's end after it.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:  # the slot process imports pyspark once it starts, not with this module
    from pyspark.sql.connect.shell.progress import ProgressHandler, StageInfo

#: What the attempt's log shows before each copied line.
PREFIX = "[spark driver] "
#: A stack trace under a copied line is cut after this many lines.
MAX_CONTINUATION_LINES = 20
#: Read at most this much of the log at once: a busy driver's log is not loaded whole.
READ_CHUNK = 1 << 20

# `%d{yy/MM/dd HH:mm:ss} %p %c{1} [%t]: %m` (connect_server.py's layout)
_LOG_LINE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (?P<level>[A-Z]+) (?P<logger>\S+) \[(?P<thread>[^\]]*)\]: ")
_OPERATION_THREAD = re.compile(r"SparkConnectExecuteThread_opId=(?P<operation>[0-9a-fA-F-]+)")
_COPIED_LEVELS = frozenset({"WARN", "ERROR", "FATAL"})
_STAGE = re.compile(r"\bstage (?P<stage>\d+)\.\d+\b|\b(?:ResultStage|ShuffleMapStage) (?P<named>\d+)\b")


class DriverLog:
    """Copies the driver's lines about the current attempt from the server's log to `write`.

    `begin(log)` at an attempt's start, `end()` at its end; in between it gets the session's
    progress reports (`progress_handler`), from any thread. Without a log it does nothing.
    """

    def __init__(self, write: Callable[[str], None]) -> None:
        self.path: Path | None = None
        self._write = write
        self._lock = threading.Lock()
        self._active = False
        self._file: IO[bytes] | None = None  # the log, open while an attempt runs
        self._offset = 0
        self._pending = b""
        self._operations: set[str] = set()
        self._stages: set[int] = set()
        self._continuing = 0  # lines still to copy of the last copied line's stack trace
        self._progress: dict[str, str] = {}  # per operation, the last progress line written

    def begin(self, log: Path | None) -> None:
        """Start an attempt whose driver logs to `log`: only lines logged from now on are its."""
        with self._lock:
            self._close()
            self.path = log
            self._active = log is not None
            self._open()
            self._offset = self._size()
            self._pending = b""
            self._operations.clear()
            self._stages.clear()
            self._continuing = 0
            self._progress.clear()

    def end(self) -> None:
        """Copy what is left of the attempt's lines; later progress reports copy nothing."""
        with self._lock:
            if self._active:
                self._copy()
            self._active = False
            self._close()

    def __call__(
        self, stages: Iterable[StageInfo] | None, inflight_tasks: int, operation_id: str | None, done: bool
    ) -> None:
        with self._lock:
            if not self._active:
                return
            stages = list(stages or ())
            if operation_id:
                self._operations.add(operation_id)
            self._stages.update(stage.stage_id for stage in stages)
            self._copy()
            if operation_id:
                self._report(operation_id, stages, inflight_tasks, done)

    def _report(self, operation_id: str, stages: list[StageInfo], inflight_tasks: int, done: bool) -> None:
        if not done and any(not stage.done for stage in stages):
            line = progress_line(operation_id, stages, inflight_tasks)
            if line != self._progress.get(operation_id):
                self._progress[operation_id] = line
                self._write(line + "\n")
        elif done and operation_id in self._progress:
            del self._progress[operation_id]
            self._write(f"{PREFIX}operation {operation_id[:8]} ended\n")

    def _open(self) -> None:
        if self.path is not None and self._file is None:
            try:
                self._file = open(self.path, "rb")
            except OSError:
                self._file = None

    def _close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _size(self) -> int:
        try:
            return os.fstat(self._file.fileno()).st_size if self._file is not None else 0
        except OSError:
            return 0

    def _copy(self) -> None:
        assert self.path is not None
        self._open()  # a log that did not exist yet when the attempt began
        if self._file is None:
            return
        if self._size() < self._offset:  # truncated: it starts over
            self._offset, self._pending = 0, b""
        try:
            self._file.seek(self._offset)
            chunk = self._file.read(READ_CHUNK)
        except OSError:
            return
        if not chunk:
            return
        self._offset += len(chunk)
        *lines, self._pending = (self._pending + chunk).split(b"\n")
        copied = [PREFIX + text for text in (line.decode(errors="replace") for line in lines) if self._is_ours(text)]
        if copied:
            self._write("\n".join(copied) + "\n")

    def _is_ours(self, line: str) -> bool:
        match = _LOG_LINE.match(line)
        if match is None:
            if self._continuing > 0:
                self._continuing -= 1
                return True
            return False
        self._continuing = 0
        if match["level"] not in _COPIED_LEVELS:
            return False
        thread = _OPERATION_THREAD.search(match["thread"])
        ours = thread is not None and thread["operation"] in self._operations
        if not ours:
            ours = any(int(stage["stage"] or stage["named"]) in self._stages for stage in _STAGE.finditer(line))
        if ours:
            self._continuing = MAX_CONTINUATION_LINES
        return ours


def progress_handler(driver_log: DriverLog) -> ProgressHandler:
    """`driver_log` as the progress handler a Connect session takes (`registerProgressHandler`)."""
    from pyspark.sql.connect.shell.progress import ProgressHandler

    class _Reports(ProgressHandler):
        def __call__(
            self, stages: Iterable[StageInfo] | None, inflight_tasks: int, operation_id: str | None, done: bool
        ) -> None:
            driver_log(stages, inflight_tasks, operation_id, done)

    return _Reports()


def progress_line(operation_id: str, stages: list[StageInfo], inflight_tasks: int) -> str:
    """`[spark driver] operation 1a2b3c4d: stage 12 8/8 done, stage 13 3/8; 2 tasks running, 1.5 MiB read`."""
    parts = [
        f"stage {stage.stage_id} {stage.num_completed_tasks}/{stage.num_tasks}{' done' if stage.done else ''}"
        for stage in sorted(stages, key=lambda stage: stage.stage_id)
    ]
    read = sum(stage.num_bytes_read for stage in stages)
    tail = f"; {inflight_tasks} task{'s' if inflight_tasks != 1 else ''} running"
    if read:
        tail += f", {read / (1 << 20):.1f} MiB read"
    return f"{PREFIX}operation {operation_id[:8]}: {', '.join(parts)}{tail}"
