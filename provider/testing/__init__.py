"""Helpers to run real services (ZooKeeper, Redis) for tests, benchmarks and local clusters."""
