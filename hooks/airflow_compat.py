"""What Airflow 3.0 to 3.2 lack or keep elsewhere, imported from one place (the provider supports 3.0 on).

| name | Airflow 3.3+ | earlier |
| --- | --- | --- |
| `AirflowException`, `AirflowFailException`, `TaskDeferralTimeout` | `airflow.sdk.exceptions` | `airflow.exceptions` |
| `BaseHook` | `airflow.sdk` | `airflow.hooks.base` |
| `conf` | `airflow.sdk` | `airflow.configuration` |
| `ResumableJobMixin` (durable execution) | `airflow.sdk` | `ResumableJobFallback`: submits and waits in the try |

mypy checks against the newest Airflow (the `TYPE_CHECKING` branch); the other branch runs on the older ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, cast

if TYPE_CHECKING:
    from airflow.sdk import BaseHook, ResumableJobMixin, conf
    from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferralTimeout
else:
    try:
        from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferralTimeout
    except ImportError:
        from airflow.exceptions import AirflowException, AirflowFailException, TaskDeferralTimeout
    try:
        from airflow.sdk import BaseHook
    except ImportError:
        from airflow.hooks.base import BaseHook
    try:
        from airflow.sdk import conf
    except ImportError:
        from airflow.configuration import conf


class _ResumableJob(Protocol):
    """What an operator using the fallback defines, as it would for Airflow's ResumableJobMixin."""

    submit_job: Callable[[Any], Any]  # (context) -> the job's id
    poll_until_complete: Callable[[Any, Any], None]  # (job id, context)
    get_job_result: Callable[[Any, Any], Any]  # (job id, context) -> the task's return value


class ResumableJobFallback:
    """Durable execution where Airflow has none (before 3.3): `execute_resumable` submits the job
    (or re-attaches by its job id, which the operator derives from the task instance) and waits for
    it within the try; nothing is kept in a task state store. The operator defines `_ResumableJob`'s
    three methods."""

    durable = False

    def execute_resumable(self, context: Any) -> Any:
        job = cast(_ResumableJob, self)
        external_id = job.submit_job(context)
        job.poll_until_complete(external_id, context)
        return job.get_job_result(external_id, context)


if not TYPE_CHECKING:
    try:
        from airflow.sdk import ResumableJobMixin
    except ImportError:
        ResumableJobMixin = ResumableJobFallback

__all__ = [
    "AirflowException",
    "AirflowFailException",
    "BaseHook",
    "ResumableJobFallback",
    "ResumableJobMixin",
    "TaskDeferralTimeout",
    "conf",
]
