"""The worker-daemon template's socket directories: a killed TaskExecutor's are removed by the next start."""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path

import pytest

from sparkdispatch.taskexecutor.worker_daemons import (
    SOCKET_DIRECTORY_PREFIX,
    SOCKET_NAME,
    STALE_AFTER_S,
    remove_stale_socket_directories,
)


def test_only_old_socket_directories_that_nobody_serves_are_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    now = 1_000_000.0
    old, young, served = (tmp_path / f"{SOCKET_DIRECTORY_PREFIX}{name}" for name in ("a", "b", "c"))
    for directory in (old, young, served, tmp_path / "unrelated"):
        directory.mkdir()
    (old / SOCKET_NAME).write_text("")  # a socket file left behind: nobody listens on it
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as listener:
        listener.bind(str(served / SOCKET_NAME))
        listener.listen(1)
        for directory in (old, served, tmp_path / "unrelated"):
            os.utime(directory, (now - STALE_AFTER_S - 1, now - STALE_AFTER_S - 1))
        os.utime(young, (now - 1, now - 1))
        assert remove_stale_socket_directories(now) == 1
    assert not old.exists()
    assert young.exists() and served.exists() and (tmp_path / "unrelated").exists()
