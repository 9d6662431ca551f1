"""One JobMaster per job: ExecutionGraph, batch scheduling, restarts and region failover.

`JobMaster` (job_master.py) drives an `ExecutionGraph` (execution_graph.py); `failover.py`
picks the subtasks a failure restarts and `restart.py` decides whether and when. The
components it talks to are Protocols in `gateways.py`.
"""

from sparkdispatch.jobmaster.job_master import JobMaster

__all__ = ["JobMaster"]
