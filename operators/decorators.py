"""`@task.sparkdispatch`: a Python function `def name(ctx)` as a vertex whose code ships with its job.

    with SparkDispatchJobGroup(group_id="sales", artifacts=[PIPELINES]):
        @task.sparkdispatch(parallelism=2)
        def clean(ctx):
            from pipelines.sales import clean as clean_orders
            return clean_orders(ctx)

        generate >> clean()

As Airflow's `@task.docker` and `@task.kubernetes` ship theirs, the function's source (without
its decorator) is what runs: it goes to the TaskExecutors as a module of its own, named after
the source's hash, uploaded with the job. So the function imports what it needs inside its
body and uses no closure. Inside a `SparkDispatchJobGroup` it is a vertex of the group's
JobGraph (`SparkDispatchVertexOperator`); outside one it runs as a one-vertex job, submitted as
`SubmitJobGraphOperator` submits (the same job ids, so retries re-attach). Either way the task
returns the vertex's XCom.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import tempfile
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkdispatch.operators.job_group import SparkDispatchVertexOperator, vertex_output
from sparkdispatch.operators.submit import SubmitJobGraphOperator

if TYPE_CHECKING:
    from airflow.sdk import Context

DECORATOR_NAME = "@task.sparkdispatch"
MODULE_PREFIX = "sparkdispatch_fn_"


def function_source(function: Callable[..., Any]) -> str:
    """The module the TaskExecutors import: the function's source without its decorators, dedented.

    Its annotations are not evaluated (`from __future__ import annotations`), so `ctx: Any`
    needs no import there."""
    lines = textwrap.dedent(inspect.getsource(function)).splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith(("def ", "async def ")))
    return "from __future__ import annotations\n\n\n" + "\n".join(lines[start:]) + "\n"


class SparkDispatchFunctionOperator(SparkDispatchVertexOperator):
    """The task `@task.sparkdispatch` makes of a function: a vertex running the function's source."""

    custom_operator_name = DECORATOR_NAME
    shallow_copy_attrs = ("python_callable",)

    def __init__(self, *, python_callable: Callable[..., Any], conn_id: str | None = None, **kwargs: Any) -> None:
        self.python_callable = python_callable
        self.source = function_source(python_callable)
        self.module_name = MODULE_PREFIX + hashlib.sha256(self.source.encode()).hexdigest()[:16]
        super().__init__(entrypoint=f"{self.module_name}:{python_callable.__name__}", **kwargs)
        self.own_conn_id = conn_id
        if conn_id is not None:
            self.conn_id = conn_id

    def code_artifacts(self) -> list[str]:
        """The function's module as a file for upload, in the temp directory under its own (hashed)
        name, so every launch of the same source writes and uploads the same one."""
        directory = Path(tempfile.gettempdir()) / "sparkdispatch-functions"
        directory.mkdir(exist_ok=True)
        path = directory / f"{self.module_name}.py"
        if not path.exists() or path.read_text() != self.source:
            partial = directory / f"{self.module_name}.py.{os.getpid()}.partial"
            partial.write_text(self.source)
            partial.replace(path)
        return [str(path)]

    # -- outside a group: a one-vertex job ------------------------------------------------------

    def execute(self, context: Context) -> Any:
        if self.launch_task_id is not None:
            return super().execute(context)
        job_id = self._one_vertex_job(context).execute(context)
        return self._output(job_id)

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        if self.launch_task_id is not None:
            return super().resume_execution(next_method, next_kwargs, context)
        job_id = self._one_vertex_job(context).resume_execution(next_method, next_kwargs, context)
        return self._output(str(job_id))

    def _one_vertex_job(self, context: Context) -> SubmitJobGraphOperator:
        graph = {"name": self.task_id, "vertices": [self.vertex_spec(context, inputs=())],
                 "restart_strategy": {"type": "fixed-delay", "attempts": 0, "delay_s": 0.0}}
        return SubmitJobGraphOperator(task_id=self.task_id, job_graph=graph, artifacts=self.code_artifacts(),
                                      conn_id=self.conn_id, deferrable=self.deferrable,
                                      poll_interval=self.poll_interval, cancel_on_kill=self.cancel_on_kill,
                                      retries=self.retries or 0, execution_timeout=self.execution_timeout)

    def _output(self, job_id: str) -> dict[str, Any]:
        try:
            return vertex_output(self.hook.get_conn().vertex(job_id, self.vertex_id))
        finally:
            self.hook.close()


def sparkdispatch_task(python_callable: Callable[..., Any] | None = None, *, parallelism: int = 1,
                       params: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:
    """`@task.sparkdispatch` / `@task.sparkdispatch(parallelism=2, params={...})`.

    Calling the decorated function in a DAG makes its task (`task_id` defaults to the function's
    name) and returns it, so `a >> clean()` sets its inputs. Other keyword arguments go to the
    operator (`deferrable`, `poll_interval`, `retries`, ...); `conn_id` names the connection of a
    task outside a group (in a group, the group's connection is used: another one is refused).
    """

    def decorate(function: Callable[..., Any]) -> Callable[..., SparkDispatchFunctionOperator]:
        def make_task(**overrides: Any) -> SparkDispatchFunctionOperator:
            arguments = {"task_id": function.__name__, "parallelism": parallelism, "params": params, **kwargs,
                         **overrides}
            return SparkDispatchFunctionOperator(python_callable=function, **arguments)

        make_task.__name__ = function.__name__
        make_task.__doc__ = function.__doc__
        return make_task

    return decorate(python_callable) if python_callable is not None else decorate
