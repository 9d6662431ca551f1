"""JobGraph stores: the submitted jobs a new leader recovers.

`FileJobGraphStore` (mode `none`) keeps `<job-id>.json` files. `ZooKeeperJobGraphStore` keeps
one znode per job under `<cluster>/jobgraphs`; a graph larger than
`high-availability.zookeeper.inline-limit` is written to a file under `storage.dir` first and
the znode holds a pointer with its sha256. Writes are fenced by the leader's latch node. There
are no per-job lock nodes, so no former leader's lock can keep a finished job from being
removed (FLINK-10011). Reads that ZooKeeper does not answer for now (connection loss, timeout,
an expiring session) raise `StoreUnavailable`, which a reader may retry; a record that cannot be
read raises `StoreError`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from abc import abstractmethod
from pathlib import Path
from typing import Any, Protocol

from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionDropped,
    ConnectionLoss,
    NoNodeError,
    NodeExistsError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.interfaces import IAsyncResult

from sparkdispatch.errors import InvalidJobGraph, StoreError, StoreUnavailable
from sparkdispatch.ha.files import finish_in_thread, is_temp, write_atomic
from sparkdispatch.ha.leader import LeaderElection
from sparkdispatch.ha.zookeeper import fenced_commit, kazoo_future
from sparkdispatch.model.job_graph import JOB_ID_PATTERN, JobGraph

log = logging.getLogger(__name__)

COMPONENT = "JobGraph store"


class JobGraphStore(Protocol):
    """The submitted jobs of a cluster, as the Dispatcher uses them; writes are fenced by the leader
    session id (`LeadershipLost` for a former leader's)."""

    @abstractmethod
    async def put(self, session_id: str, graph: JobGraph) -> None:
        """Store (or replace) the graph of `graph.job_id`."""

    @abstractmethod
    async def get(self, job_id: str) -> JobGraph | None:
        """The stored graph; None if there is none."""

    @abstractmethod
    async def remove(self, session_id: str, job_id: str) -> None:
        """Forget the job's graph; nothing happens if there is none."""

    @abstractmethod
    async def job_ids(self) -> set[str]:
        """Every job with a stored graph."""


def check_job_id(job_id: str) -> str:
    if not isinstance(job_id, str) or not JOB_ID_PATTERN.fullmatch(job_id):
        raise StoreError(f"{job_id!r} is not a job id (32 lowercase hex characters)")
    return job_id


def _stored_job_id(graph: JobGraph) -> str:
    if graph.job_id is None:
        raise InvalidJobGraph({"job_id": ["a JobGraph needs its job id before it is stored"]})
    return check_job_id(graph.job_id)


async def read_znode(result: IAsyncResult, what: str) -> Any:
    """Await a kazoo read; `StoreUnavailable` when ZooKeeper does not answer for now."""
    try:
        return await kazoo_future(result)
    except ConnectionClosedError:
        raise  # this process closed its client: nothing to retry
    except (ConnectionLoss, ConnectionDropped, OperationTimeoutError, SessionExpiredError) as exc:
        raise StoreUnavailable(
            f"reading {what}: ZooKeeper did not answer ({type(exc).__name__}); the read may be retried"
        ) from None


def _load_graph(data: bytes, origin: str) -> JobGraph:
    """The graph, validated and prepared (`JobGraph.prepare`): called in a thread, as a large one takes
    a second or more."""
    try:
        return JobGraph.from_json(data).prepare()
    except InvalidJobGraph as exc:
        raise StoreError(f"the stored JobGraph {origin} cannot be read: {exc.message}") from None


class FileJobGraphStore:
    """Mode `none`: `<directory>/<job-id>.json`, written atomically."""

    def __init__(self, directory: Path, election: LeaderElection) -> None:
        self.directory = directory
        self._election = election

    def _file(self, job_id: str) -> Path:
        return self.directory / f"{check_job_id(job_id)}.json"

    async def put(self, session_id: str, graph: JobGraph) -> None:
        job_id = _stored_job_id(graph)
        self._election.fence(session_id, COMPONENT)
        await finish_in_thread(write_atomic, self._file(job_id), graph.to_json().encode())
        log.debug("stored JobGraph of job %s (session %s)", job_id, session_id)

    async def get(self, job_id: str) -> JobGraph | None:
        path = self._file(job_id)

        def read() -> JobGraph | None:
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                return None
            return _load_graph(data, str(path))

        return await asyncio.to_thread(read)

    async def remove(self, session_id: str, job_id: str) -> None:
        path = self._file(job_id)
        self._election.fence(session_id, COMPONENT)
        await finish_in_thread(path.unlink, True)
        log.info("removed JobGraph of job %s (session %s)", job_id, session_id)

    async def job_ids(self) -> set[str]:
        def scan() -> set[str]:
            if not self.directory.is_dir():
                return set()
            return {
                p.stem
                for p in self.directory.iterdir()
                if p.suffix == ".json" and not is_temp(p) and JOB_ID_PATTERN.fullmatch(p.stem)
            }

        return await asyncio.to_thread(scan)


class ZooKeeperJobGraphStore:
    """Mode `zookeeper`: a znode per job, large graphs in files; see the module docstring."""

    def __init__(
        self,
        client: KazooClient,
        path: str,
        election: LeaderElection,
        *,
        files: Path,
        inline_limit: int,
        write_timeout: float,
    ) -> None:
        self._client = client
        self._path = path
        self._election = election
        self.files = files
        self._inline_limit = inline_limit
        self._write_timeout = write_timeout

    def _znode(self, job_id: str) -> str:
        return f"{self._path}/{check_job_id(job_id)}"

    async def put(self, session_id: str, graph: JobGraph) -> None:
        job_id = _stored_job_id(graph)
        latch = self._election.fence(session_id, COMPONENT)
        # encoding a large graph takes long: off the loop, as the file write
        written, record, data = await asyncio.to_thread(self._encode, job_id, graph)
        znode = self._znode(job_id)
        deadline = time.monotonic() + self._write_timeout
        previous: Path | None = None
        try:
            # Create first: a new job has no znode, so the pointer it may replace is read only
            # when the znode exists.
            [created] = await fenced_commit(
                self._client, latch, lambda t: t.create(znode, data), component=COMPONENT, deadline=deadline
            )
            if isinstance(created, NodeExistsError):
                previous = await self._pointed_file(znode)
                [updated] = await fenced_commit(
                    self._client, latch, lambda t: t.set_data(znode, data), component=COMPONENT, deadline=deadline
                )
                if isinstance(updated, Exception):
                    raise StoreError(f"the JobGraph of job {job_id} could not be updated: {updated!r}")
            elif isinstance(created, Exception):
                raise StoreError(f"the JobGraph of job {job_id} could not be stored: {created!r}")
        except BaseException:
            if written is not None:
                await asyncio.to_thread(written.unlink, missing_ok=True)
            raise
        if previous is not None and previous.name != record.get("file"):
            await asyncio.to_thread(previous.unlink, missing_ok=True)
        log.debug("stored JobGraph of job %s (session %s)", job_id, session_id)

    def _encode(self, job_id: str, graph: JobGraph) -> tuple[Path | None, dict[str, Any], bytes]:
        """The znode's data: the graph inline, or a pointer to its file (written here) when large."""
        body = graph.to_json().encode()
        if len(body) > self._inline_limit:
            written, record = self._write_file(job_id, body)
            return written, record, json.dumps(record, sort_keys=True).encode()
        # what json.dumps({"graph": ..., "version": 1}, sort_keys=True) gives, without decoding `body`
        return None, {"version": 1}, b'{"graph": ' + body + b', "version": 1}'

    def _write_file(self, job_id: str, body: bytes) -> tuple[Path | None, dict[str, Any]]:
        """Write a large graph's file (before the pointer to it); returns it if a failure may delete it."""
        digest = hashlib.sha256(body).hexdigest()
        path = self.files / f"{job_id}-{digest[:16]}.json"
        existed = path.exists()
        write_atomic(path, body)
        record: dict[str, Any] = {"version": 1, "file": path.name, "sha256": digest}
        # someone's pointer may use an existing file already: never delete that one on failure
        return (None if existed else path), record

    async def _pointed_file(self, znode: str) -> Path | None:
        try:
            data, _ = await read_znode(self._client.get_async(znode), znode)
        except NoNodeError:
            return None
        name = self._decode(data, znode).get("file")
        return self.files / str(name) if name else None

    def _decode(self, data: bytes, znode: str) -> dict[str, Any]:
        try:
            record = json.loads(data)
        except ValueError:
            raise StoreError(f"the znode {znode} holds no JobGraph record") from None
        if not isinstance(record, dict) or ("graph" not in record and "file" not in record):
            raise StoreError(f"the znode {znode} holds no JobGraph record")
        return record

    async def get(self, job_id: str) -> JobGraph | None:
        znode = self._znode(job_id)
        try:
            data, _ = await read_znode(self._client.get_async(znode), znode)
        except NoNodeError:
            return None
        return await asyncio.to_thread(self._load, job_id, znode, data)

    def _load(self, job_id: str, znode: str, data: bytes) -> JobGraph:
        record = self._decode(data, znode)
        if "graph" in record:
            return _load_graph(json.dumps(record["graph"]).encode(), znode)
        return self._read_file(job_id, record)

    def _read_file(self, job_id: str, record: dict[str, Any]) -> JobGraph:
        path = self.files / str(record["file"])
        try:
            body = path.read_bytes()
        except FileNotFoundError:
            raise StoreError(f"the JobGraph of job {job_id} points to {path}, which is missing") from None
        if hashlib.sha256(body).hexdigest() != record.get("sha256"):
            raise StoreError(f"the JobGraph file {path} of job {job_id} does not match its sha256; it is corrupted")
        return _load_graph(body, str(path))

    async def remove(self, session_id: str, job_id: str) -> None:
        latch = self._election.fence(session_id, COMPONENT)
        znode = self._znode(job_id)
        deadline = time.monotonic() + self._write_timeout
        try:
            pointed = await self._pointed_file(znode)
        except StoreUnavailable:
            raise
        except StoreError:
            pointed = None  # an unreadable record: its files go by their name pattern below
        [deleted] = await fenced_commit(
            self._client, latch, lambda t: t.delete(znode), component=COMPONENT, deadline=deadline
        )
        if isinstance(deleted, Exception) and not isinstance(deleted, NoNodeError):
            raise StoreError(f"the JobGraph of job {job_id} could not be removed: {deleted!r}")
        await asyncio.to_thread(self._remove_files, job_id, pointed)
        log.info("removed JobGraph of job %s (session %s)", job_id, session_id)

    def _remove_files(self, job_id: str, pointed: Path | None) -> None:
        # The pointer is gone, so no file of this job is needed any more (also not a leftover
        # of an interrupted or refused write).
        if pointed is not None:
            pointed.unlink(missing_ok=True)
        if self.files.is_dir():
            for leftover in self.files.glob(f"{job_id}-*.json*"):
                leftover.unlink(missing_ok=True)

    async def job_ids(self) -> set[str]:
        try:
            children = await read_znode(self._client.get_children_async(self._path), self._path)
        except NoNodeError:
            return set()
        return {c for c in children if JOB_ID_PATTERN.fullmatch(c)}
