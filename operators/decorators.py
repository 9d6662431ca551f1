"""`@task.sparkdispatch`: a Python function `def name(ctx, ...)` as a vertex whose code ships with its job.

Built on Airflow's `task_decorator_factory`, so it is TaskFlow: calling the decorated function
in a DAG makes its task and returns its `XComArg`; `.override()`, `.expand()`, `.partial()` and
`multiple_outputs` are Airflow's own.

    with SparkDispatchJobGroup(group_id="numbers"):
        @task.sparkdispatch(parallelism=2)
        def numbers(ctx):
            return ctx.spark.range(100).where(f"id % {ctx.parallelism} = {ctx.subtask_index}")

        @task.sparkdispatch
        def total(ctx, numbers, column="id"):
            from pyspark.sql import functions as F
            return numbers.agg(F.sum(column).alias("total"))

        total(numbers(), column="id")

**Arguments.** After `ctx`, the function takes the arguments its task is called with. In a
`SparkDispatchJobGroup`, an argument that is another vertex task of the group (its `XComArg`,
as `numbers()` above) makes that vertex an input and is the input's DataFrame
(`ctx.inputs[...]`); any other argument (a value, or the `XComArg` of a task outside the group,
which then runs before the group's `launch`) is resolved when `launch` submits the job, in this
task's own context. Outside a group, arguments are resolved when the task runs. Either way they
reach the TaskExecutors as JSON, under `ctx.params["sparkdispatch.call"]`.

**Mapping.** `.expand()` outside a group maps the task: one one-vertex job per map index (each
map index has its own job ids, so retries re-attach to their own job). Inside a group a vertex
is one vertex of one JobGraph, so a mapped task there is refused when the DAG is parsed.

As Airflow's `@task.docker` ships its function, the function's source (without its decorator)
is what runs: it goes to the TaskExecutors as a module of its own, named after the source's
hash, uploaded with the job. So the function imports what it needs inside its body and uses no
closure. Inside a group it is a vertex of the group's JobGraph (`SparkDispatchVertexOperator`);
outside one it runs as a one-vertex job, submitted as `SparkDispatchSubmitJobOperator` submits
(the same job ids, so retries re-attach). Either way the task returns the vertex's XCom.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import tempfile
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk.bases.decorator import DecoratedOperator, TaskDecorator, task_decorator_factory
from airflow.sdk.definitions.xcom_arg import PlainXComArg, XComArg

from sparkdispatch.operators.deprecation import renamed_argument
from sparkdispatch.operators.job_group import SparkDispatchVertexOperator, vertex_output
from sparkdispatch.operators.jobs import own_context
from sparkdispatch.operators.submit import SparkDispatchSubmitJobOperator

if TYPE_CHECKING:
    from airflow.sdk import Context

DECORATOR_NAME = "@task.sparkdispatch"
MODULE_PREFIX = "sparkdispatch_fn_"
#: The key of `ctx.params` that carries a decorated function's call arguments.
CALL_PARAM = "sparkdispatch.call"
RETURN_KEY = "return_value"  # Airflow's XCom key of a task's return value

_CALLER = '''

_sparkdispatch_function = {name}


def {name}(ctx):
    """The entrypoint: `{name}` called with `ctx` and the arguments its Airflow task was called with."""
    call = ctx.params.get("{key}") or {{}}

    def value(argument):
        return ctx.inputs[argument["input"]] if "input" in argument else argument["value"]

    return _sparkdispatch_function(ctx, *[value(a) for a in call.get("args", [])],
                                   **{{k: value(a) for k, a in call.get("kwargs", {{}}).items()}})
'''


def function_source(function: Callable[..., Any]) -> str:
    """The module the TaskExecutors import: the function's source without its decorators, dedented,
    then the entrypoint of the same name, which calls it with its task's arguments (`CALL_PARAM`).

    Its annotations are not evaluated (`from __future__ import annotations`), so `ctx: Any`
    needs no import there."""
    lines = textwrap.dedent(inspect.getsource(function)).splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith(("def ", "async def ")))
    return (
        "from __future__ import annotations\n\n\n"
        + "\n".join(lines[start:])
        + "\n"
        + _CALLER.format(name=function.__name__, key=CALL_PARAM)
    )


def _without_ctx(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function` as Airflow checks the calls of its task: without `ctx`, its first parameter,
    which the TaskExecutor passes. Never called."""
    signature = inspect.signature(function)
    if not signature.parameters:
        raise TypeError(
            f"{DECORATOR_NAME} function {function.__name__} takes no ctx: write def {function.__name__}(ctx, ...)"
        )

    @functools.wraps(function)
    def checked(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{DECORATOR_NAME} functions run on the TaskExecutors, not in Airflow")

    checked.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=list(signature.parameters.values())[1:]
    )
    return checked


