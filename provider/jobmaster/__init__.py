"""One JobMaster per job: ExecutionGraph, scheduling, restarts."""
