"""The REST client: one async core with a synchronous wrapper (rest_client), where a client finds the
leader (leader), the loop thread behind the wrapper (loop_thread) and following a job's attempt logs
(log_stream).

The clients users import stand here: `from sparkdispatch.client import SparkDispatchClient`.
"""

from sparkdispatch.client.rest_client import RetryPolicy, SparkDispatchClient, SubmittedJob, SyncSparkDispatchClient

__all__ = ["RetryPolicy", "SparkDispatchClient", "SubmittedJob", "SyncSparkDispatchClient"]
