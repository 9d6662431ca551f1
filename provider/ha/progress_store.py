"""Job progress stores: which subtasks of a job finished and where their results are, whether a
cancel of the job was accepted, and the repair the job runs (`sparkdispatch.model.repair`).

A new leader resumes a batch job without re-running finished work (Flink's FLIP-383), and
finishes a cancel a former leader answered. Written by the leader only, fenced like the
JobGraph store. `ZooKeeperProgressStore` keeps one small znode per finished subtask,
`<cluster>/progress/<job-id>/<vertex-id>#<subtask-index>`, `<job-id>/cancel-requested` and
`<job-id>/repair`; `FileProgressStore` (mode `none`) appends one JSON line per subtask,
`{"cancel_requested": true}` and `{"repair": {...}}` to `<job-id>.jsonl`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import time
from abc import abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError, NodeExistsError

from sparkdispatch.errors import InvalidShape, StoreError
from sparkdispatch.ha.files import finish_in_thread, write_atomic
from sparkdispatch.ha.jobgraph_store import check_job_id, read_znode
from sparkdispatch.ha.leader import LeaderElection
from sparkdispatch.ha.zookeeper import fenced_commit
from sparkdispatch.model.job_graph import VERTEX_ID_PATTERN
from sparkdispatch.model.repair import Repair

log = logging.getLogger(__name__)

COMPONENT = "progress store"
# Subtask znodes are deleted this many at a time, each batch in one fenced transaction.
DELETE_BATCH = 500
# Not a subtask znode (those hold a '#'): the job's cancel was accepted.
CANCEL_NODE = "cancel-requested"
# Nor this one: the repair the job runs.
REPAIR_NODE = "repair"

Finished = dict[str, dict[int, "SubtaskProgress"]]
"""`finished[vertex_id][subtask_index]`: the FINISHED subtasks of a job."""


@dataclass(frozen=True)
class SubtaskProgress:
    """A FINISHED subtask: its result partition (None when it returned nothing), row count and the
    result's schema JSON (None when it returned nothing, or recorded before schemas were), the
    datasets its DataFrame read that are not the job's own results (`input_files`), and the
    TaskExecutor that keeps its result on its local disk (`kept_on`; None for a durable result)."""

    result_path: str | None
    rows: int | None
    result_schema: str | None = None
    input_files: tuple[str, ...] = ()
    kept_on: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The stored form: `result_path`, `rows`, and `result_schema`, `input_files` and `kept_on`
        when there are some."""
        data: dict[str, Any] = {"result_path": self.result_path, "rows": self.rows}
        if self.result_schema is not None:
            data["result_schema"] = self.result_schema
        if self.input_files:
            data["input_files"] = list(self.input_files)
        if self.kept_on is not None:
            data["kept_on"] = self.kept_on
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SubtaskProgress:
        """The stored form back; KeyError or TypeError when it is not one. Progress stored before
        schemas, input files or kept results were recorded has none."""
        schema = data.get("result_schema")
        if schema is not None and not isinstance(schema, str):
            raise TypeError(f"result_schema must be a string, got {schema!r}")
        input_files = tuple(str(path) for path in data.get("input_files", ()))
        kept_on = data.get("kept_on")
        if kept_on is not None and not isinstance(kept_on, str):
            raise TypeError(f"kept_on must be a string, got {kept_on!r}")
        return cls(data["result_path"], data["rows"], result_schema=schema, input_files=input_files, kept_on=kept_on)


@dataclass
class JobProgress:
    """`finished[vertex_id][subtask_index]` for every subtask recorded as FINISHED; whether a
    cancel of the job was accepted (`cancel_requested`); the repair the job runs, if it does."""

    job_id: str
    finished: Finished = field(default_factory=dict)
    cancel_requested: bool = False
    repair: Repair | None = None

    def complete_vertices(self, parallelism: dict[str, int]) -> set[str]:
        """The vertices (of `parallelism`: vertex id -> subtasks) whose every subtask finished."""
        return {
            vertex_id
            for vertex_id, count in parallelism.items()
            if set(self.finished.get(vertex_id, {})) >= set(range(count))
        }


