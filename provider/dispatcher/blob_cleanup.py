"""The leader's removal of unused artifacts (Flink's BlobServer cleanup).

Every `blob.cleanup-interval` the leader removes the blobs that no stored JobGraph names (the
jobs running or being repaired) and that nobody used for `blob.retention`: a blob is used when
it is uploaded and when a submission or a repair names it (`claim_artifacts`), so the window
between a submission's check and its JobGraph's write is covered. A round that cannot read
every stored JobGraph removes nothing.
"""

from __future__ import annotations

import asyncio
import logging

from sparkdispatch.errors import SparkDispatchError
from sparkdispatch.ha.blob_store import BlobStore
from sparkdispatch.ha.jobgraph_store import JobGraphStore
from sparkdispatch.dispatcher.settings import BlobCleanupSettings

log = logging.getLogger(__name__)


class BlobCleaner:
    """Runs `sweep()` every interval while this master leads (`start()` / `stop()`)."""

    def __init__(self, blobs: BlobStore, jobgraphs: JobGraphStore, settings: BlobCleanupSettings) -> None:
        self._blobs = blobs
        self._jobgraphs = jobgraphs
        self._settings = settings
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="blob-cleanup")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def sweep(self) -> list[str]:
        """Remove the unused blobs now; the keys removed."""
        keep: set[str] = set()
        for job_id in await self._jobgraphs.job_ids():
            graph = await self._jobgraphs.get(job_id)
            if graph is not None:
                keep.update(graph.artifacts)
                keep.update(graph.wheel_keys())
        return await asyncio.to_thread(self._blobs.sweep_blocking, self._settings.retention, keep)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._settings.interval)
            try:
                await self.sweep()
            except (SparkDispatchError, OSError) as exc:  # the store or ZooKeeper: try again next round
                log.warning("artifact cleanup skipped this round: %s", exc)
