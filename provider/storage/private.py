"""Keeping what a master or a TaskExecutor writes to its own operating-system user.

`keep_private(storage_dir)` at the start of a master, TaskExecutor or standalone process sets the
process's umask to 077 (inherited by its children: the Spark Connect server, the slot processes),
so every directory they create is 0700 and every file 0600: JobGraphs, JobResults, progress,
blobs, artifacts, logs, Spark's scratch space. Spark writes result partitions through Hadoop's
file systems, which apply Hadoop's own umask (`fs.permissions.umask-mask`, 022) instead: so a local
results directory is made here, 0700, and others cannot enter it to reach the partitions (a job's
own output elsewhere keeps Hadoop's permissions, which other users' tools may rely on). A
directory that exists already keeps its mode (it may be a mount point made by an operator), with a
warning when others may enter it. `write_private` makes one file 0600 whatever the umask.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path
from urllib.parse import urlsplit

from sparkdispatch.storage.results import ResultLayout

log = logging.getLogger(__name__)

#: Permission bits a process that keeps its files private never grants.
UMASK = 0o077


def keep_private(storage_dir: Path, *, results_dir: str) -> None:
    """Set this process's umask to `UMASK`; make `storage_dir` and `results_dir` (when it is local)
    0700 unless they exist already."""
    os.umask(UMASK)
    directories = [storage_dir]
    if ResultLayout(results_dir).is_local:
        directories.append(Path(urlsplit(results_dir).path if results_dir.startswith("file:") else results_dir))
    for directory in directories:
        directory.mkdir(parents=True, exist_ok=True)
        mode = stat.S_IMODE(directory.stat().st_mode)
        if mode & UMASK:
            log.warning(
                "%s is %04o: users other than its owner may enter it (chmod 700 it); "
                "what this process creates inside it is 0700 / 0600",
                directory,
                mode,
            )


def write_private(path: Path, data: bytes) -> None:
    """Write `path` readable by this user only (0600) from its creation on, replacing what is there."""
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)