def finished_to_dict(finished: Finished) -> dict[str, dict[str, Any]]:
    """The JSON form of FINISHED subtasks (as the archive keeps them)."""
    return {
        vertex_id: {str(index): entry.to_dict() for index, entry in subtasks.items()}
        for vertex_id, subtasks in finished.items()
    }


def finished_from_dict(data: dict[str, Any]) -> Finished:
    return {
        str(vertex_id): {int(index): SubtaskProgress.from_dict(entry) for index, entry in subtasks.items()}
        for vertex_id, subtasks in data.items()
    }


class ProgressStore(Protocol):
    """Finished subtasks per job, as the JobMaster records and the Dispatcher recovers them;
    writes are fenced by the leader session id (`LeadershipLost` for a former leader's)."""

    @abstractmethod
    async def record_subtask(
        self, session_id: str, job_id: str, vertex_id: str, subtask_index: int, progress: SubtaskProgress
    ) -> None:
        """A subtask FINISHED: `progress` names its result (None when it returned nothing), its
        schema JSON (for its consumers' reads) and the files it read."""

    @abstractmethod
    async def record_cancel(self, session_id: str, job_id: str) -> None:
        """A cancel of the job was accepted: the next leader cancels it if this one cannot."""

    @abstractmethod
    async def start_repair(self, session_id: str, job_id: str, kept: Finished, repair: Repair) -> None:
        """Replace the job's progress by the subtasks a repair keeps and the repair itself."""

    @abstractmethod
    async def get(self, job_id: str) -> JobProgress:
        """The job's recorded subtasks, cancel and repair; empty if there are none."""

    @abstractmethod
    async def remove(self, session_id: str, job_id: str) -> None:
        """Forget the job's progress; nothing happens if there is none."""


def _check_subtask(vertex_id: str, subtask_index: int, entry: SubtaskProgress) -> None:
    result_path, rows = entry.result_path, entry.rows
    if not isinstance(vertex_id, str) or not VERTEX_ID_PATTERN.fullmatch(vertex_id):
        raise StoreError(f"{vertex_id!r} is not a vertex id")
    if not isinstance(subtask_index, int) or subtask_index < 0:
        raise StoreError(f"subtask index must be a non-negative integer, got {subtask_index!r}")
    if result_path is not None and not isinstance(result_path, str):
        raise StoreError(f"result_path must be a string or None, got {result_path!r}")
    if rows is not None and (not isinstance(rows, int) or rows < 0):
        raise StoreError(f"rows must be a non-negative integer or None, got {rows!r}")
    if not isinstance(entry.input_files, tuple) or not all(isinstance(path, str) for path in entry.input_files):
        raise StoreError(f"input_files must be a tuple of strings, got {entry.input_files!r}")


def _record(vertex_id: str, subtask_index: int, entry: SubtaskProgress) -> dict[str, Any]:
    return {"vertex_id": vertex_id, "subtask_index": subtask_index, **entry.to_dict()}


