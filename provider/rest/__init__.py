"""The REST endpoint and web UI of the master; `settings` holds what it reads from the configuration."""