class SparkDispatchFunctionOperator(DecoratedOperator, SparkDispatchVertexOperator):
    """The task `@task.sparkdispatch` makes of a function: a vertex running the function's source."""

    custom_operator_name = DECORATOR_NAME
    template_fields: Sequence[str] = (*DecoratedOperator.template_fields, *SparkDispatchVertexOperator.template_fields)
    shallow_copy_attrs: Sequence[str] = ("python_callable", "function")

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        sparkdispatch_conn_id: str | None = None,
        conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        conn_id = renamed_argument(DECORATOR_NAME, "conn_id", "sparkdispatch_conn_id", sparkdispatch_conn_id, conn_id)
        self.function = python_callable
        self.source = function_source(python_callable)
        self.module_name = MODULE_PREFIX + hashlib.sha256(self.source.encode()).hexdigest()[:16]
        super().__init__(
            python_callable=_without_ctx(python_callable),
            entrypoint=f"{self.module_name}:{python_callable.__name__}",
            **kwargs,
        )
        self.own_conn_id = conn_id
        if conn_id is not None:
            self.sparkdispatch_conn_id = conn_id

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

    def vertex_spec(self, context: Context, inputs: Sequence[str]) -> dict[str, Any]:
        """The vertex, with its call arguments: another vertex of the group is an input, any other
        argument is resolved in this task's own context."""
        spec = super().vertex_spec(context, inputs)
        own = own_context(context, self)
        group_vertices = set(inputs)

        def argument(value: Any) -> dict[str, Any]:
            if isinstance(value, XComArg):
                vertex = _group_vertex(value, self, group_vertices)
                if vertex is not None:
                    return {"input": vertex}
            return {"value": self.render_template(value, own)}

        spec["params"] = {
            **spec["params"],
            CALL_PARAM: {
                "args": [argument(a) for a in self.op_args],
                "kwargs": {name: argument(a) for name, a in self.op_kwargs.items()},
            },
        }
        return spec

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

    def _one_vertex_job(self, context: Context) -> SparkDispatchSubmitJobOperator:
        # op_args and op_kwargs are rendered by now: the arguments are values
        vertex = {
            **SparkDispatchVertexOperator.vertex_spec(self, context, inputs=()),
            "params": {
                **self.render_template(self.vertex_params, context),
                CALL_PARAM: {
                    "args": [{"value": a} for a in self.op_args],
                    "kwargs": {k: {"value": a} for k, a in self.op_kwargs.items()},
                },
            },
        }
        graph = {
            "name": self.task_id,
            "vertices": [vertex],
            "restart_strategy": {"type": "fixed-delay", "attempts": 0, "delay_s": 0.0},
        }
        return SparkDispatchSubmitJobOperator(
            task_id=self.task_id,
            job_graph=graph,
            artifacts=self.code_artifacts(),
            sparkdispatch_conn_id=self.sparkdispatch_conn_id,
            deferrable=self.deferrable,
            poll_interval=self.poll_interval,
            cancel_on_kill=True,
            retries=self.retries or 0,
            execution_timeout=self.execution_timeout,
        )

    def _output(self, job_id: str) -> dict[str, Any]:
        try:
            return vertex_output(self.hook.get_conn().vertex(job_id, self.vertex_id))
        finally:
            self.hook.close()


def _group_vertex(value: XComArg, task: SparkDispatchVertexOperator, inputs: set[str]) -> str | None:
    """The vertex id of the group vertex whose whole output `value` is; None for a task outside the group."""
    operators = [op for op, _ in value.iter_references()]
    vertices = [
        op
        for op in operators
        if isinstance(op, SparkDispatchVertexOperator) and op.vertex_id in inputs and op.task_group is task.task_group
    ]
    if not vertices:
        return None
    if not (isinstance(value, PlainXComArg) and value.key == RETURN_KEY and len(operators) == 1):
        names = ", ".join(v.vertex_id for v in vertices)
        raise ValueError(
            f"{task.task_id}: an argument made from vertex {names} of the same group must be its whole "
            "output (its DataFrame), not a key of it or a mix"
        )
    return vertices[0].vertex_id


def sparkdispatch_task(
    python_callable: Callable[..., Any] | None = None, multiple_outputs: bool | None = None, **kwargs: Any
) -> TaskDecorator:
    """`@task.sparkdispatch` / `@task.sparkdispatch(parallelism=2, vertex_params={...})`.

    Other keyword arguments go to the operator (`deferrable`, `poll_interval`, `retries`, ...);
    `sparkdispatch_conn_id` names the connection of a task outside a group (in a group, the
    group's connection is used: another one is refused).
    """
    return task_decorator_factory(
        python_callable=python_callable,
        multiple_outputs=multiple_outputs,
        decorated_operator_class=SparkDispatchFunctionOperator,
        **kwargs,
    )
