"""An attempt's log with a cap on its size (`taskexecutor.attempt-log.max-size`): the head as it
comes, then only the tail, written when the attempt ends.

The first three quarters of the cap are written as they come, so live readers (the REST log
route, the web UI, Airflow's live logs, all reading by offset) follow them. Past that a notice
line says the output is held back; the writer keeps only the last quarter of the cap of what
follows, and when the log is closed writes a line saying how many bytes were dropped, then that
tail: a failing task's last words (its traceback) stay readable. The file only grows, so offsets
already read stay valid; it ends at most the cap plus the two notice lines.

A write that fails (a full disk) stops the writing, not the reading: `copy_from` drains its pipe
to the end either way, so the task writing into it never blocks on a log nobody reads.
"""

from __future__ import annotations

import os
from typing import BinaryIO

from sparkdispatch.config.options import TASKEXECUTOR_ATTEMPT_LOG_MAX_SIZE
from sparkdispatch.config.units import format_size

#: The configuration key named in the notices.
OPTION = TASKEXECUTOR_ATTEMPT_LOG_MAX_SIZE.key
READ_CHUNK = 1 << 16


class CappedLog:
    """Writes to `file` (opened for appending) until `max_size` bytes are in it, as said above."""

    def __init__(self, file: BinaryIO, *, max_size: int) -> None:
        self._file = file
        self._max_size = max_size
        self._tail_size = max_size // 4
        self._head_size = max_size - self._tail_size
        self._written = file.tell()  # an attempt's file reopened (a deployment delivered twice) counts whole
        self._tail = bytearray()
        self._held = 0  # bytes past the head, the tail's included
        self.dropped = 0  # bytes of output that will not reach the file
        self._failed = False

    def write(self, data: bytes) -> None:
        """Append `data`, or hold it back once the head is full."""
        room = self._head_size - self._written
        if room > 0:
            self._append(data[:room])
            data = data[room:]
        if not data:
            return
        if not self._held:
            self._append(
                f"\n[sparkdispatch] this attempt's log reached {format_size(self._head_size)}; what it "
                f"writes next is held back and only its last {format_size(self._tail_size)} are written "
                f"when the attempt ends (the cap, {OPTION}, is {format_size(self._max_size)})\n".encode()
            )
        self._held += len(data)
        self._tail += data
        if len(self._tail) > self._tail_size:
            excess = len(self._tail) - self._tail_size
            del self._tail[:excess]
            self.dropped += excess

    def close(self) -> None:
        """Write the notice of what was dropped and the held-back tail, then close the file."""
        try:
            if self._held:
                self._append(
                    f"[sparkdispatch] {self.dropped} bytes of this attempt's output were dropped "
                    f"({OPTION} is {format_size(self._max_size)}); its last {len(self._tail)} bytes "
                    f"follow\n".encode()
                )
                self._append(bytes(self._tail))
        finally:
            self._tail.clear()
            try:
                self._file.close()
            except OSError:
                pass  # a full disk: what could be written was

    def copy_from(self, fd: int) -> None:
        """Write what comes from the pipe `fd` until its writers have all closed it; then close
        both. Runs in a thread of its own, and writes nothing else anywhere (its process's stdout
        may be this very pipe)."""
        try:
            while chunk := os.read(fd, READ_CHUNK):
                self.write(chunk)
        except OSError:
            pass  # the pipe itself failed: nothing more can come
        finally:
            os.close(fd)
            self.close()

    def _append(self, data: bytes) -> None:
        self._written += len(data)
        if self._failed:
            return
        try:
            self._file.write(data)
            self._file.flush()
        except OSError:
            self._failed = True  # a full disk: the rest is drained unwritten
