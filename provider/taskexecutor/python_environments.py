"""Jobs' Python environments on a TaskExecutor (`PythonEnvironments`): built once with `uv`, kept within a size bound.

An environment is a virtual environment per distinct set of requirements, under
`<python.environments.dir>/<key>/`, whose key is the sha256 of the normalised requirements, the
wheels' blob keys, the base interpreter's version and the index options. It is layered over the
TaskExecutor's own interpreter: `uv venv` over the same Python, then a `.pth` file that adds the
TaskExecutor's site-packages directories *after* the environment's own (with their `.pth` files,
so an editable sparkdispatch is found too). pyspark's Connect client and sparkdispatch come from
the base; a package the job installs wins over the base's. (`--system-site-packages` is not used:
when the TaskExecutor runs in a virtual environment, as it normally does, it would reach the
site-packages of the interpreter *under* that environment, not the TaskExecutor's.)

The packages come from where the TaskExecutor's configuration says (`python.index-url`,
`python.extra-index-url`, `python.find-links`, `python.no-index`), never from the job. A build is
done once however many slots or jobs ask for it at the same time: one lock per key in this
process, and an exclusive `flock` on `<key>.lock` across TaskExecutors sharing the directory.
A finished environment holds a `.sparkdispatch-built` marker; one without it is a build that
was cut off, built again. A task using an environment holds a shared `flock` on its lock file,
so no TaskExecutor removes an environment another one's task uses. Beyond `max_size` the least
recently used environments no task uses are removed. When a build fails, the tasks that waited
for it get its failure rather than building again; a later task builds anew. With a cluster master
(`for_executors`), an environment is also packed for the executors once, into an archive inside
it (executor_archive.py), so it is evicted with it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import site
import subprocess
import sys
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

from sparkdispatch.errors import EnvironmentBuildFailed
from sparkdispatch.model.environment import Environment
from sparkdispatch.taskexecutor.executor_archive import ARCHIVE_NAME, pack
from sparkdispatch.taskexecutor.job_environment import job_environment
from sparkdispatch.taskexecutor.settings import PythonEnvironmentSettings

log = logging.getLogger(__name__)

BUILT_MARKER = ".sparkdispatch-built"
BASE_PTH = "_sparkdispatch_base.pth"
#: The most of a failed build's output an `EnvironmentBuildFailed` carries.
MAX_FAILURE_OUTPUT = 4000


@dataclass(frozen=True)
class ReadyEnvironment:
    """An environment a task may run in: its key, its interpreter, and its build if this use made it."""

    key: str
    python: str
    built_now: bool = False
    build_seconds: float = 0.0
    build_output: str = ""


def find_uv() -> str | None:
    """The `uv` next to this interpreter (the TaskExecutor's installation), else the one on PATH."""
    beside = Path(sys.executable).parent / "uv"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("uv")


class _KeyState:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.failed_at = 0.0  # time.monotonic() of the last failed build
        self.failure: EnvironmentBuildFailed | None = None


class PythonEnvironments:
    """The environments of the jobs run here, built on first use and evicted least recently used first.

    Thread-safe: each slot's attempt calls `use` from its own thread. `builds` counts the builds
    this object made (failed ones too).
    """

    def __init__(self, settings: PythonEnvironmentSettings, *, uv: str | None = None) -> None:
        self._settings = settings
        self._directory = settings.directory
        self._uv = uv if uv is not None else find_uv()
        self._lock = threading.Lock()
        self._keys: dict[str, _KeyState] = {}
        self._entries: OrderedDict[str, int] = OrderedDict()  # key → bytes, least recently used first
        self._in_use: Counter[str] = Counter()
        self.builds = 0
        self._index_built()

    def key_of(self, environment: Environment) -> str:
        """The cache key of `environment` here: its requirements, wheels, base Python and indexes."""
        identity = {
            "requirements": list(environment.requirements),
            "wheels": sorted(environment.wheel_keys),
            "python": sys.version,
            "base": sorted(_base_site_dirs()),
            "index": self._settings.index_arguments(),
        }
        return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:32]

    def keys(self) -> list[str]:
        """The environments kept, least recently used first."""
        with self._lock:
            return list(self._entries)

    @contextmanager
    def use(
        self,
        environment: Environment,
        wheels: Mapping[str, str],
        *,
        on_build: Callable[[str], None] = lambda _: None,
    ) -> Iterator[ReadyEnvironment]:
        """The environment built (on first use) and kept while the block runs.

        `wheels` maps each of its wheel keys to the wheel's local file. `on_build(key)` is called
        before a build starts here (not when the environment is ready, or another process builds
        it). Raises `EnvironmentBuildFailed` naming the requirement and the resolver's message.
        """
        key = self.key_of(environment)
        ready, lock_file = self._ready(key, environment, wheels, on_build)
        try:
            with self._lock:
                size = self._entries.get(key)
            if size is None:
                size = _size_of(self._directory / key)
            with self._lock:
                self._in_use[key] += 1
                self._entries[key] = size
                self._entries.move_to_end(key)
                self._evict()
            try:
                yield ready
            finally:
                with self._lock:
                    self._in_use[key] -= 1
                    self._in_use = +self._in_use
        finally:
            lock_file.close()  # drops the shared lock: another TaskExecutor may now remove it
            with self._lock:
                self._evict()

    def _ready(
        self, key: str, environment: Environment, wheels: Mapping[str, str], on_build: Callable[[str], None]
    ) -> tuple[ReadyEnvironment, _LockFile]:
        """The environment built, and its lock file held shared."""
        with self._lock:
            state = self._keys.setdefault(key, _KeyState())
        arrived = time.monotonic()
        with state.lock:
            if state.failure is not None and state.failed_at >= arrived:
                raise state.failure  # the build this task waited for failed: it would fail again now
            target = self._directory / key
            lock_file = _LockFile(self._directory / f"{key}.lock")
            try:
                lock_file.shared()
                if (target / BUILT_MARKER).is_file() and not self._needs_archive(target):
                    return ReadyEnvironment(key, str(_python_of(target))), lock_file
                lock_file.exclusive()  # not built (or packed) yet: do it, unless another TaskExecutor just did
                if (target / BUILT_MARKER).is_file():
                    if self._needs_archive(target):  # built by a TaskExecutor of a local master
                        self._pack(target)
                        with self._lock:
                            self._entries.pop(key, None)  # its size, measured again with the archive
                    lock_file.shared()
                    return ReadyEnvironment(key, str(_python_of(target))), lock_file
                on_build(key)
                try:
                    ready = self._build(key, environment, wheels)
                except EnvironmentBuildFailed as exc:
                    state.failure, state.failed_at = exc, time.monotonic()
                    raise
                lock_file.shared()
                return ready, lock_file
            except BaseException:
                lock_file.close()
                raise

    def _build(self, key: str, environment: Environment, wheels: Mapping[str, str]) -> ReadyEnvironment:
        with self._lock:
            self.builds += 1
        started = time.monotonic()
        target = self._directory / key
        shutil.rmtree(target, ignore_errors=True)
        if self._uv is None:
            raise EnvironmentBuildFailed(
                f"this TaskExecutor cannot build the job's Python environment: no `uv` next to {sys.executable} "
                "or on PATH (install sparkdispatch[taskexecutor], which brings it)"
            )
        missing = [k for k in environment.wheel_keys if k not in wheels]
        if missing:
            raise EnvironmentBuildFailed(f"the wheels {missing} of the job's environment were not fetched")
        log.info("building Python environment %s: %s", key, ", ".join(environment.dependencies))
        output: list[str] = []
        self._run(
            key,
            [self._uv, "venv", "--no-config", "--quiet", "--relocatable", "--python", sys.executable, str(target)],
            output,
        )
        _layer_over_base(target)
        install = [
            self._uv,
            "pip",
            "install",
            "--no-config",
            "--python",
            str(_python_of(target)),
            *self._settings.index_arguments(),
            *environment.requirements,
            *(wheels[k] for k in environment.wheel_keys),
        ]
        self._run(key, install, output, requirements=environment.requirements)
        if self._settings.for_executors:
            self._pack(target)
            output.append(f"packed for the Spark cluster's executors: {target / ARCHIVE_NAME}\n")
        seconds = time.monotonic() - started
        (target / BUILT_MARKER).write_text(json.dumps({"seconds": round(seconds, 3)}))
        log.info("Python environment %s built in %.2fs", key, seconds)
        return ReadyEnvironment(key, str(_python_of(target)), True, seconds, "".join(output))

    def _run(self, key: str, command: list[str], output: list[str], *, requirements: Sequence[str] = ()) -> None:
        uv_cache = self._directory / "uv-cache"
        environment = job_environment({"UV_CACHE_DIR": str(uv_cache), "UV_PYTHON_DOWNLOADS": "never"})
        environment.pop("VIRTUAL_ENV", None)
        try:
            done = subprocess.run(
                command, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=environment, check=False
            )
        except OSError as exc:
            shutil.rmtree(self._directory / key, ignore_errors=True)
            raise EnvironmentBuildFailed(f"could not run {command[0]}: {exc}") from exc
        output.append(f"$ {' '.join(command)}\n{done.stdout}{done.stderr}")
        if done.returncode != 0:
            shutil.rmtree(self._directory / key, ignore_errors=True)
            said = (done.stderr or done.stdout).strip()[-MAX_FAILURE_OUTPUT:]
            requirement = _named_requirement(said, requirements)
            raise EnvironmentBuildFailed(
                "the job's Python environment could not be built"
                + (f" ({requirement})" if requirement else "")
                + f": uv said: {said}",
                requirement=requirement,
            )

    def _needs_archive(self, target: Path) -> bool:
        return self._settings.for_executors and not (target / ARCHIVE_NAME).is_file()

    def _pack(self, target: Path) -> None:
        started = time.monotonic()
        archive = pack(target, left_out=frozenset({BUILT_MARKER}))
        log.info(
            "Python environment %s packed for executors in %.2fs (%d bytes)",
            target.name,
            time.monotonic() - started,
            archive.stat().st_size,
        )

    def _evict(self) -> None:
        """Remove least recently used environments no task uses until the rest fits in `max_size`."""
        total = sum(self._entries.values())
        for key in [key for key in self._entries if key not in self._in_use]:
            if total <= self._settings.max_size:
                return
            lock_file = _LockFile(self._directory / f"{key}.lock")
            try:
                if not lock_file.try_exclusive():
                    continue  # a task of another TaskExecutor uses it, or it is being built
                size = self._entries.pop(key)
                shutil.rmtree(self._directory / key, ignore_errors=True)
            finally:
                lock_file.close()
            total -= size
            log.info(
                "Python environment %s removed (%d bytes; the environments take %d bytes, bound %d)",
                key,
                size,
                total,
                self._settings.max_size,
            )

    def _index_built(self) -> None:
        """Environments built before (by a former run, or another TaskExecutor), oldest first."""
        if not self._directory.is_dir():
            return
        found = []
        for directory in self._directory.iterdir():
            marker = directory / BUILT_MARKER
            if marker.is_file():
                found.append((marker.stat().st_mtime, directory.name, _size_of(directory)))
        with self._lock:
            for _, key, size in sorted(found):
                self._entries[key] = size
            self._evict()


class _LockFile:
    """An open `<key>.lock`, locked with `flock` (shared or exclusive), unlocked when closed."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)

    def exclusive(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def try_exclusive(self) -> bool:
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def shared(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_SH)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _python_of(target: Path) -> Path:
    return target / "bin" / "python"


def _base_site_dirs() -> list[str]:
    """The TaskExecutor's site-packages directories (its virtual environment's, or its interpreter's)."""
    return [path for path in site.getsitepackages() if Path(path).is_dir()]


def _layer_over_base(target: Path) -> None:
    """Make the TaskExecutor's packages importable in `target`, after the environment's own."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    lines = [f"import site; site.addsitedir({path!r})" for path in _base_site_dirs()]
    (target / "lib" / version / "site-packages" / BASE_PTH).write_text("\n".join(lines) + "\n")


def _named_requirement(said: str, requirements: Sequence[str]) -> str:
    """The first of `requirements` whose name the resolver's message mentions; empty when none."""
    lowered = said.lower()
    for requirement in requirements:
        name = Requirement(requirement).name
        if name.lower() in lowered or name.lower().replace("-", "_") in lowered:
            return requirement
    return ""


def _size_of(directory: Path) -> int:
    total = 0
    for root, _, files in os.walk(directory):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total
