"""Crash-safe file writes shared by the filesystem stores: temp file, fsync, then rename or link.

A store that fences its writes (the JobResult store, the archive) writes the temp file first,
then checks its leadership (`LeadershipCheck`), then commits with one rename or link and a
directory fsync: the check comes as late as it can before the change becomes visible.
`finish_in_thread` runs such a commit so that a cancelled caller still waits for it: no write
of a stopped leader lands after its components stopped.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeAlias, TypeVar

TEMP_MARK = ".tmp-"

T = TypeVar("T")

LeadershipCheck: TypeAlias = Callable[[str, str], Awaitable[None]]
"""`await check(session_id, component)`: raises `LeadershipLost` unless `session_id` leads now
(with `high-availability.mode: zookeeper`, as the ZooKeeper server sees the leader's latch)."""


def fsync_dir(directory: Path) -> None:
    """Make a rename or unlink in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# One join of a large entry's millions of pieces holds the GIL for 100 ms; joined a few thousand at a time, the
# final join copies a few hundred strings.
JSON_PIECES_JOINED = 4096


def json_bytes(data: object, *, sort_keys: bool = False) -> bytes:
    """`json.dumps(data, sort_keys=sort_keys).encode()`, the same bytes, made to be called in a thread.

    json.dumps's C encoder holds the GIL until it is done, and so stops the master's loop as long
    as if it ran on it (a 100,000-subtask job's archive entry: about a second); the pure-Python
    encoder (`iterencode`) takes longer but lets the loop run every switch interval.
    """
    chunks: list[str] = []
    pieces: list[str] = []
    for piece in json.JSONEncoder(sort_keys=sort_keys).iterencode(data):
        pieces.append(piece)
        if len(pieces) == JSON_PIECES_JOINED:
            chunks.append("".join(pieces))
            pieces.clear()
    chunks.append("".join(pieces))
    return "".join(chunks).encode()


def write_temp(target: Path, data: bytes) -> Path:
    """A durable temp file beside `target` holding `data`; commit it with `replace_with` or `link_to`.
    A write that fails (a full disk, an I/O error) removes what it wrote before it raises."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f"{target.name}{TEMP_MARK}{uuid.uuid4().hex}")
    try:
        with open(temp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return temp


def replace_with(temp: Path, target: Path) -> None:
    """Replace `target` with the temp file, durably."""
    os.replace(temp, target)
    fsync_dir(target.parent)


def link_to(temp: Path, target: Path) -> bool:
    """Make the temp file `target` only if `target` does not exist yet (a hard link never
    overwrites); False if it does. The temp file stays for the caller to remove."""
    try:
        os.link(temp, target)
    except FileExistsError:
        return False
    fsync_dir(target.parent)
    return True


def write_atomic(target: Path, data: bytes) -> None:
    """Replace `target` with `data`: readers see the old file or the new one, never a torn one."""
    temp = write_temp(target, data)
    try:
        replace_with(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


async def finish_in_thread(function: Callable[..., T], *args: object) -> T:
    """`function(*args)` in a thread; if the caller is cancelled meanwhile, it still waits for
    the thread to end before the cancellation goes on (the thread cannot be stopped)."""
    future = asyncio.ensure_future(asyncio.to_thread(function, *args))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        await asyncio.wait([future])
        raise


def is_temp(path: Path) -> bool:
    """A leftover of a write interrupted by a crash."""
    return TEMP_MARK in path.name
