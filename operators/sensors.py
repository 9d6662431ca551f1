"""`SparkDispatchJobSensor`: wait for a job submitted earlier (by any task, or outside Airflow)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from sparkdispatch.hooks.airflow_compat import AirflowException, AirflowFailException

from sparkdispatch.hooks.sparkdispatch import SparkDispatchHook
from sparkdispatch.errors import SparkDispatchError
from sparkdispatch.model.job_result import JobResult
from sparkdispatch.operators.deprecation import renamed_argument, warn_renamed
from sparkdispatch.operators.jobs import default_deferrable, report_result, task_failure
from sparkdispatch.operators.links import SparkDispatchJobLink, push_job_link
from sparkdispatch.operators.triggers import SparkDispatchJobTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context


class SparkDispatchJobSensor(BaseSensorOperator):
    """Succeeds when job `job_id` is FINISHED and returns its JobResult (XCom).

    A FAILED or CANCELED job fails the sensor with the remote cause (its traceback in the
    log) without retries, since a retry would find the same JobResult, or skips it with
    `soft_fail=True`; the same in `poke` and `reschedule` mode and deferred to the triggerer
    with `deferrable=True` (default from the provider config).

    :param job_id: the job to wait for; templated, e.g. `{{ ti.xcom_pull('submit') }}`.
    :param sparkdispatch_conn_id: the `sparkdispatch` connection (`conn_id`, deprecated, is its
        earlier name).
    """

    template_fields: Sequence[str] = ("job_id", "sparkdispatch_conn_id")
    operator_extra_links = (SparkDispatchJobLink(),)
    ui_color = "#fdf2c8"

    def __init__(
        self,
        *,
        job_id: str,
        sparkdispatch_conn_id: str = SparkDispatchHook.default_conn_name,
        deferrable: bool | None = None,
        conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_id = job_id
        self.sparkdispatch_conn_id = renamed_argument(
            type(self).__name__, "conn_id", "sparkdispatch_conn_id", sparkdispatch_conn_id, conn_id
        )
        self.deferrable = default_deferrable() if deferrable is None else deferrable
        self._link_pushed = False

    @cached_property
    def hook(self) -> SparkDispatchHook:
        return SparkDispatchHook(self.sparkdispatch_conn_id)

    def execute(self, context: Context) -> Any:
        try:
            if not self.deferrable:
                return super().execute(context)
            outcome = self.poke(context)
            if outcome:
                return outcome.xcom_value if isinstance(outcome, PokeReturnValue) else None
        finally:
            self.hook.close()
        self.defer(
            trigger=SparkDispatchJobTrigger(
                job_id=self.job_id,
                sparkdispatch_conn_id=self.sparkdispatch_conn_id,
                poll_interval=self.poke_interval,
                cancel_on_kill=False,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

    def poke(self, context: Context) -> PokeReturnValue:
        try:
            return self._poke(context)
        except SparkDispatchError as exc:
            raise task_failure(exc) from exc

    def _poke(self, context: Context) -> PokeReturnValue:
        client = self.hook.get_conn()
        if not self._link_pushed:
            client.job(self.job_id)  # an unknown job fails here, with the id in the message
            push_job_link(context, client.job_url(self.job_id))
            self._link_pushed = True
        result = client.execution_result(self.job_id)
        if result is None:
            self.log.info("job %s is still running", self.job_id)
            return PokeReturnValue(is_done=False)
        return PokeReturnValue(is_done=True, xcom_value=self._checked(result))

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Mapping[str, Any]:
        """Resume after the trigger fired (soft_fail is applied by the base class)."""
        if event.get("status") != "terminal":
            raise AirflowException(f"waiting for sparkdispatch job {self.job_id} failed: {event.get('message')}")
        return self._checked(JobResult.from_dict(event["result"]))

    def _checked(self, result: JobResult) -> Mapping[str, Any]:
        """The JobResult's JSON form (the XCom) when it FINISHED; else the task fails."""
        message = report_result(result, self.log)
        if message is not None:
            raise AirflowFailException(message)
        return result.to_dict()


class JobResultSensor(SparkDispatchJobSensor):
    """Deprecated: the earlier name of `SparkDispatchJobSensor`."""

    def __init__(self, **kwargs: Any) -> None:
        warn_renamed("JobResultSensor", "SparkDispatchJobSensor")
        super().__init__(**kwargs)
