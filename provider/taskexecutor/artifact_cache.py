"""A TaskExecutor's local copies of user-code blobs (`ArtifactCache`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from sparkdispatch.errors import SparkDispatchError


class ArtifactCache:
    """User-code blobs fetched once per TaskExecutor into `cache_dir`: blob key → local file.

    `fetch(key, directory)` downloads a blob into `directory` and gives its file (from the leader,
    verified by its hash: `MasterClient.fetch_artifact`). Each blob has a directory of its own,
    `<cache_dir>/<key>/<file name>`, so the directory of a `.py` blob holds that module alone: a
    slot process puts it (or a `.zip` itself) on its own `sys.path`. A blob fetched before the
    TaskExecutor restarted is used as it is.
    """

    def __init__(self, fetch: Callable[[str, Path], Path], cache_dir: Path) -> None:
        self._fetch = fetch
        self._cache_dir = cache_dir
        self._lock = threading.Lock()
        self._files: dict[str, str] = {}

    def paths(self, keys: Sequence[str]) -> list[str]:
        """The local files of `keys`, in order, fetched on first use."""
        with self._lock:
            for key in keys:
                if key not in self._files:
                    self._files[key] = self._install(key)
            return [self._files[key] for key in keys]

    def _install(self, key: str) -> str:
        directory = self._cache_dir / key
        fetched = [path for path in directory.iterdir() if path.is_file() and not path.name.startswith(".")] \
            if directory.is_dir() else []
        path = fetched[0] if len(fetched) == 1 else self._fetch(key, directory)
        if path.suffix not in (".py", ".zip"):
            raise SparkDispatchError(f"artifact {key} ({path.name}) is neither a .py nor a .zip file")
        return str(path)
