"""The blob store: user code (`.py`, `.zip`, `.whl`) by content, under `<storage.dir>/blobs/<cluster-id>`.

A blob's key is the sha256 of its bytes; it lives at `<key>/<original filename>`, since the
TaskExecutor treats a `.zip` and a `.py` differently. Every read hashes the file again: a
corrupted blob raises `CorruptedBlob` and is never handed out. A blob's directory's modification
time is when it was last used (uploaded, or named by a submitted job): `sweep_blocking` removes
the blobs unused for longer than `blob.retention` that no stored job names.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import shutil
import time
import uuid
from collections.abc import Collection, Mapping
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from sparkdispatch.errors import (
    BlobError,
    BlobNotFound,
    BlobTooLarge,
    CorruptedBlob,
    InvalidJobGraph,
    RepairNotPossible,
)
from sparkdispatch.ha.files import fsync_dir
from sparkdispatch.model.job_graph import BLOB_KEY_PATTERN

log = logging.getLogger(__name__)

_CHUNK = 1024 * 1024


def _check_key(key: str) -> str:
    if not isinstance(key, str) or not BLOB_KEY_PATTERN.fullmatch(key):
        raise BlobNotFound(f"{key!r} is not a blob key (64 lowercase hex characters)")
    return key


def _check_filename(filename: str) -> str:
    if (
        not isinstance(filename, str)
        or not filename
        or filename in {".", ".."}
        or "/" in filename
        or "\\" in filename
        or "\0" in filename
        or len(filename.encode()) > 255
    ):
        raise BlobError(f"{filename!r} is not a plain file name (no directories, at most 255 bytes)")
    if filename.endswith(".whl"):
        try:
            parse_wheel_filename(filename)
        except InvalidWheelFilename as exc:
            # uv installs a wheel by its name: `<name>-<version>(-<build>)?-<python>-<abi>-<platform>.whl`
            raise BlobError(f"{filename!r} is not a wheel's file name: {exc}") from None
    return filename


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class BlobReader:
    """Reads verified blobs by key (the masters' `GET /artifacts/{key}` serves them to TaskExecutors)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path_blocking(self, key: str) -> Path:
        """The verified file of `key`; `BlobNotFound`, or `CorruptedBlob` if its content changed."""
        directory = self.directory / _check_key(key)
        try:
            files = [p for p in directory.iterdir() if p.is_file()]
        except FileNotFoundError:
            raise BlobNotFound(f"no blob with key {key}") from None
        if len(files) != 1:
            raise CorruptedBlob(f"blob {key} should hold one file, found {len(files)}")
        actual = _sha256_file(files[0])
        if actual != key:
            log.error("blob %s is corrupted: its content hashes to %s", key, actual)
            raise CorruptedBlob(f"blob {key} is corrupted (its content hashes to {actual}); upload it again")
        return files[0]


class BlobStore(BlobReader):
    """Content-addressed blobs: `put` stores (the REST endpoint's uploads), `path_blocking` reads."""

    def __init__(self, directory: Path, *, max_size: int) -> None:
        super().__init__(directory)
        self.max_size = max_size

    async def put(self, data: bytes, filename: str) -> str:
        """Store `data` as `filename`; its sha256 key. `BlobTooLarge` above `blob.max-size`."""
        return await asyncio.to_thread(self.put_blocking, data, filename)

    def put_blocking(self, data: bytes, filename: str) -> str:
        _check_filename(filename)
        if len(data) > self.max_size:
            raise BlobTooLarge(f"{filename} is {len(data)} bytes; blob.max-size allows {self.max_size}")
        key = hashlib.sha256(data).hexdigest()
        final = self.directory / key
        if final.is_dir():
            try:
                self.path_blocking(key)
                self.touch_blocking((key,))
                return key  # the same content is stored already (under its first filename)
            except (CorruptedBlob, BlobNotFound):
                log.warning("replacing corrupted or incomplete blob %s", key)
                shutil.rmtree(final, ignore_errors=True)
        staging = self.directory / f"{key}.tmp-{uuid.uuid4().hex}"
        staging.mkdir(parents=True)
        try:
            with open(staging / filename, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            try:
                os.rename(staging, final)
            except OSError:
                if not final.is_dir():
                    raise
                # another writer stored the same content first
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        fsync_dir(self.directory)
        log.info("stored blob %s (%s, %d bytes)", key, filename, len(data))
        return key

    def touch_blocking(self, keys: Collection[str]) -> None:
        """Mark the blobs of `keys` used now: their retention starts again."""
        for key in keys:
            try:
                os.utime(self.directory / _check_key(key))
            except (FileNotFoundError, BlobNotFound):
                pass

    def sweep_blocking(self, retention_s: float, keep: Collection[str]) -> list[str]:
        """Remove the blobs unused for over `retention_s` seconds whose keys are not in `keep`, and
        uploads abandoned half-written as long ago; the keys removed."""
        cutoff = time.time() - retention_s
        removed: list[str] = []
        try:
            entries = list(self.directory.iterdir())
        except FileNotFoundError:
            return removed
        for entry in entries:
            blob = BLOB_KEY_PATTERN.fullmatch(entry.name) is not None
            if (blob and entry.name in keep) or (not blob and ".tmp-" not in entry.name):
                continue  # in use, or not ours
            try:
                if not entry.is_dir() or entry.stat().st_mtime >= cutoff:
                    continue
            except FileNotFoundError:
                continue
            if blob:
                # renamed away first, in one step: a reader finds the whole blob or none, never a
                # directory half emptied (which it would call corrupted)
                doomed = entry.with_name(f"{entry.name}.tmp-removed-{uuid.uuid4().hex}")
                try:
                    os.rename(entry, doomed)
                except FileNotFoundError:
                    continue
                removed.append(entry.name)
                entry = doomed
            shutil.rmtree(entry, ignore_errors=True)
        if removed:
            fsync_dir(self.directory)
            log.info("removed %d blob(s) unused for over %ds: %s", len(removed), retention_s, ", ".join(removed))
        return removed


def claim_artifacts(
    store: BlobStore,
    named: Mapping[str, str],
    *,
    wheels: Collection[str] = (),
    repairing: str | None = None,
) -> None:
    """Check the blobs a job about to run names (field → key: its artifacts and its environments'
    wheels, the fields in `wheels`), and mark them used now. `InvalidJobGraph` naming each one the
    store lacks; for the repair of job `repairing`, `RepairNotPossible`."""
    problems = artifact_problems(store, named, wheels=wheels)
    if not problems:
        store.touch_blocking(tuple(dict.fromkeys(named.values())))
    elif repairing is not None:
        raise RepairNotPossible(
            repairing,
            "its code is no longer stored (blob.retention): "
            + "; ".join(f"{k}: {' '.join(v)}" for k, v in sorted(problems.items())),
        )
    else:
        raise InvalidJobGraph(problems)


def artifact_problems(
    reader: BlobReader, named: Mapping[str, str], *, wheels: Collection[str] = ()
) -> dict[str, list[str]]:
    """For each blob a JobGraph names (field → key) that the store does not have (or has
    corrupted), or that a field of `wheels` names and is no wheel, what to do about it, under its
    field name; empty when all are there. Blocking."""
    problems: dict[str, list[str]] = {}
    for name, key in named.items():
        try:
            path = reader.path_blocking(key)
        except BlobNotFound:
            problems[name] = [f"no artifact with key {key} is stored; upload it first (POST /artifacts)"]
        except CorruptedBlob:
            problems[name] = [f"the artifact with key {key} is corrupted; upload it again"]
        else:
            if name in wheels and path.suffix != ".whl":
                problems[name] = [f"the artifact with key {key} is {path.name}, not a wheel (.whl)"]
            elif name not in wheels and path.suffix == ".whl":
                problems[name] = [f"the artifact with key {key} is a wheel: name it in environment.dependencies"]
    return problems
