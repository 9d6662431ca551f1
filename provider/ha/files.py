"""Crash-safe file writes shared by the filesystem stores: temp file, fsync, then rename or link."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

TEMP_MARK = ".tmp-"


def fsync_dir(directory: Path) -> None:
    """Make a rename or unlink in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_temp(target: Path, data: bytes) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f"{target.name}{TEMP_MARK}{uuid.uuid4().hex}")
    with open(temp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    return temp


def write_atomic(target: Path, data: bytes) -> None:
    """Replace `target` with `data`: readers see the old file or the new one, never a torn one."""
    temp = _write_temp(target, data)
    try:
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)


def create_atomic(target: Path, data: bytes) -> bool:
    """Write `target` only if it does not exist yet; False (and nothing changed) if it does.

    A hard link is atomic and, unlike rename, never overwrites.
    """
    temp = _write_temp(target, data)
    try:
        os.link(temp, target)
    except FileExistsError:
        return False
    finally:
        temp.unlink(missing_ok=True)
    fsync_dir(target.parent)
    return True


def is_temp(path: Path) -> bool:
    """A leftover of a write interrupted by a crash."""
    return TEMP_MARK in path.name
