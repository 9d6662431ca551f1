"""Spark's Python workers of a slot process's next Connect session, started before a job takes it.

Spark starts a Python worker daemon per Connect session at the session's first Python UDF, and a
worker per concurrent task, which imports pyspark's worker, pandas and pyarrow (Arrow-optimized UDFs
are Spark 4's default). Measured on a 2-core host at a load of 2.5-5 (2026-11-28): a job session's
first UDF took 3.9-6.1 s, the same UDF in a session that had run one UDF before 0.7-0.9 s, the
job's own module added as an artifact in between. So a session made ahead for the next job
(`SlotProcess.warm`) runs one UDF over as many partitions as workers are wanted, off the job's path;
the job that takes the session finds its daemon and workers started. The UDF is a builtin (`abs`),
which every interpreter Spark may run has, whatever the job's Python environment holds.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql.connect.session import SparkSession

log = logging.getLogger(__name__)


class PythonWorkerStart:
    """Starts a session's Python workers once (`run`, on a thread of its own); `stop` cuts it short,
    for a job that needs the session now."""

    def __init__(self, session: SparkSession, workers: int) -> None:
        self._session = session
        self._workers = workers
        self._lock = threading.Lock()
        self._stopped = False
        self._running = False

    def run(self) -> None:
        """One UDF over `workers` partitions; a failure is logged (the job starts its workers then)."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import LongType

        with self._lock:
            if self._stopped:
                return
            self._running = True
        began = time.monotonic()
        try:
            frame = self._session.range(0, self._workers, 1, self._workers)
            frame.select(F.udf(abs, LongType())("id")).collect()
        except Exception as exc:  # noqa: BLE001 - cut short by `stop`, or the server's trouble: the job pays
            with self._lock:
                if not self._stopped:
                    log.warning("starting Spark's Python workers ahead failed: %s", exc)
            return
        finally:
            with self._lock:
                self._running = False
        log.info("Spark's Python workers of the next job's session started in %.2fs", time.monotonic() - began)

    def stop(self) -> None:
        """Interrupt the UDF if it runs, and keep it from starting if not."""
        with self._lock:
            self._stopped = True
            running = self._running
        if running:
            try:
                self._session.interruptAll()
            except Exception as exc:  # noqa: BLE001 - the UDF then runs to its end
                log.warning("interrupting the start of Spark's Python workers failed: %s", exc)
