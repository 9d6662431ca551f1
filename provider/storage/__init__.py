"""Files on the cluster's shared storage: result partitions (results) and attempt logs
(attempt_logs).
"""
