"""The ResourceManager's settings, read once from a `Configuration`: heartbeats (`heartbeat.*`) and the
SlotManager's timeouts."""

from __future__ import annotations

from dataclasses import dataclass

from sparkdispatch.config import Configuration
from sparkdispatch.config.options import (
    HEARTBEAT_INTERVAL,
    HEARTBEAT_RPC_FAILURE_THRESHOLD,
    HEARTBEAT_TIMEOUT,
    RESOURCEMANAGER_TASKMANAGER_TIMEOUT,
    SLOT_REQUEST_TIMEOUT,
)


@dataclass(frozen=True)
class HeartbeatSettings:
    """`heartbeat.*`: how often TaskExecutors send heartbeats and when a silent one is lost (seconds)."""

    interval: float
    timeout: float
    rpc_failure_threshold: int  # -1: never unreachable by failed calls

    @classmethod
    def from_config(cls, config: Configuration) -> HeartbeatSettings:
        return cls(
            interval=config.get(HEARTBEAT_INTERVAL),
            timeout=config.get(HEARTBEAT_TIMEOUT),
            rpc_failure_threshold=config.get(HEARTBEAT_RPC_FAILURE_THRESHOLD),
        )


@dataclass(frozen=True)
class ResourceManagerSettings:
    """The ResourceManager's heartbeats and its SlotManager's timeouts (seconds)."""

    heartbeat: HeartbeatSettings
    slot_request_timeout: float
    task_executor_idle_timeout: float

    @classmethod
    def from_config(cls, config: Configuration) -> ResourceManagerSettings:
        return cls(
            heartbeat=HeartbeatSettings.from_config(config),
            slot_request_timeout=config.get(SLOT_REQUEST_TIMEOUT),
            task_executor_idle_timeout=config.get(RESOURCEMANAGER_TASKMANAGER_TIMEOUT),
        )
