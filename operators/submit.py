"""`SparkDispatchSubmitJobOperator`: run a JobGraph on the sparkdispatch master from an Airflow task."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import timedelta
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from sparkdispatch.hooks.airflow_compat import AirflowException, AirflowFailException, ResumableJobMixin

from sparkdispatch.client import SyncSparkDispatchClient
from sparkdispatch.errors import JobAlreadyTerminated, SparkDispatchError, UnknownJob
from sparkdispatch.hooks.sparkdispatch import SparkDispatchHook
from sparkdispatch.model.job_result import JobResult
from sparkdispatch.model.states import JobStatus
from sparkdispatch.client.log_stream import JobLogs, vertex_parallelism
from sparkdispatch.operators.deprecation import renamed_argument, warn_renamed
from sparkdispatch.operators.jobs import (
    EnvironmentArgument,
    environment_body,
    VERTICES_XCOM_KEY,
    attempt_job_id,
    clear_generation,
    cleared_job_id,
    copy_graph,
    default_deferrable,
    find_graph_file,
    read_graph_text,
    report_result,
    result_failure_is_final,
    task_failure,
    task_job_id,
    vertex_outputs,
)
from sparkdispatch.operators.lineage import job_lineage
from sparkdispatch.operators.links import SparkDispatchJobLink, push_job_link
from sparkdispatch.operators.triggers import SparkDispatchJobTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context

    from sparkdispatch.operators.lineage import Lineage
    from pydantic import JsonValue

MAX_FRESH_ATTEMPTS = 1000
#: Airflow's `next_method` of a deferred task resumed only to fail (its trigger timed out or failed).
TRIGGER_FAIL = "__fail__"
# status strings of durable execution besides the JobStatus values: a stored job the master does
# not know, and a stored job that FINISHED before the task instance was cleared
UNKNOWN = "UNKNOWN"
FINISHED_BEFORE_CLEAR = "FINISHED_BEFORE_CLEAR"


class SparkDispatchSubmitJobOperator(ResumableJobMixin, BaseOperator):
    """Submit a JobGraph and (by default) wait for its JobResult; returns the job id.

    :param job_graph: the JobGraph: a dict, or a path to a `.json`/`.yaml` file (absolute or
        relative to the DAG's folder); templated, and so is the file's content.
    :param artifacts: local `.py`/`.zip` files or package directories, uploaded and added to
        the graph's `artifacts` (a directory is zipped, so `pipelines/` imports as `pipelines`).
    :param environment: the job's Python environment, replacing the graph's: a list of PEP 508
        requirements (`["pandas==2.2.3"]`) and local `.whl` files (uploaded), or
        `{"dependencies": [...]}`; templated. docs/task-contract.md says how it is built.
    :param sparkdispatch_conn_id: the `sparkdispatch` connection (`conn_id`, deprecated, is its
        earlier name).
    :param wait_for_completion: wait for the job to end (else return once it is accepted).
    :param deferrable: wait in the triggerer instead of a worker slot; default from
        `[sparkdispatch] default_deferrable`, else `[operators] default_deferrable`.
    :param poll_interval: seconds between checks of the job's state.
    :param cancel_on_kill: cancel the job when the task is killed, also while deferred, and when
        it times out (`execution_timeout`, or the deferral's timeout).

    **XComs.** The return value is the job id; `sparkdispatch_job_id` holds it as soon as the
    job is submitted, and `vertices` each vertex's `state`, `rows`, `result_path`, `partitions`
    and `attempts` once the job ended. Errors no retry can fix (an invalid graph, a refused
    token, a job whose entrypoint does not exist) fail the task without its retries.

    **Job ids.** The job id is derived from (dag_id, run_id, task_id, map_index) and the task
    instance's clear generation, `ti.max_tries - retries` (`clear_generation`: Airflow raises
    `max_tries` on every clear, of the task alone or of its whole run, and leaves it alone on a
    retry). So every retry computes the same id: a retry, or a restarted worker, re-attaches to
    a job that is still running and returns at once for one that FINISHED, instead of
    submitting a second copy; a clear gets a new id and runs the JobGraph again. A job that
    ended FAILED or CANCELED is never re-run under its id; the next try submits a fresh job
    whose id is the next one of a fixed chain (`attempt_job_id(first, 1)`, `..., 2)`, …), so
    retries stay idempotent as well. A graph that names its own `job_id` starts the chain at
    that id (after a clear, at `cleared_job_id(job_id, generation)`). A blocking operator also
    keeps the id in Airflow's task state store (durable execution), which a clear does not
    empty: a stored job that still runs is re-attached to even after a clear (never two copies
    at once), one that FINISHED before the clear is not. Changing a task's `retries` shifts its
    generation: change it only while none of its jobs runs. More in docs/airflow.md.
    """

    template_fields: Sequence[str] = ("job_graph", "artifacts", "environment", "sparkdispatch_conn_id")
    template_fields_renderers = {"job_graph": "json"}
    operator_extra_links = (SparkDispatchJobLink(),)
    external_id_key = "sparkdispatch_job_id"
    ui_color = "#fde8c8"

    def __init__(
        self,
        *,
        job_graph: Mapping[str, Any] | str,
        artifacts: Sequence[str] = (),
        environment: EnvironmentArgument = None,
        sparkdispatch_conn_id: str = SparkDispatchHook.default_conn_name,
        wait_for_completion: bool = True,
        deferrable: bool | None = None,
        poll_interval: float = 5.0,
        cancel_on_kill: bool = True,
        conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_graph = job_graph
        self.artifacts = list(artifacts)
        self.environment = environment
        self.sparkdispatch_conn_id = renamed_argument(
            type(self).__name__, "conn_id", "sparkdispatch_conn_id", sparkdispatch_conn_id, conn_id
        )
        self.wait_for_completion = wait_for_completion
        self.deferrable = default_deferrable() if deferrable is None else deferrable
        self.poll_interval = poll_interval
        self.cancel_on_kill = cancel_on_kill
        self.job_id: str | None = None
        self._job_url: str | None = None
        self._vertex_outcomes: list[dict[str, Any]] = []  # the ended job's vertex outputs, for OpenLineage

    @cached_property
    def hook(self) -> SparkDispatchHook:
        return SparkDispatchHook(self.sparkdispatch_conn_id)

    # -- Airflow entry points ------------------------------------------------------------------

    def execute(self, context: Context) -> str:
        try:
            if not self.wait_for_completion:
                return self.start_job(context)
            if self.deferrable:
                self._defer_until_done(self.start_job(context), context)
            self.execute_resumable(context)
            assert self.job_id is not None  # each path of execute_resumable attaches to the job it waits for
            return self.job_id
        except SparkDispatchError as exc:
            raise task_failure(exc) from exc
        finally:
            self.hook.close()

    def execute_complete(self, context: Context, event: dict[str, Any]) -> str:
        """Resume after the trigger fired: fail with the remote cause, or return the job id."""
        self.job_id = event.get("job_id")
        if event.get("status") != "terminal":
            raise AirflowException(f"waiting for sparkdispatch job {self.job_id} failed: {event.get('message')}")
        self._check_result(JobResult.from_dict(event["result"]), context)
        job_id: str = event["job_id"]
        return job_id

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """A deferral that timed out (or whose trigger failed) cancels the job before the task fails."""
        if next_method == TRIGGER_FAIL and self.cancel_on_kill:
            ti = context["ti"]
            job_id = ti.xcom_pull(task_ids=ti.task_id, key=self.external_id_key, map_indexes=ti.map_index)
            if job_id:
                self.job_id = str(job_id)
                self.log.info(
                    "job %s: the wait for it ended without its result (%s); cancelling it",
                    self.job_id,
                    (next_kwargs or {}).get("error", "trigger failed"),
                )
                self.on_kill()
                self.hook.close()
        return super().resume_execution(next_method, next_kwargs, context)

    def on_kill(self) -> None:
        if not (self.cancel_on_kill and self.job_id):
            return
        try:
            self.hook.get_conn().cancel(self.job_id)
            self.log.info("job %s: cancelled because its task was killed", self.job_id)
        except JobAlreadyTerminated:
            self.log.info("job %s had ended already; nothing to cancel", self.job_id)
        except SparkDispatchError as exc:
            self.log.warning("job %s: could not cancel it: %s", self.job_id, exc)

    # -- submission and re-attachment ---------------------------------------------------------

    def start_job(self, context: Context) -> str:
        """Re-attach to this task instance's running or FINISHED job, or submit a fresh one."""
        client = self.hook.get_conn()
        graph = self.load_graph(context)
        for job_id in self.job_chain(graph, context):
            status = self._status(job_id)
            if status is None:
                status = self._submit(client, graph, job_id)
            if status is not None and status.is_globally_terminal and status is not JobStatus.FINISHED:
                self.log.info("job %s of an earlier try ended %s; submitting a fresh attempt", job_id, status.value)
                continue
            if status is not None:
                self.log.info("job %s: re-attached to the job of an earlier try (%s)", job_id, status.value)
            self._attached(job_id, context)
            return job_id
        raise AirflowException(f"{MAX_FRESH_ATTEMPTS} jobs of this task instance failed; not submitting more")

    def job_chain(self, graph: Mapping[str, Any], context: Context) -> Iterator[str]:
        """The job ids this try may use, in order: the chain of the task instance's latest clear."""
        ti = context["ti"]
        first = graph.get("job_id") or task_job_id(ti.dag_id, ti.run_id, ti.task_id, ti.map_index)
        first = cleared_job_id(first, clear_generation(ti.max_tries, self.retries or 0))
        return (attempt_job_id(first, attempt) for attempt in range(MAX_FRESH_ATTEMPTS))

    def load_graph(self, context: Context) -> dict[str, Any]:
        """The JobGraph as a fresh dict: the given mapping, or the (rendered) file it names."""
        if isinstance(self.job_graph, Mapping):
            return copy_graph(self.job_graph)
        if not isinstance(self.job_graph, str):
            raise AirflowException(f"job_graph must be a dict or a path, not {type(self.job_graph).__name__}")
        search_path = [Path(folder) for folder in _dag_folders(context)]
        path = find_graph_file(self.job_graph, search_path)
        if path is None:
            return read_graph_text(self.job_graph, source="job_graph")
        text = self.render_template(path.read_text(), context)
        return read_graph_text(text, source=str(path))

    def _submit(self, client: SyncSparkDispatchClient, graph: Mapping[str, Any], job_id: str) -> JobStatus | None:
        """Submit `graph` as job `job_id`: None once the master accepted it as a new job.

        A master that has the job already with the same graph (another try submitted it since
        this one looked, or this try's earlier answer was lost) answers with that job, whatever
        its status; the status it answered is returned.
        """
        artifacts = [*graph.get("artifacts", []), *self._upload_artifacts(client)]
        submitted = client.submit({**self._with_environments(client, graph), "job_id": job_id, "artifacts": artifacts})
        if submitted.created:
            self.log.info("job %s: submitted (%s)", job_id, graph.get("name"))
            return None
        self.log.info("job %s: was submitted already with the same graph (%s)", job_id, submitted.status.value)
        return submitted.status

    def _with_environments(self, client: SyncSparkDispatchClient, graph: Mapping[str, Any]) -> dict[str, Any]:
        """`graph` with this operator's `environment` (if any) and every environment's local wheels
        uploaded and named by their keys."""

        def upload(path: str) -> str:
            key = client.upload_artifact(path)
            self.log.info("wheel %s uploaded as %s", path, key)
            return key

        graph = dict(graph)
        environment = environment_body(self.environment, upload) or environment_body(graph.get("environment"), upload)
        if environment is not None:
            graph["environment"] = environment
        vertices = graph.get("vertices")
        if isinstance(vertices, list):
            graph["vertices"] = [
                {**v, "environment": environment_body(v["environment"], upload)}
                if isinstance(v, Mapping) and v.get("environment") is not None
                else v
                for v in vertices
            ]
        return graph

    def _upload_artifacts(self, client: SyncSparkDispatchClient) -> list[str]:
        keys = []
        for artifact in self.artifacts:
            key = client.upload_artifact(artifact)
            self.log.info("artifact %s uploaded as %s", artifact, key)
            keys.append(key)
        return keys

    def _status(self, job_id: str) -> JobStatus | None:
        """The job's status; None when the master knows no such job."""
        try:
            return self.hook.get_conn().job(job_id).status
        except UnknownJob:
            return None

    def _attached(self, job_id: str, context: Context) -> None:
        self.job_id = job_id
        url = self._job_url = self.hook.get_conn().job_url(job_id)
        push_job_link(context, url)
        context["ti"].xcom_push(key=self.external_id_key, value=job_id)
        self.log.info("job %s: %s", job_id, url)

    def _defer_until_done(self, job_id: str, context: Context) -> None:
        store = context.get("task_state_store")
        if store is not None and self.durable:
            store.set(self.external_id_key, job_id)
        self.defer(
            trigger=SparkDispatchJobTrigger(
                job_id=job_id,
                sparkdispatch_conn_id=self.sparkdispatch_conn_id,
                poll_interval=self.poll_interval,
                cancel_on_kill=self.cancel_on_kill,
                vertices=vertex_parallelism(self.load_graph(context)),
            ),
            method_name="execute_complete",
            timeout=self.execution_timeout if isinstance(self.execution_timeout, timedelta) else None,
        )

    def _check_result(self, result: JobResult, context: Context) -> None:
        outputs = vertex_outputs(result)
        self._vertex_outcomes = list(outputs.values())
        context["ti"].xcom_push(key=VERTICES_XCOM_KEY, value=outputs)
        message = report_result(result, self.log)
        if message is None:
            return
        if result_failure_is_final(result):
            raise AirflowFailException(f"{message} (not retried: a retry cannot fix this)")
        raise AirflowException(message)

    def get_openlineage_facets_on_complete(self, task_instance: object) -> Lineage:
        """OpenLineage (with Airflow's OpenLineage provider): the job, and each finished vertex's
        result directory as an output dataset."""
        return job_lineage(self.job_id, self._job_url, self._vertex_outcomes)

    def get_openlineage_facets_on_failure(self, task_instance: object) -> Lineage:
        return job_lineage(self.job_id, self._job_url, self._vertex_outcomes)

    # -- durable execution (ResumableJobMixin) ------------------------------------------------

    def submit_job(self, context: Context) -> str:
        return self.start_job(context)

    def get_job_status(self, external_id: JsonValue, context: Context) -> str:
        job_id = str(external_id)
        status = self._status(job_id)
        if status is None:
            return UNKNOWN
        if status is JobStatus.FINISHED and job_id not in self.job_chain(self.load_graph(context), context):
            self.log.info("job %s FINISHED before this task instance was cleared; running the graph again", job_id)
            return FINISHED_BEFORE_CLEAR
        self._attached(job_id, context)
        return status.value

    def is_job_active(self, status: str) -> bool:
        job_status = _job_status(status)
        return job_status is not None and not job_status.is_globally_terminal

    def is_job_succeeded(self, status: str) -> bool:
        return _job_status(status) is JobStatus.FINISHED

    def poll_until_complete(self, external_id: JsonValue, context: Context) -> None:
        client = self.hook.get_conn()
        logs = JobLogs(
            str(external_id), lambda line: self.log.info("%s", line), vertex_parallelism(self.load_graph(context))
        )
        result = client.wait_for_result(
            str(external_id), poll_interval=self.poll_interval, on_poll=lambda: logs.apoll(client.async_client)
        )
        self._check_result(result, context)

    def get_job_result(self, external_id: JsonValue, context: Context) -> str:
        return str(external_id)


def _job_status(status: str) -> JobStatus | None:
    """A durable-execution status string as a JobStatus; None for a stored job not to resume."""
    return None if status in (UNKNOWN, FINISHED_BEFORE_CLEAR) else JobStatus(status)


def _dag_folders(context: Context) -> list[str]:
    dag = context.get("dag")
    folders: list[str] = []
    if dag is not None:
        if getattr(dag, "folder", None):
            folders.append(dag.folder)
        searchpath = getattr(dag, "template_searchpath", None) or []
        folders += [searchpath] if isinstance(searchpath, str) else list(searchpath)
    return folders


class SubmitJobGraphOperator(SparkDispatchSubmitJobOperator):
    """Deprecated: the earlier name of `SparkDispatchSubmitJobOperator`."""

    def __init__(self, **kwargs: Any) -> None:
        warn_renamed("SubmitJobGraphOperator", "SparkDispatchSubmitJobOperator")
        super().__init__(**kwargs)
