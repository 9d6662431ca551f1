"""`SparkDispatchJobGroup` and `SparkDispatchVertexOperator`: one JobGraph per DAG run, one Airflow task per vertex.

    with SparkDispatchJobGroup(group_id="sales", job_name="sales-report", artifacts=[PIPELINES]):
        gen = SparkDispatchVertexOperator(task_id="generate", entrypoint="pipelines.sales:generate")
        clean = SparkDispatchVertexOperator(task_id="clean", entrypoint="pipelines.sales:clean",
                                            parallelism=2)
        gen >> clean

On leaving the `with` block the group adds its `launch` task (as the Databricks provider's
workflow group does) upstream of every vertex task. `launch` builds the JobGraph from the vertex
tasks of the group, each vertex's inputs being its upstream vertex tasks in the group, and
submits it once per DAG run: it is a `SparkDispatchSubmitJobOperator` that does not wait, with the same
job ids, so its retries re-attach to the job. Each vertex task then waits for its own vertex
(deferred by default), streaming its subtasks' attempt logs into its own log as it waits
(sparkdispatch.client.log_stream), and succeeds with it, returning `vertex_output(...)` as its XCom.

A later try of a vertex task (an Airflow retry, or a clear of the failed task) whose vertex did
not finish in the ended job asks the master to repair it (`POST /jobs/{id}/repair`): that vertex
and its consumers run again in the same job, the other vertices' results are kept (Databricks'
repair of a workflow's failed tasks). A vertex that finished is never run again by a clear.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from functools import cached_property
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar

from airflow.sdk import BaseOperator, TaskGroup
from sparkdispatch.hooks.airflow_compat import AirflowException, AirflowFailException

from sparkdispatch.client import SyncSparkDispatchClient
from sparkdispatch.errors import JobAlreadyTerminated, RepairNotPossible, SparkDispatchError
from sparkdispatch.hooks.sparkdispatch import SparkDispatchHook
from sparkdispatch.model.chaining import ResultKind, ResultsMode
from sparkdispatch.model.rest_shapes import VertexOutcome
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.operators.jobs import (
    NOT_RETRYABLE_FAILURES,
    EnvironmentArgument,
    default_deferrable,
    own_context,
    task_failure,
)
from sparkdispatch.operators.lineage import job_lineage
from sparkdispatch.operators.links import SparkDispatchJobLink, push_job_link
from sparkdispatch.operators.submit import TRIGGER_FAIL, SparkDispatchSubmitJobOperator
from sparkdispatch.operators.deprecation import renamed_argument, warn_renamed
from sparkdispatch.operators.job_watch import follow_vertex, read_progress, vertex_concluded
from sparkdispatch.operators.run_state import TaskInstanceRef, stopped_by_run_timeout
from sparkdispatch.operators.triggers import SparkDispatchVertexTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context

    from sparkdispatch.operators.lineage import Lineage

LAUNCH_TASK_ID = "launch"
REPAIR_WAIT_S = 60.0  # how long a repair is asked for again while the job just ended is archived


def _asked_in_time(ref: TaskInstanceRef, timeout_s: float = 5.0) -> bool:
    """`stopped_by_run_timeout(ref)`, asked in a thread for at most `timeout_s`: an operator's
    `on_kill` runs in a signal handler, which must not wait on the supervisor for long."""
    answer: list[bool] = []
    thread = threading.Thread(target=lambda: answer.append(stopped_by_run_timeout(ref)), daemon=True)
    thread.start()
    thread.join(timeout_s)
    return bool(answer and answer[0])


def _is_mapped_vertex(node: object) -> bool:
    """Whether `node` is a vertex task mapped with `.expand()` (Airflow's mapped operator of one)."""
    operator_class = getattr(node, "operator_class", None)
    return isinstance(operator_class, type) and issubclass(operator_class, SparkDispatchVertexOperator)


def vertex_output(outcome: VertexOutcome) -> dict[str, Any]:
    """A vertex task's XCom, from the master's `GET /jobs/{id}/vertices/{vertex}` answer."""
    result = outcome.result
    return {
        "job_id": outcome.job_id,
        "vertex": outcome.vertex,
        "state": result.state.value,
        "rows": result.rows,
        "result_path": result.result_path,
        "partitions": list(result.partitions),
        "input_files": list(result.input_files),
        "attempts": result.attempts,
    }


class SparkDispatchVertexOperator(BaseOperator):
    """One vertex of its `SparkDispatchJobGroup`'s JobGraph; succeeds or fails with that vertex.

    :param entrypoint: the task function, `module.path:function`.
    :param parallelism: subtasks of the vertex.
    :param vertex_params: the vertex's `params` (the task function's `ctx.params`); templated,
        rendered in this task's context (`{{ task.task_id }}` is this task's id) when the group's
        `launch` task submits the job. `params=` is its deprecated name; Airflow's task `params`
        (and `default_args={"params": ...}`) stay Airflow's.
    :param environment: this vertex's Python environment, instead of the job's (as the submit
        operator's `environment=`); templated, rendered like `vertex_params`. `@task.sparkdispatch`
        takes it too.
    :param deferrable: wait in the triggerer; default True, or `[sparkdispatch] default_deferrable`
        when set.
    :param poll_interval: seconds between checks of the job (the vertex tasks of a job deferred to
        one triggerer share one check per interval: `job_watch`).
    :param cancel_on_kill: cancel the whole job when this task is killed, cleared, marked, or
        times out; default False: those end this task alone and the job runs on for the other
        vertex tasks. A timeout of the DAG run cancels the job either way.
    :param result: what the vertex asks of its result (the JobGraph's `"result"`): `"auto"` (the
        default: the master chains it into its consumer's task where one vertex reads it and the
        chaining rules allow, and keeps it on its TaskExecutor where several vertices of one task read it),
        `"chained"`, `"kept"` (on the local disk of the TaskExecutor that ran it, its readers placed
        there; deleted once read, so a clear of a reader runs this one again) or `"durable"`
        (written, so a clear of a later task repairs that task without running this one again).
        docs/jobgraph.md, "Result kinds".

    The vertex id is the `task_id` given (without the group's prefix). The XCom is
    `{"job_id", "vertex", "state", "rows", "result_path", "partitions", "attempts"}`. A retry or
    a clear of the task after its vertex failed repairs the vertex (see the module docstring).
    """

    template_fields: Sequence[str] = ("vertex_params", "environment")
    operator_extra_links = (SparkDispatchJobLink(),)
    ui_color = "#fde8c8"

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        # Airflow merges an operator's `params` with its DAG's and default_args' before __init__
        # sees them: only here is a `params=` given to this task, the deprecated name, told apart.
        # A mapped task's unmapping passes Airflow's merged `params` always: no user's argument.
        instance = super().__new__(cls)
        given = kwargs.get("params")
        deprecated = (
            dict(given)
            if isinstance(given, Mapping) and "vertex_params" not in kwargs and not kwargs.get("_airflow_from_mapped")
            else None
        )
        object.__setattr__(instance, "_deprecated_params", deprecated)  # BaseOperator's own needs __init__ first
        return instance

    def __init__(
        self,
        *,
        entrypoint: str,
        parallelism: int = 1,
        vertex_params: Mapping[str, Any] | None = None,
        environment: EnvironmentArgument = None,
        deferrable: bool | None = None,
        poll_interval: float = 5.0,
        cancel_on_kill: bool = False,
        result: str = ResultKind.AUTO.value,
        **kwargs: Any,
    ) -> None:
        self.vertex_id: str = kwargs["task_id"]
        result_kind = _choice(ResultKind, result, f"{type(self).__name__} {self.vertex_id!r}: result")
        super().__init__(**kwargs)
        self.entrypoint = entrypoint
        self.parallelism = parallelism
        deprecated: dict[str, Any] | None = getattr(self, "_deprecated_params", None)
        if deprecated is not None:
            warn_renamed(f"{type(self).__name__}(params=...)", "vertex_params=...")
        self.vertex_params = dict(vertex_params if vertex_params is not None else deprecated or {})
        self.environment = environment
        self.deferrable = default_deferrable(fallback=True) if deferrable is None else deferrable
        self.poll_interval = poll_interval
        self.cancel_on_kill = cancel_on_kill
        self.result = result_kind
        #: set by the group: its launch task and connection
        self.launch_task_id: str | None = None
        self.sparkdispatch_conn_id = SparkDispatchHook.default_conn_name
        #: a connection the task was given itself (`@task.sparkdispatch(sparkdispatch_conn_id=...)`), not the group's
        self.own_conn_id: str | None = None
        self.job_id: str | None = None
        self._job_url: str | None = None
        self._ti_ref: TaskInstanceRef | None = None
        self._vertex_outcome: dict[str, Any] | None = None  # the vertex's outcome, for OpenLineage

    @cached_property
    def hook(self) -> SparkDispatchHook:
        return SparkDispatchHook(self.sparkdispatch_conn_id)

    def code_artifacts(self) -> list[str]:
        """Files of this vertex's own code that the group's launch uploads with the job (none here;
        `@task.sparkdispatch` ships its function's source)."""
        return []

    def vertex_spec(self, context: Context, inputs: Sequence[str]) -> dict[str, Any]:
        """This vertex in the JobGraph, its `vertex_params` rendered in this task's context (made
        from the launch task's `context`: `task`, `ti` and `task_instance_key_str` are this task's)."""
        spec = {
            "id": self.vertex_id,
            "entrypoint": self.entrypoint,
            "parallelism": self.parallelism,
            "params": self.render_template(self.vertex_params, own_context(context, self)),
            "inputs": list(inputs),
        }
        if self.environment is not None:  # its local wheels are uploaded by the submitting task
            spec["environment"] = self.render_template(self.environment, own_context(context, self))
        if self.result is not ResultKind.AUTO:
            spec["result"] = self.result.value
        return spec

    def execute(self, context: Context) -> Any:
        if self.launch_task_id is None:
            raise AirflowFailException(
                f"{self.task_id}: a SparkDispatchVertexOperator runs inside a SparkDispatchJobGroup"
            )
        job_id = self.job_id = self._launched_job_id(context)
        try:
            client = self.hook.get_conn()
            body = client.run(
                client.async_client.patiently(
                    lambda: client.async_client.vertex(job_id, self.vertex_id), f"job {job_id}"
                )
            )
            self._job_url = client.job_url(job_id)
            push_job_link(context, self._job_url)
            body = self._repaired_if_due(context, client, body)
            if not vertex_concluded(body) and self.deferrable:
                self.defer(
                    trigger=SparkDispatchVertexTrigger(
                        job_id=job_id,
                        vertex_id=self.vertex_id,
                        parallelism=self.parallelism,
                        sparkdispatch_conn_id=self.sparkdispatch_conn_id,
                        poll_interval=self.poll_interval,
                        cancel_on_kill=self.cancel_on_kill,
                    ),
                    method_name="execute_complete",
                    timeout=self.execution_timeout if isinstance(self.execution_timeout, timedelta) else None,
                )
            # also when the vertex concluded before this task looked (a short one): one poll then gives
            # its subtasks' logs to the task's log, as a deferred task's trigger does on its last poll
            body = client.run(
                follow_vertex(
                    self.sparkdispatch_conn_id,
                    job_id,
                    self.vertex_id,
                    parallelism=self.parallelism,
                    poll_interval=self.poll_interval,
                    emit=lambda line: self.log.info("%s", line),
                )
            )
        except SparkDispatchError as exc:
            raise task_failure(exc) from exc
        finally:
            self.hook.close()
        return self._outcome(body)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Resume after the trigger fired: the vertex's XCom, or its failure."""
        if event.get("status") != "concluded":
            raise AirflowException(
                f"waiting for vertex {self.vertex_id} of job {event.get('job_id')} failed: {event.get('message')}"
            )
        return self._outcome(VertexOutcome.from_dict(event["body"]))

    def _repair_due(self, context: Context, body: VertexOutcome) -> bool:
        """Whether this try repairs the vertex: a later try, and the job ended without it FINISHED."""
        return (
            context["ti"].try_number > 1 and vertex_concluded(body) and body.result.state is not ExecutionState.FINISHED
        )

    def _repaired_if_due(self, context: Context, client: SyncSparkDispatchClient, body: VertexOutcome) -> VertexOutcome:
        """`body`, or, when a repair is due, the vertex's state once the master accepted the repair
        (the job then runs again); asked once per try. A job that is still concluding is asked again
        for up to `REPAIR_WAIT_S`."""
        job_id = body.job_id
        deadline = time.monotonic() + REPAIR_WAIT_S
        while self._repair_due(context, body):
            try:
                answer = client.repair(job_id, [self.vertex_id])
            except RepairNotPossible as exc:
                if not exc.running or time.monotonic() > deadline:
                    raise
                self.log.info("job %s: %s", job_id, exc)
                time.sleep(1.0)
                body = client.vertex(job_id, self.vertex_id)
                continue
            repair = answer.repair
            self.log.info(
                "job %s: repair %d runs vertices %s again (%s by try %d of this task); the results "
                "of the others are reused",
                job_id,
                repair.number,
                ", ".join(repair.vertices),
                "started" if answer.created else "already started",
                context["ti"].try_number,
            )
            return client.vertex(job_id, self.vertex_id)
        return body

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """A deferral that timed out (or whose trigger failed) cancels the job before the task fails."""
        if next_method == TRIGGER_FAIL and self.cancel_on_kill and self.launch_task_id is not None:
            self.job_id = self._launched_job_id(context)
            self.log.info(
                "job %s: the wait for vertex %s ended without its outcome (%s); cancelling the job",
                self.job_id,
                self.vertex_id,
                (next_kwargs or {}).get("error", "trigger failed"),
            )
            self.on_kill()
            self.hook.close()
        return super().resume_execution(next_method, next_kwargs, context)

    def _launched_job_id(self, context: Context) -> str:
        ti = context["ti"]
        map_index = ti.map_index if ti.map_index is not None else -1
        self._ti_ref = TaskInstanceRef(ti.dag_id, ti.run_id, ti.task_id, map_index)
        job_id = ti.xcom_pull(task_ids=self.launch_task_id, map_indexes=ti.map_index)
        if not job_id:
            raise AirflowException(f"{self.task_id}: the group's {self.launch_task_id} task pushed no job id")
        return str(job_id)

    def on_kill(self) -> None:
        """Cancel the job with `cancel_on_kill`, or when the DAG run timed out; else only this task stops."""
        if not self.job_id:
            return
        if not self.cancel_on_kill and not (self._ti_ref is not None and _asked_in_time(self._ti_ref)):
            self.log.info("job %s: vertex task %s was stopped; the job runs on", self.job_id, self.task_id)
            return
        try:
            self.hook.get_conn().cancel(self.job_id)
            self.log.info(
                "job %s: cancelled because vertex task %s was killed (%s)",
                self.job_id,
                self.task_id,
                "cancel_on_kill" if self.cancel_on_kill else "its DAG run timed out",
            )
        except JobAlreadyTerminated:
            self.log.info("job %s had ended already; nothing to cancel", self.job_id)
        except SparkDispatchError as exc:
            self.log.warning("job %s: could not cancel it: %s", self.job_id, exc)

    def get_openlineage_facets_on_complete(self, task_instance: object) -> Lineage:
        """OpenLineage (with Airflow's OpenLineage provider): the job, the vertex's result directory
        as an output dataset and the result directories of the vertices it read as inputs."""
        return job_lineage(
            self.job_id,
            self._job_url,
            [self._vertex_outcome] if self._vertex_outcome else [],
            inputs=self._input_outcomes(),
        )

    def input_vertex_ids(self) -> list[str]:
        """The vertices this one reads: its upstream vertex tasks in its group."""
        return sorted(
            task.vertex_id
            for task in self.upstream_list
            if isinstance(task, SparkDispatchVertexOperator) and task.task_group is self.task_group
        )

    def _input_outcomes(self) -> list[dict[str, Any]]:
        """The outputs of the vertices this one read, as the master tells them now (none when it cannot)."""
        names = self.input_vertex_ids()
        if not (names and self.job_id):
            return []
        try:
            progress = read_progress(self.hook.get_conn().job_progress(self.job_id))
        except SparkDispatchError as exc:
            self.log.info(
                "job %s: the inputs of vertex %s are left out of its lineage: %s", self.job_id, self.vertex_id, exc
            )
            return []
        finally:
            self.hook.close()
        return [vertex_output(progress[name].body) for name in names if name in progress]

    def get_openlineage_facets_on_failure(self, task_instance: object) -> Lineage:
        return job_lineage(self.job_id, self._job_url, [])

    def _outcome(self, body: VertexOutcome) -> dict[str, Any]:
        output = self._vertex_outcome = vertex_output(body)
        self.job_id = output["job_id"]
        if output["state"] == ExecutionState.FINISHED.value:
            self.log.info(
                "vertex %s of job %s FINISHED: %s rows in %s (%d attempt(s))",
                self.vertex_id,
                output["job_id"],
                output["rows"],
                output["result_path"],
                output["attempts"],
            )
            return output
        failure = body.result.failure
        cause = f"{failure.cls}: {failure.message}" if failure else f"the job ended {body.job_status.value}"
        if failure is not None and failure.traceback:
            self.log.error("remote traceback of vertex %s:\n%s", self.vertex_id, failure.traceback)
        message = f"vertex {self.vertex_id} of sparkdispatch job {output['job_id']} ended {output['state']}: {cause}"
        if failure is not None and failure.cls in NOT_RETRYABLE_FAILURES:
            raise AirflowFailException(f"{message} (not retried: a retry cannot fix this)")
        raise AirflowException(f"{message}; a retry or a clear of this task repairs the vertex")


class _LaunchJobGraphOperator(SparkDispatchSubmitJobOperator):
    """The group's `launch` task: submits the group's JobGraph once per DAG run; returns its job id."""

    def __init__(self, *, group: SparkDispatchJobGroup, **kwargs: Any) -> None:
        super().__init__(job_graph={}, wait_for_completion=False, **kwargs)
        self.group = group

    def _upload_artifacts(self, client: SyncSparkDispatchClient) -> list[str]:
        keys = super()._upload_artifacts(client)
        for vertex in self.group.vertex_operators():
            for path in vertex.code_artifacts():
                keys.append(client.upload_artifact(path))
                self.log.info("the code of vertex %s uploaded as %s", vertex.vertex_id, keys[-1])
        return keys

    def load_graph(self, context: Context) -> dict[str, Any]:
        vertices = self.group.vertex_operators()
        graph: dict[str, Any] = {
            "name": self.group.job_name,
            "vertices": [v.vertex_spec(context, v.input_vertex_ids()) for v in vertices],
        }
        if self.group.restart_strategy is not None:
            graph["restart_strategy"] = dict(self.group.restart_strategy)
        if self.group.config:
            graph["config"] = dict(self.group.config)
        if self.group.taskexecutor_pool is not None:
            graph["pool"] = self.group.taskexecutor_pool
        if self.group.results is not ResultsMode.AUTO:
            graph["results"] = self.group.results.value
        return graph


class SparkDispatchJobGroup(TaskGroup):
    """A TaskGroup whose `SparkDispatchVertexOperator` tasks are the vertices of one JobGraph.

    :param group_id: the group's id (the prefix of its tasks' ids).
    :param job_name: the JobGraph's name (default: the group id).
    :param artifacts: local `.py`/`.zip` files or package directories shipped with the job.
    :param environment: the job's Python environment (as the submit operator's; templated, in the
        launch task's context); a vertex task's own `environment=` replaces it for that vertex.
    :param sparkdispatch_conn_id: the `sparkdispatch` connection of the launch and vertex tasks
        (`conn_id`, deprecated, is its earlier name).
    :param restart_strategy: the JobGraph's restart strategy (a dict, as in the JobGraph).
    :param config: the JobGraph's Spark `config`.
    :param results: the JobGraph's `"results"`: `"auto"` (default: each vertex's result as its
        `result` says) or `"durable"` (every vertex's result written: each task is repaired
        on its own, and the results stay readable).
    :param taskexecutor_pool: the JobGraph's `pool`, the TaskExecutor pool its vertices run in (not
        Airflow's `pool`, which limits the group's Airflow tasks).

    The group adds a `launch` task (`<group_id>.launch`) that submits the job once per DAG run;
    every other task in the group must be a `SparkDispatchVertexOperator`.
    """

    def __init__(
        self,
        *,
        group_id: str,
        job_name: str | None = None,
        artifacts: Sequence[str] = (),
        environment: EnvironmentArgument = None,
        sparkdispatch_conn_id: str = SparkDispatchHook.default_conn_name,
        restart_strategy: Mapping[str, Any] | None = None,
        config: Mapping[str, Any] | None = None,
        taskexecutor_pool: str | None = None,
        results: str = ResultsMode.AUTO.value,
        conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        results_mode = _choice(ResultsMode, results, f"SparkDispatchJobGroup {group_id!r}: results")
        super().__init__(group_id=group_id, **kwargs)
        self.results = results_mode
        self.job_name = job_name or group_id
        self.artifacts = list(artifacts)
        self.environment = environment
        self.sparkdispatch_conn_id = renamed_argument(
            type(self).__name__, "conn_id", "sparkdispatch_conn_id", sparkdispatch_conn_id, conn_id
        )
        self.restart_strategy = restart_strategy
        self.config = dict(config or {})
        self.taskexecutor_pool = taskexecutor_pool
        self.launch: _LaunchJobGraphOperator | None = None

    def vertex_operators(self) -> list[SparkDispatchVertexOperator]:
        """The group's vertex tasks, in the order they were added."""
        return [task for task in self.children.values() if isinstance(task, SparkDispatchVertexOperator)]

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        try:
            if exc_type is None:
                self._add_launch()
        finally:  # the group leaves Airflow's context even when it is refused
            super().__exit__(exc_type, exc, traceback)  # type: ignore[no-untyped-call]

    def _add_launch(self) -> None:
        vertices = self.vertex_operators()
        others = [child for child in self.children.values() if not isinstance(child, SparkDispatchVertexOperator)]
        mapped = [getattr(child, "task_id", "") for child in others if _is_mapped_vertex(child)]
        if mapped:
            raise ValueError(
                f"SparkDispatchJobGroup {self.group_id!r}: {mapped[0]} is mapped (.expand()); a "
                "vertex of a group is one vertex of one JobGraph: map it outside a group (one job per "
                "map index)"
            )
        if others:
            names = ", ".join(getattr(child, "task_id", None) or str(child) for child in others)
            raise ValueError(
                f"SparkDispatchJobGroup {self.group_id!r} holds only SparkDispatchVertexOperator "
                f"tasks; move {names} out of it"
            )
        if not vertices:
            raise ValueError(f"SparkDispatchJobGroup {self.group_id!r} has no SparkDispatchVertexOperator")
        self.launch = _LaunchJobGraphOperator(
            task_id=LAUNCH_TASK_ID,
            task_group=self,
            group=self,
            artifacts=self.artifacts,
            environment=self.environment,
            sparkdispatch_conn_id=self.sparkdispatch_conn_id,
        )
        for vertex in vertices:
            if vertex.own_conn_id not in (None, self.sparkdispatch_conn_id):
                raise ValueError(
                    f"task {vertex.task_id!r} names connection {vertex.own_conn_id!r}, but the vertices "
                    f"of SparkDispatchJobGroup {self.group_id!r} use the group's, "
                    f"{self.sparkdispatch_conn_id!r}: drop the task's sparkdispatch_conn_id, or give it "
                    "to the group"
                )
            vertex.launch_task_id = self.launch.task_id
            vertex.sparkdispatch_conn_id = self.sparkdispatch_conn_id
            # what a vertex takes from outside the group (an XComArg argument) is made before the job is
            for upstream in vertex.upstream_list:
                if upstream.task_id not in self.children:
                    upstream >> self.launch
            self.launch >> vertex


_Choice = TypeVar("_Choice", ResultKind, ResultsMode)


def _choice(kind: type[_Choice], value: str, what: str) -> _Choice:
    """`value` as one of `kind`'s members; a ValueError naming the choices when the DAG is parsed."""
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(repr(member.value) for member in kind)
        raise ValueError(f"{what} is {value!r}; it must be one of {choices}") from None
