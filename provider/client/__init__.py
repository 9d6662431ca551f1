"""The REST client: one async core (rest_client) with a synchronous wrapper (sync_client), where a
client finds the leader (leader), the loop thread behind the wrapper (loop_thread) and following a
job's attempt logs (log_stream).

The clients users import stand here: `from sparkdispatch.client import SparkDispatchClient`.
"""

from sparkdispatch.client.rest_client import RetryPolicy, SparkDispatchClient, SubmittedJob
from sparkdispatch.client.sync_client import SyncSparkDispatchClient

__all__ = ["RetryPolicy", "SparkDispatchClient", "SubmittedJob", "SyncSparkDispatchClient"]
