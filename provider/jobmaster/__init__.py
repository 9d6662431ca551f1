"""One JobMaster per job: ExecutionGraph, batch scheduling, restarts and region failover.

`JobMaster` (job_master.py) drives an `ExecutionGraph` (execution_graph.py) of subtasks and their
attempts (execution.py), which the master builds in a thread (`build_execution_graph`,
recovered_graph.py, with the progress a resumed or repaired run keeps and records) before it makes
the JobMaster on its loop; `failover.py` picks the subtasks a failure restarts and `restart.py`
decides whether and when. `deployment.py` builds an attempt's descriptor and sends it until the
broker takes it; `task_executor_calls.py` holds the JobMaster's calls to TaskExecutors (deploy,
cancel, stop) and to the ResourceManager; `task_executor_reconciliation.py` reconciles the
TaskExecutors' heartbeats and reports with what the JobMaster deployed, using `reconciler.py`,
which finds deployed executions that vanished from their TaskExecutor's heartbeats.
`long_lived.py` keeps a large ExecutionGraph out of the garbage collector's walks while it lives.
`settings.py` holds what a JobMaster reads from the configuration (results directory, the
restart strategy of jobs that name none, the heartbeat thresholds).
`gateways.py` holds the JobMaster's public Protocol (`JobMasterGateway`) and the
`TaskExecutorGateway` it deploys through; the ResourceManager and the ProgressStore it calls
are typed by their own packages' Protocols.
"""

from sparkdispatch.jobmaster.gateways import JobMasterFactory, JobMasterGateway, TaskExecutorGateway
from sparkdispatch.jobmaster.job_master import JobMaster
from sparkdispatch.jobmaster.recovered_graph import build_execution_graph

__all__ = ["JobMaster", "JobMasterFactory", "JobMasterGateway", "TaskExecutorGateway", "build_execution_graph"]
