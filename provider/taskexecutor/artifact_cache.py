"""A TaskExecutor's local copies of user-code blobs (`ArtifactCache`), bounded in size."""

from __future__ import annotations

import hashlib
import logging
import shutil
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sparkdispatch.errors import SparkDispatchError
from sparkdispatch.model.artifacts import ARTIFACT_SUFFIXES

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Entry:
    path: str  # the blob's local file
    size: int  # bytes its directory holds


class ArtifactCache:
    """User-code blobs (and environments' wheels) fetched once per TaskExecutor into `cache_dir`: blob key → local file.

    `fetch(key, directory)` downloads a blob into `directory` and gives its file (from the leader,
    verified by its hash: `MasterClient.fetch_artifact`). Each blob has a directory of its own,
    `<cache_dir>/<key>/<file name>`, so the directory of a `.py` blob holds that module alone: a
    slot process puts it (or a `.zip` itself) on its own `sys.path`. A blob fetched before the
    TaskExecutor restarted is used too.

    Every use hashes the cached file again: jobs run as the TaskExecutor's user, so one job's code
    could rewrite a module another job will import. A file that no longer hashes to its key is
    removed and fetched again (`repairs` counts them).

    The blobs together take at most `max_size` bytes: beyond it, the least recently used ones
    are removed, never one a running attempt uses (`use`); a blob used again later is fetched
    again. A single blob larger than the bound is kept while it is used.
    """

    def __init__(self, fetch: Callable[[str, Path], Path], cache_dir: Path, *, max_size: int) -> None:
        self._fetch = fetch
        self._cache_dir = cache_dir
        self._max_size = max_size
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, _Entry] = OrderedDict()  # least recently used first
        self._in_use: Counter[str] = Counter()
        self.repairs = 0  # cached files found changed and fetched again
        self._index_fetched()

    @property
    def size(self) -> int:
        """Bytes the cached blobs take."""
        with self._lock:
            return sum(entry.size for entry in self._entries.values())

    def keys(self) -> list[str]:
        """The cached blobs' keys, least recently used first."""
        with self._lock:
            return list(self._entries)

    @contextmanager
    def use(self, keys: Sequence[str]) -> Iterator[list[str]]:
        """The local files of `keys`, in order, fetched on first use and kept while the block runs."""
        with self._lock:
            paths = [self._file_of(key) for key in keys]
            self._in_use.update(keys)
            self._evict()
        try:
            yield paths
        finally:
            with self._lock:
                self._in_use.subtract(keys)
                self._in_use = +self._in_use  # drops the keys no attempt uses any more
                self._evict()

    def _file_of(self, key: str) -> str:
        entry = self._entries.get(key)
        if entry is not None and Path(entry.path).is_file() and not hashes_to(Path(entry.path), key):
            log.warning(
                "cached artifact %s (%s) no longer hashes to its key: changed since it was fetched "
                "(by a job's code?); fetching it again",
                key,
                entry.path,
            )
            self.repairs += 1
            shutil.rmtree(self._cache_dir / key, ignore_errors=True)
            entry = None
        if entry is None or not Path(entry.path).is_file():
            path = self._install(key)
            entry = _Entry(path, _size_of(Path(path).parent))
        self._entries[key] = entry
        self._entries.move_to_end(key)
        return entry.path

    def _install(self, key: str) -> str:
        directory = self._cache_dir / key
        path = _fetched_file(directory) or self._fetch(key, directory)
        if path.suffix not in ARTIFACT_SUFFIXES:
            shutil.rmtree(directory, ignore_errors=True)
            raise SparkDispatchError(f"artifact {key} ({path.name}) is not a .py, .zip or .whl file")
        return str(path)

    def _evict(self) -> None:
        """Remove least recently used blobs no attempt uses until the rest fits in `max_size`."""
        total = sum(entry.size for entry in self._entries.values())
        for key in [key for key in self._entries if key not in self._in_use]:
            if total <= self._max_size:
                return
            entry = self._entries.pop(key)
            shutil.rmtree(self._cache_dir / key, ignore_errors=True)
            total -= entry.size
            log.info(
                "artifact %s removed from the TaskExecutor's cache (%d bytes; the cache holds %d bytes, bound %d)",
                key,
                entry.size,
                total,
                self._max_size,
            )

    def _index_fetched(self) -> None:
        """Blobs a former run of this TaskExecutor fetched, oldest first, bound like the others."""
        if not self._cache_dir.is_dir():
            return
        found = []
        for directory in self._cache_dir.iterdir():
            path = _fetched_file(directory) if directory.is_dir() else None
            if path is not None and path.suffix in ARTIFACT_SUFFIXES:
                found.append((path.stat().st_mtime, directory.name, _Entry(str(path), _size_of(directory))))
        for _, key, entry in sorted(found):
            self._entries[key] = entry
        with self._lock:
            self._evict()


def _fetched_file(directory: Path) -> Path | None:
    """The one file a blob's directory holds (a download in progress is a hidden file), else None."""
    if not directory.is_dir():
        return None
    files = [path for path in directory.iterdir() if path.is_file() and not path.name.startswith(".")]
    return files[0] if len(files) == 1 else None


def _size_of(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.iterdir() if path.is_file())


def hashes_to(path: Path, key: str) -> bool:
    """Whether the file's SHA-256 is `key` (a blob's key is the hash of its bytes)."""
    digest = hashlib.sha256()
    with open(path, "rb") as content:
        while chunk := content.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest() == key
