"""A TaskExecutor's settings, read once from a `Configuration`: its Spark Connect server, when it is
replaced, its slot processes, and where jobs' Python environments are built from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sparkdispatch.config import Configuration
from sparkdispatch.config.options import (
    PYTHON_ENVIRONMENTS_DIR,
    PYTHON_ENVIRONMENTS_MAX_SIZE,
    PYTHON_EXTRA_INDEX_URL,
    PYTHON_FIND_LINKS,
    PYTHON_INDEX_URL,
    PYTHON_NO_INDEX,
    SPARK_MASTER,
    TASKEXECUTOR_ATTEMPT_LOG_MAX_SIZE,
    TASKEXECUTOR_CANCELLATION_TIMEOUT,
    TASKEXECUTOR_CONNECT_DRIVER_MEMORY,
    TASKEXECUTOR_CONNECT_PORT,
    TASKEXECUTOR_CONNECT_RECYCLE_OPEN_FILE_GROWTH,
    TASKEXECUTOR_CONNECT_RECYCLE_SESSIONS,
    TASKEXECUTOR_CONNECT_RECYCLE_THREAD_GROWTH,
    TASKEXECUTOR_CONNECT_START_TIMEOUT,
    TASKEXECUTOR_SLOT_PROCESS_ENVIRONMENT_SPARES,
    TASKEXECUTOR_SLOT_PROCESS_SPARES,
    TASKEXECUTOR_SLOT_PROCESS_PYTHON_WORKERS,
    TASKEXECUTOR_SLOT_PROCESS_TEMPLATE,
)
from sparkdispatch.taskexecutor.process_usage import ProcessUsage


def is_local_master(spark_master: str) -> bool:
    """Whether `spark.master` runs the executors in the driver's JVM (`local`, `local[4]`, `local[*, 2]`)."""
    return spark_master == "local" or spark_master.startswith("local[")


@dataclass(frozen=True)
class ConnectServerSettings:
    """A TaskExecutor's Spark Connect server: its Spark master, loopback port, start timeout and heap."""

    spark_master: str
    port: int  # 0 picks a free port
    start_timeout: float  # seconds, warm-up included
    driver_memory: int  # bytes
    spark_properties: Mapping[str, str] = field(repr=False)  # the other `spark.*` keys; may hold secrets

    @classmethod
    def from_config(cls, config: Configuration) -> ConnectServerSettings:
        return cls(
            spark_master=config.get(SPARK_MASTER),
            port=config.get(TASKEXECUTOR_CONNECT_PORT),
            start_timeout=config.get(TASKEXECUTOR_CONNECT_START_TIMEOUT),
            driver_memory=config.get(TASKEXECUTOR_CONNECT_DRIVER_MEMORY),
            spark_properties=config.spark_properties,
        )


@dataclass(frozen=True)
class RecyclePolicy:
    """When a Connect server is replaced (`server_recycling`); 0 disables a bound."""

    sessions: int = 200
    thread_growth: int = 1000
    open_file_growth: int = 2000

    @classmethod
    def from_config(cls, config: Configuration) -> RecyclePolicy:
        return cls(
            sessions=config.get(TASKEXECUTOR_CONNECT_RECYCLE_SESSIONS),
            thread_growth=config.get(TASKEXECUTOR_CONNECT_RECYCLE_THREAD_GROWTH),
            open_file_growth=config.get(TASKEXECUTOR_CONNECT_RECYCLE_OPEN_FILE_GROWTH),
        )

    def reason(self, *, sessions: int, usage: ProcessUsage | None, warm: ProcessUsage | None) -> str | None:
        """Why a server with this many job sessions made and this usage (and `warm` after its
        warm-up) is due for replacement; None when it is not."""
        if self.sessions and sessions >= self.sessions:
            return f"its slot processes made {sessions} job sessions on it (bound {self.sessions})"
        if usage is None or warm is None:
            return None
        if self.thread_growth and usage.threads - warm.threads >= self.thread_growth:
            return (
                f"its JVM has {usage.threads} threads, {usage.threads - warm.threads} more than after its "
                f"warm-up (bound {self.thread_growth})"
            )
        if self.open_file_growth and usage.open_files - warm.open_files >= self.open_file_growth:
            return (
                f"its JVM has {usage.open_files} open files, {usage.open_files - warm.open_files} more than "
                f"after its warm-up (bound {self.open_file_growth})"
            )
        return None