class FileProgressStore:
    """Mode `none`: one append-only JSON-lines file per job; a torn last line is ignored."""

    def __init__(self, directory: Path, election: LeaderElection) -> None:
        self.directory = directory
        self._election = election

    def _file(self, job_id: str) -> Path:
        return self.directory / f"{check_job_id(job_id)}.jsonl"

    async def record_subtask(
        self, session_id: str, job_id: str, vertex_id: str, subtask_index: int, progress: SubtaskProgress
    ) -> None:
        _check_subtask(vertex_id, subtask_index, progress)
        path = self._file(job_id)
        self._election.fence(session_id, COMPONENT)
        line = json.dumps(_record(vertex_id, subtask_index, progress), sort_keys=True) + "\n"
        await finish_in_thread(self._append, path, line.encode())

    async def record_cancel(self, session_id: str, job_id: str) -> None:
        path = self._file(job_id)
        self._election.fence(session_id, COMPONENT)
        await finish_in_thread(self._append, path, b'{"cancel_requested": true}\n')

    async def start_repair(self, session_id: str, job_id: str, kept: Finished, repair: Repair) -> None:
        for vertex_id, subtasks in kept.items():
            for index, entry in subtasks.items():
                _check_subtask(vertex_id, index, entry)
        path = self._file(job_id)
        lines = [
            json.dumps(_record(vertex_id, index, entry), sort_keys=True)
            for vertex_id, subtasks in kept.items()
            for index, entry in subtasks.items()
        ]
        lines.append(json.dumps({"repair": repair.to_dict()}, sort_keys=True))
        data = ("\n".join(lines) + "\n").encode()
        self._election.fence(session_id, COMPONENT)
        await finish_in_thread(self._replace, path, data)

    @staticmethod
    def _replace(path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, data)

    @staticmethod
    def _append(path: Path, line: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())

    async def get(self, job_id: str) -> JobProgress:
        path = self._file(job_id)
        progress = JobProgress(job_id)
        try:
            text = await asyncio.to_thread(path.read_text)
        except FileNotFoundError:
            return progress
        for line in text.splitlines():
            try:
                raw = json.loads(line)
                if raw == {"cancel_requested": True}:
                    progress.cancel_requested = True
                    continue
                if "repair" in raw:
                    progress.repair = Repair.from_dict(raw["repair"])
                    continue
                vertex, index = str(raw["vertex_id"]), int(raw["subtask_index"])
                entry = SubtaskProgress.from_dict(raw)
            except (ValueError, KeyError, TypeError, InvalidShape):
                log.warning("skipping a torn progress line of job %s in %s", job_id, path)
                continue
            progress.finished.setdefault(vertex, {})[index] = entry
        return progress

    async def remove(self, session_id: str, job_id: str) -> None:
        path = self._file(job_id)
        self._election.fence(session_id, COMPONENT)
        await finish_in_thread(path.unlink, True)
        log.info("removed progress of job %s (session %s)", job_id, session_id)


