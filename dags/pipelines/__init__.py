"""Task code of the example DAGs, shipped to the TaskExecutors as an artifact."""
