"""Waiting for a job's JobResult over raw HTTP: the one poll of `GET /jobs/{id}/execution-result` that
local clusters, benchmarks and tests share (the API's own is `SparkDispatchClient.wait_for_result`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from sparkdispatch.model.job_result import JobResult
from sparkdispatch.model.rest_shapes import ExecutionResult
from sparkdispatch.testing.http import http_json
from sparkdispatch.testing.waiting import eventually_blocking

# The endpoint long-polls a running job (`rest.execution-result.long-poll`), so the result comes as
# soon as it exists; the interval only paces the answers that come at once (IN_PROGRESS before the
# job runs, a standby's 503) on the machine the cluster measured shares.
POLL_INTERVAL_S = 0.05


def wait_for_result(
    masters: Callable[[], Iterable[str]],
    job_id: str,
    *,
    timeout: float,
    token: str = "",
    strict: bool = False,
    request_timeout: float = 10.0,
    interval: float = POLL_INTERVAL_S,
) -> JobResult:
    """The JobResult of `job_id`, asked of the masters (REST addresses) `masters()` names at each round
    until one answers COMPLETED. Any other answer, or none, is asked again (a standby's 503, a leader
    recovering, a failover), unless `strict`: then an answer other than 200 is a `RuntimeError` at once.
    `WaitTimedOut` (a TimeoutError) after `timeout` seconds."""

    def completed() -> JobResult | None:
        for url in masters():
            try:
                status, body = http_json(
                    "GET", f"{url}/jobs/{job_id}/execution-result", token=token, timeout=request_timeout
                )
            except OSError:
                if strict:
                    raise
                continue
            if status == 200 and (result := ExecutionResult.from_dict(body).result) is not None:
                return result
            if strict and status != 200:
                raise RuntimeError(f"execution-result of {job_id} answered {status}: {body}")
        return None

    return eventually_blocking(completed, f"the JobResult of job {job_id}", timeout=timeout, interval=interval)
