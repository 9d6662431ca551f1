"""The "sparkdispatch job" button: a link to the job's page in the master's web UI."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow.sdk import BaseOperatorLink
from airflow.sdk.execution_time.xcom import XCom

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator, Context
    from airflow.sdk.types import TaskInstanceKey


class SparkDispatchJobLink(BaseOperatorLink):
    """Links a task to `<leader>/ui/jobs/<job id>`.

    The operator pushes the URL under `xcom_key` as soon as the job id exists, so the button
    works while the job runs, not only after the attempt ends.
    """

    name = "sparkdispatch job"

    @property
    def xcom_key(self) -> str:
        return "sparkdispatch_job_url"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        return XCom.get_value(ti_key=ti_key, key=self.xcom_key) or ""


def push_job_link(context: Context, url: str) -> None:
    """Store the job page URL for the task's link button."""
    context["ti"].xcom_push(key=SparkDispatchJobLink().xcom_key, value=url)
