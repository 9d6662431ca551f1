"""Wakes this process's `filesystem://` consumers as soon as a message lands in their folder (Linux inotify).

kombu's filesystem transport finds messages by listing its folder. A deployment that comes while
a TaskExecutor idles waited for the next listing, up to `broker.polling-interval` (20 ms), and
every job's first deployment comes that way. Watched with inotify, the rename that puts a
message in place (`filesystem_transport.Channel._put`) wakes the consumer at once. Where inotify
cannot watch the folder (not Linux, the watch limit reached) nothing changes: consumers poll.
"""

from __future__ import annotations

import ctypes
import logging
import os
import struct
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

_IN_CLOEXEC = 0o2000000
_IN_MOVED_TO = 0x00000080
#: The watch is gone: the folder was removed (or its file system unmounted).
_IN_IGNORED = 0x00008000
#: Events were dropped (the kernel's queue was full): a message may have landed unseen.
_IN_Q_OVERFLOW = 0x00004000
#: `struct inotify_event` without its name: wd, mask, cookie, len; `len` bytes of name follow.
_EVENT = struct.Struct("iIII")
MESSAGE_SUFFIX = b".msg"

_lock = threading.Lock()
_watched: set[str] = set()


def watch_folder(folder: str, wake: Callable[[], None], *, ended: Callable[[], None] = lambda: None) -> bool:
    """Call `wake()`, from a daemon thread, whenever a message file is renamed into `folder`, until
    the folder is removed or the watch fails, and then `ended()`. True when it is watched (by this
    call or an earlier one of this process)."""
    key = os.path.realpath(folder)
    with _lock:
        if key in _watched:
            return True
        fd = _watch(key)
        if fd is None:
            return False
        _watched.add(key)
    threading.Thread(
        target=_wake_on_messages, args=(fd, key, wake, ended), daemon=True, name="sparkdispatch-broker-watch"
    ).start()
    return True


def watched_folders() -> frozenset[str]:
    """The folders this process watches now (real paths)."""
    with _lock:
        return frozenset(_watched)


def _watch(folder: str) -> int | None:
    """An inotify descriptor watching `folder` for files moved in; None where that cannot be."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # the C library this process already has loaded
        init, add_watch = libc.inotify_init1, libc.inotify_add_watch
    except (OSError, AttributeError):
        return None  # no inotify here: the consumers poll
    fd = int(init(_IN_CLOEXEC))
    if fd < 0:
        log.info("the broker folder %s is polled: inotify: %s", folder, os.strerror(ctypes.get_errno()))
        return None
    if int(add_watch(fd, os.fsencode(folder), _IN_MOVED_TO)) < 0:
        log.info("the broker folder %s is polled: inotify: %s", folder, os.strerror(ctypes.get_errno()))
        os.close(fd)
        return None
    return fd


def _wake_on_messages(fd: int, folder: str, wake: Callable[[], None], ended: Callable[[], None]) -> None:
    try:
        while True:
            try:
                data = os.read(fd, 64 * 1024)
            except OSError as exc:
                log.warning("watching the broker folder %s ended: %s; its consumers poll", folder, exc)
                return
            arrived = gone = False
            offset = 0
            while offset + _EVENT.size <= len(data):
                _, mask, _, length = _EVENT.unpack_from(data, offset)
                name = data[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
                offset += _EVENT.size + length
                arrived = arrived or name.endswith(MESSAGE_SUFFIX) or bool(mask & _IN_Q_OVERFLOW)
                gone = gone or bool(mask & _IN_IGNORED)
            if arrived:
                wake()
            if gone:
                return
    finally:
        os.close(fd)
        with _lock:
            _watched.discard(folder)
        ended()
