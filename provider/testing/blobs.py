"""User code as the master's blobs, for tests of a TaskExecutor's artifact cache: files in a folder,
fetched by their sha256 key as `MasterClient.fetch_artifact` would."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path


class LocalBlobs:
    """`put` stores a blob, `fetch(key, directory)` copies it there (and counts it in `fetched`)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files: dict[str, Path] = {}
        self.fetched: list[str] = []

    def put(self, filename: str, data: bytes) -> str:
        key = hashlib.sha256(data).hexdigest()
        path = self.root / "blobs" / key / filename
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        self.files[key] = path
        return key

    def fetch(self, key: str, directory: Path) -> Path:
        self.fetched.append(key)
        directory.mkdir(parents=True, exist_ok=True)
        target = directory / self.files[key].name
        shutil.copyfile(self.files[key], target)
        return target
