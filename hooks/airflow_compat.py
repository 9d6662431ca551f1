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

from typing import TYPE_CHECKING, Any

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


class ResumableJobFallback:
    """Durable execution where Airflow has none (before 3.3): `execute_resumable` submits the job
    (or re-attaches by its job id, which the operator derives from the task instance) and waits for
    it within the try; nothing is kept in a task state store."""

    durable = False

    def execute_resumable(self, context: Any) -> Any:
        external_id = self.submit_job(context)
        self.poll_until_complete(external_id, context)
        return self.get_job_result(external_id, context)

    def submit_job(self, context: Any) -> Any:
        raise NotImplementedError

    def poll_until_complete(self, external_id: Any, context: Any) -> None:
        raise NotImplementedError

    def get_job_result(self, external_id: Any, context: Any) -> Any:
        raise NotImplementedError


if not TYPE_CHECKING:
    try:
        from airflow.sdk import ResumableJobMixin
    except ImportError:
        ResumableJobMixin = ResumableJobFallback

__all__ = ["AirflowException", "AirflowFailException", "BaseHook", "ResumableJobFallback", "ResumableJobMixin",
           "TaskDeferralTimeout", "conf"]
