"""The ResourceManager and its SlotManager."""

from sparkdispatch.resourcemanager.messages import (
    AllocatedSlot,
    ExecutionReport,
    HeartbeatPayload,
    RegistrationAck,
    ResourceOverview,
    SlotListener,
    TaskExecutorRegistration,
)
from sparkdispatch.resourcemanager.resource_manager import ResourceManager
from sparkdispatch.resourcemanager.slot_manager import SlotManager

__all__ = [
    "AllocatedSlot",
    "ExecutionReport",
    "HeartbeatPayload",
    "RegistrationAck",
    "ResourceManager",
    "ResourceOverview",
    "SlotListener",
    "SlotManager",
    "TaskExecutorRegistration",
]
