"""Files on the cluster's shared storage: result partitions (results), attempt logs
(attempt_logs), and keeping a process's files to its own user (private).
"""
