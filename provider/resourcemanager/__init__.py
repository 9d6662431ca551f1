"""The ResourceManager and its SlotManager; `ResourceManagerGateway` is what other components call.

`settings` holds what they read from the configuration: heartbeats and the SlotManager's timeouts.
"""

from sparkdispatch.resourcemanager.messages import AllocatedSlot, ResourceOverview
from sparkdispatch.resourcemanager.resource_manager import ResourceManager, ResourceManagerGateway
from sparkdispatch.resourcemanager.slot_manager import SlotManager
from sparkdispatch.resourcemanager.slot_records import SlotListener

__all__ = [
    "AllocatedSlot",
    "ResourceManager",
    "ResourceManagerGateway",
    "ResourceOverview",
    "SlotListener",
    "SlotManager",
]
