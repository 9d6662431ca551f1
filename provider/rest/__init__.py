"""The REST endpoint and web UI of the master."""
