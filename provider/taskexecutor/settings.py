"""A TaskExecutor's settings, read once from a `Configuration`: its Spark Connect server and its slot
processes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sparkdispatch.config import Configuration
from sparkdispatch.config.options import (
    SPARK_MASTER, TASKEXECUTOR_CANCELLATION_TIMEOUT, TASKEXECUTOR_CONNECT_DRIVER_MEMORY, TASKEXECUTOR_CONNECT_PORT,
    TASKEXECUTOR_CONNECT_START_TIMEOUT, TASKEXECUTOR_SLOT_PROCESS_SPARES,
)


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
        return cls(spark_master=config.get(SPARK_MASTER), port=config.get(TASKEXECUTOR_CONNECT_PORT),
                   start_timeout=config.get(TASKEXECUTOR_CONNECT_START_TIMEOUT),
                   driver_memory=config.get(TASKEXECUTOR_CONNECT_DRIVER_MEMORY),
                   spark_properties=config.spark_properties)


@dataclass(frozen=True)
class SlotPoolSettings:
    """A TaskExecutor's slot processes: warm spares, cancellation timeout, start and stop bounds (seconds)."""

    spares: int = 1
    cancellation_timeout: float = 30.0
    start_timeout: float = 120.0  # a new slot process's imports and first action
    stop_grace: float = 10.0  # a retired slot process's session release, before it is killed

    @classmethod
    def from_config(cls, config: Configuration) -> SlotPoolSettings:
        return cls(spares=config.get(TASKEXECUTOR_SLOT_PROCESS_SPARES),
                   cancellation_timeout=config.get(TASKEXECUTOR_CANCELLATION_TIMEOUT))
