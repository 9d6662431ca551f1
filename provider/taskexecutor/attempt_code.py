"""What an attempt in a slot process runs and where its output goes: the job's code on `sys.path`
(`import_path_entry`), its task function (`load_entrypoint`), and the process's stdout and stderr
pointed at the attempt's log while it runs (`output_to`)."""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sparkdispatch.errors import EntrypointNotFound
from sparkdispatch.storage.capped_log import CappedLog
from sparkdispatch.taskexecutor.task_context import TaskContext

log = logging.getLogger(__name__)

#: How long an ended attempt waits for the rest of its output to reach its log.
LOG_DRAIN_S = 5.0


@contextlib.contextmanager
def output_to(path: Path | None, *, max_size: int) -> Iterator[None]:
    """This process's stdout and stderr (file descriptors 1 and 2, so Python's prints, logging and
    warnings, and what native code writes) appended to `path` meanwhile, through a pipe whose
    reader caps the file at `max_size` (capped_log.py); nothing when None, or when the file cannot
    be made (the attempt runs on, its output in the TaskExecutor's)."""
    if path is None:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        capped = CappedLog(open(path, "ab"), max_size=max_size)  # the pump thread closes it
    except OSError as exc:
        log.warning("the attempt's output stays here: its log file %s cannot be made: %s", path, exc)
        yield
        return
    read_end, write_end = os.pipe()
    pump = threading.Thread(target=capped.copy_from, args=(read_end,), daemon=True, name="attempt-log")
    pump.start()
    saved = (os.dup(1), os.dup(2))
    try:
        os.dup2(write_end, 1)
        os.dup2(write_end, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for descriptor in (write_end, *saved):
            os.close(descriptor)
        # the pipe ends once every copy of its write end is closed; a child process the task left
        # running may hold one: its output then reaches the log after the attempt, and this waits no more
        pump.join(LOG_DRAIN_S)


def load_entrypoint(entrypoint: str) -> Callable[[TaskContext], Any]:
    """`package.module:function` → the function.

    Raises `EntrypointNotFound` when the module (or a package of its path) or the function does
    not exist; an error raised while the module imports (a missing dependency of it included)
    is raised as it is, so its traceback shows where.
    """
    module_name, _, function_name = entrypoint.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise
        raise EntrypointNotFound(
            f"entrypoint {entrypoint!r}: no module named {exc.name!r} in the job's code "
            f"(its artifacts) or the slot process's installed packages"
        ) from None
    try:
        function: object = getattr(module, function_name)
    except AttributeError:
        raise EntrypointNotFound(
            f"entrypoint {entrypoint!r}: module {module_name!r} has no function {function_name!r}"
        ) from None
    if not callable(function):
        raise EntrypointNotFound(f"entrypoint {entrypoint!r} is not a function")
    return function


def import_path_entry(artifact_path: str) -> str:
    """The `sys.path` entry of a local artifact: a `.zip` itself (zipimport), a `.py` file's directory."""
    path = Path(artifact_path)
    return str(path) if path.suffix == ".zip" else str(path.parent)