class ZooKeeperProgressStore:
    """Mode `zookeeper`: a znode per finished subtask; see the module docstring."""

    def __init__(self, client: KazooClient, path: str, election: LeaderElection, *, write_timeout: float) -> None:
        self._client = client
        self._path = path
        self._election = election
        self._write_timeout = write_timeout

    def _job_node(self, job_id: str) -> str:
        return f"{self._path}/{check_job_id(job_id)}"

    async def record_subtask(
        self, session_id: str, job_id: str, vertex_id: str, subtask_index: int, progress: SubtaskProgress
    ) -> None:
        _check_subtask(vertex_id, subtask_index, progress)
        job_node = self._job_node(job_id)
        latch = self._election.fence(session_id, COMPONENT)
        data = json.dumps(progress.to_dict(), sort_keys=True).encode()
        await self._upsert(latch, job_node, f"{job_node}/{vertex_id}#{subtask_index}", data)

    async def record_cancel(self, session_id: str, job_id: str) -> None:
        job_node = self._job_node(job_id)
        latch = self._election.fence(session_id, COMPONENT)
        await self._upsert(latch, job_node, f"{job_node}/{CANCEL_NODE}", b"")

    async def start_repair(self, session_id: str, job_id: str, kept: Finished, repair: Repair) -> None:
        for vertex_id, subtasks in kept.items():
            for index, entry in subtasks.items():
                _check_subtask(vertex_id, index, entry)
        job_node = self._job_node(job_id)
        latch = self._election.fence(session_id, COMPONENT)
        await self._remove(latch, job_node)
        for vertex_id, subtasks in kept.items():
            for index, entry in subtasks.items():
                data = json.dumps(entry.to_dict(), sort_keys=True).encode()
                await self._upsert(latch, job_node, f"{job_node}/{vertex_id}#{index}", data)
        # last: a repair node names a progress that is whole
        await self._upsert(
            latch, job_node, f"{job_node}/{REPAIR_NODE}", json.dumps(repair.to_dict(), sort_keys=True).encode()
        )

    async def _upsert(self, latch: str, job_node: str, node: str, data: bytes) -> None:
        deadline = time.monotonic() + self._write_timeout

        async def commit(build: Callable[[Any], None]) -> Any:
            [result] = await fenced_commit(self._client, latch, build, component=COMPONENT, deadline=deadline)
            return result

        for _ in range(5):
            created = await commit(lambda t: t.create(node, data))
            if created is True or isinstance(created, str):
                return
            if isinstance(created, NoNodeError):  # the job's node is not there yet
                parent = await commit(lambda t: t.create(job_node))
                if isinstance(parent, Exception) and not isinstance(parent, NodeExistsError):
                    raise StoreError(f"cannot create {job_node}: {parent!r}")
                continue
            if isinstance(created, NodeExistsError):  # recorded before (e.g. by a former leader)
                updated = await commit(lambda t: t.set_data(node, data))
                if not isinstance(updated, Exception):
                    return
                created = updated
            if isinstance(created, Exception) and not isinstance(created, NoNodeError):
                raise StoreError(f"cannot record progress at {node}: {created!r}")
        raise StoreError(f"cannot record progress at {node}: it kept changing underneath")

    async def get(self, job_id: str) -> JobProgress:
        job_node = self._job_node(job_id)
        progress = JobProgress(job_id)
        try:
            children = await read_znode(self._client.get_children_async(job_node), job_node)
        except NoNodeError:
            return progress
        if CANCEL_NODE in children:
            progress.cancel_requested = True
        if REPAIR_NODE in children:
            node = f"{job_node}/{REPAIR_NODE}"
            try:
                data, _ = await read_znode(self._client.get_async(node), node)
                progress.repair = Repair.from_dict(json.loads(data))
            except NoNodeError:
                pass
            except (ValueError, KeyError, TypeError, InvalidShape):
                raise StoreError(f"the repair znode {node} of job {job_id} is unreadable") from None
        children = [child for child in children if child not in (CANCEL_NODE, REPAIR_NODE)]
        reads = [read_znode(self._client.get_async(f"{job_node}/{child}"), f"{job_node}/{child}") for child in children]
        outcomes = await asyncio.gather(*reads, return_exceptions=True)
        for child, outcome in zip(children, outcomes, strict=True):
            if isinstance(outcome, NoNodeError):
                continue
            if isinstance(outcome, BaseException):
                raise outcome
            vertex, _, index = child.rpartition("#")
            try:
                data, _ = outcome
                raw = json.loads(data)
                entry = SubtaskProgress.from_dict(raw)
                progress.finished.setdefault(vertex, {})[int(index)] = entry
            except (ValueError, KeyError, TypeError):
                raise StoreError(f"the progress znode {job_node}/{child} of job {job_id} is unreadable") from None
        return progress

    async def remove(self, session_id: str, job_id: str) -> None:
        job_node = self._job_node(job_id)
        latch = self._election.fence(session_id, COMPONENT)
        await self._remove(latch, job_node)
        log.info("removed progress of job %s (session %s)", job_id, session_id)

    async def _remove(self, latch: str, job_node: str) -> None:
        deadline = time.monotonic() + self._write_timeout
        try:
            children = await read_znode(self._client.get_children_async(job_node), job_node)
        except NoNodeError:
            return
        for start in range(0, len(children), DELETE_BATCH):
            batch = [f"{job_node}/{child}" for child in children[start : start + DELETE_BATCH]]
            results = await fenced_commit(
                self._client, latch, functools.partial(_delete_all, batch), component=COMPONENT, deadline=deadline
            )
            if any(isinstance(r, Exception) for r in results):
                # Someone deleted a child meanwhile: delete the rest one by one (still fenced).
                for path in batch:
                    await fenced_commit(
                        self._client,
                        latch,
                        functools.partial(_delete_all, [path]),
                        component=COMPONENT,
                        deadline=deadline,
                    )
        [deleted] = await fenced_commit(
            self._client, latch, lambda t: t.delete(job_node), component=COMPONENT, deadline=deadline
        )
        if isinstance(deleted, Exception) and not isinstance(deleted, NoNodeError):
            raise StoreError(f"cannot remove {job_node}: {deleted!r}")


def _delete_all(paths: list[str], transaction: Any) -> None:
    for path in paths:
        transaction.delete(path)
