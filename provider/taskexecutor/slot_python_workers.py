"""Spark's Python workers of a slot process's next Connect session, started before a job takes it.

Spark starts a Python worker daemon per Connect session at the session's first Python UDF, and a
worker per concurrent task, which imports pyspark's worker, pandas and pyarrow (Arrow-optimized UDFs
are Spark 4's default). Measured on a 2-core host at a load of 2.5-5 (2026-11-28): a job session's
first UDF took 3.9-6.1 s, the same UDF in a session that had run one UDF before 0.7-0.9 s, the
job's own module added as an artifact in between. So the session a new slot process makes ahead
for its first job (`SlotProcess.warm`) runs one UDF over as many partitions as workers are wanted,
off the job's path; a job that takes the session first interrupts it. The UDF is a builtin (`abs`),
which every interpreter Spark may run has, whatever the job's Python environment holds; its
operation carries `TAG`, so that only it is interrupted.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql.connect.session import SparkSession

log = logging.getLogger(__name__)

TAG = "sparkdispatch-python-workers"


class PythonWorkerStart:
    """One start of a session's Python workers (`run`, on the warming thread)."""

    def __init__(self, workers: int) -> None:
        self._workers = workers
        self._lock = threading.Lock()
        self._session: SparkSession | None = None
        self._stopped = False

    def run(self, session: SparkSession) -> None:
        """One UDF over `workers` partitions of `session`; a failure is logged (a job starts its workers then)."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import LongType

        with self._lock:
            if self._stopped:
                return
            self._session = session
        began = time.monotonic()
        session.addTag(TAG)  # this thread's operations only
        try:
            session.range(0, self._workers, 1, self._workers).select(F.udf(abs, LongType())("id")).collect()
        except Exception as exc:  # noqa: BLE001 - stopped, or the server's trouble: the job pays
            with self._lock:
                if not self._stopped:
                    log.warning("starting Spark's Python workers ahead failed: %s", exc)
            return
        finally:
            session.removeTag(TAG)
        log.info("Spark's Python workers of a session made ahead started in %.2fs", time.monotonic() - began)

    def stop(self) -> None:
        """Never begin, or interrupt the UDF if it runs."""
        with self._lock:
            self._stopped = True
            session = self._session
        if session is not None:
            try:
                session.interruptTag(TAG)
            except Exception as exc:  # noqa: BLE001 - the UDF then runs to its end
                log.warning("interrupting the start of Spark's Python workers failed: %s", exc)