@dataclass(frozen=True)
class SlotPoolSettings:
    """A TaskExecutor's slot processes: warm spares, cancellation timeout, start and stop bounds (seconds),
    the cap of each attempt's log (bytes)."""

    spares: int = TASKEXECUTOR_SLOT_PROCESS_SPARES.default
    environment_spares: int = TASKEXECUTOR_SLOT_PROCESS_ENVIRONMENT_SPARES.default  # in jobs' Python environments
    cancellation_timeout: float = 30.0
    start_timeout: float = 120.0  # a new slot process's imports and first action
    stop_grace: float = 10.0  # a retired slot process's session release, before it is killed
    attempt_log_max_size: int = TASKEXECUTOR_ATTEMPT_LOG_MAX_SIZE.default
    template: bool = TASKEXECUTOR_SLOT_PROCESS_TEMPLATE.default  # fork from a template (slot_template.py)
    #: Spark Python workers a spare starts in its session made ahead (slot_python_workers.py)
    python_workers: int = TASKEXECUTOR_SLOT_PROCESS_PYTHON_WORKERS.default
    #: where attempts of kept vertices write their results (kept_results.py); None: refused
    kept_results_dir: str | None = None

    @classmethod
    def from_config(cls, config: Configuration) -> SlotPoolSettings:
        return cls(
            template=config.get(TASKEXECUTOR_SLOT_PROCESS_TEMPLATE),
            python_workers=config.get(TASKEXECUTOR_SLOT_PROCESS_PYTHON_WORKERS),
            spares=config.get(TASKEXECUTOR_SLOT_PROCESS_SPARES),
            environment_spares=config.get(TASKEXECUTOR_SLOT_PROCESS_ENVIRONMENT_SPARES),
            cancellation_timeout=config.get(TASKEXECUTOR_CANCELLATION_TIMEOUT),
            attempt_log_max_size=config.get(TASKEXECUTOR_ATTEMPT_LOG_MAX_SIZE),
        )


@dataclass(frozen=True)
class PythonEnvironmentSettings:
    """Where a TaskExecutor keeps jobs' Python environments, their size bound (bytes), and where
    their packages come from."""

    directory: Path
    max_size: int = PYTHON_ENVIRONMENTS_MAX_SIZE.default
    index_url: str = ""
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    no_index: bool = False
    #: pack each environment for a Spark cluster's executors (executor_archive.py): with a cluster master
    for_executors: bool = False

    @classmethod
    def from_config(cls, config: Configuration) -> PythonEnvironmentSettings:
        return cls(
            for_executors=not is_local_master(config.get(SPARK_MASTER)),
            directory=Path(config.get(PYTHON_ENVIRONMENTS_DIR) or config.storage_dir / "python-environments"),
            max_size=config.get(PYTHON_ENVIRONMENTS_MAX_SIZE),
            index_url=config.get(PYTHON_INDEX_URL),
            extra_index_urls=tuple(config.get(PYTHON_EXTRA_INDEX_URL).split()),
            find_links=tuple(config.get(PYTHON_FIND_LINKS).split()),
            no_index=config.get(PYTHON_NO_INDEX),
        )

    def index_arguments(self) -> list[str]:
        """uv's options saying where packages come from."""
        arguments = ["--index-url", self.index_url] if self.index_url else []
        for url in self.extra_index_urls:
            arguments += ["--extra-index-url", url]
        for location in self.find_links:
            arguments += ["--find-links", location]
        return [*arguments, "--no-index"] if self.no_index else arguments
