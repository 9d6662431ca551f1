"""High-availability services: leader election and retrieval, JobGraph, JobResult, progress and blob stores."""
