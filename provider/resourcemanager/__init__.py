"""The ResourceManager and its SlotManager."""
