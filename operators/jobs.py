"""What the operators and the sensor share: job ids, JobGraph files, JobResult reports.

Nothing here talks to Airflow or to the master; JobResults are read through the job model.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import yaml
from sparkdispatch.hooks.airflow_compat import AirflowException, AirflowFailException

from sparkdispatch.errors import (
    BlobTooLarge,
    ConfigurationError,
    CorruptedBlob,
    EntrypointNotFound,
    EnvironmentBuildFailed,
    HostRefused,
    InvalidJobGraph,
    InvalidRequest,
    OriginRefused,
    RepairNotPossible,
    SparkDispatchError,
    Unauthorized,
    UnsupportedMediaType,
)
from sparkdispatch.model.states import JobStatus
from sparkdispatch.model.job_result import Failure, JobResult

if TYPE_CHECKING:
    from airflow.sdk import Context

GRAPH_FILE_SUFFIXES = (".json", ".yaml", ".yml")


def task_job_id(dag_id: str, run_id: str, task_id: str, map_index: int | None) -> str:
    """The first job id of an Airflow task instance (32 hex chars); `cleared_job_id` after a clear."""
    key = "\x1f".join([dag_id, run_id, task_id, str(-1 if map_index is None else map_index)])
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def clear_generation(max_tries: int, retries: int) -> int:
    """Which clear of its task instance an Airflow try runs under: 0 until the first clear.

    Airflow sets a task instance's `max_tries` to `retries` when it creates it and to
    `try_number + retries` when it clears it (one task, or the whole run), and leaves it alone
    on a retry; so `max_tries - retries`, the tries it had had at its latest clear, is the same
    for every retry and changes with each clear after a try. (Airflow finds a clear's first try
    the same way; `dag_run.clear_number` would not do: clearing a task without resetting its run
    leaves it alone, and clearing another task of the run changes it.)
    """
    return max_tries - retries


def cleared_job_id(first_job_id: str, generation: int) -> str:
    """The first job id of a task instance after its `generation`-th clear (0: `first_job_id`)."""
    if generation == 0:
        return first_job_id
    return hashlib.sha256(f"{first_job_id}\x1fclear\x1f{generation}".encode()).hexdigest()[:32]


def attempt_job_id(first_job_id: str, attempt: int) -> str:
    """The job id of the `attempt`-th fresh submission (0: `first_job_id` itself).

    A task instance's jobs form a fixed chain: a try re-attaches to the first job of the chain
    that is running or FINISHED, and moves past those that ended FAILED or CANCELED.
    """
    if attempt == 0:
        return first_job_id
    return hashlib.sha256(f"{first_job_id}\x1f{attempt}".encode()).hexdigest()[:32]


def read_graph_text(text: str, *, source: str) -> dict[str, Any]:
    """Parse a JobGraph written as JSON or YAML."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidJobGraph({"body": [f"{source} is neither JSON nor YAML: {exc}"]}) from None
    if not isinstance(data, dict):
        raise InvalidJobGraph({"body": [f"{source} must hold a JobGraph object, not {type(data).__name__}"]})
    return data


def find_graph_file(value: str, search_path: list[Path]) -> Path | None:
    """The JobGraph file `value` names (absolute, or relative to one of `search_path`), if any."""
    if not value.strip().endswith(GRAPH_FILE_SUFFIXES):
        return None
    path = Path(value.strip()).expanduser()
    candidates = [path] if path.is_absolute() else [folder / path for folder in search_path] + [path]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise InvalidJobGraph(
        {"job_graph": [f"no JobGraph file {value!r} (looked in {', '.join(str(c.parent) for c in candidates)})"]}
    )


def copy_graph(graph: Mapping[str, Any]) -> dict[str, Any]:
    """A deep, JSON-clean copy of a JobGraph mapping (templating may leave other mappings)."""
    try:
        copied: dict[str, Any] = json.loads(json.dumps(graph))
    except (TypeError, ValueError) as exc:
        raise InvalidJobGraph({"job_graph": [f"not JSON-serializable: {exc}"]}) from None
    return copied


def result_summary(result: JobResult) -> str:
    """A JobResult as lines a person reads: status, duration, then one line per vertex."""
    lines = [f"job {result.job_id} ({result.name}) {result.status.value} in {result.duration_ms / 1000:.1f}s"]
    for vertex_id, vertex in result.vertices.items():
        line = f"  {vertex_id}: {vertex.state.value}, {vertex.attempts} attempt(s)"
        if vertex.rows is not None:
            line += f", {vertex.rows} rows"
        if vertex.failure is not None:
            line += f" - {vertex.failure.cls}: {vertex.failure.message}"
        lines.append(line)
    return "\n".join(lines)


def _failures(result: JobResult) -> list[Failure]:
    """The job's root cause first, then each failed vertex's failure."""
    candidates = [result.failure, *(vertex.failure for vertex in result.vertices.values())]
    return [failure for failure in candidates if failure is not None]


def result_failure(result: JobResult) -> str:
    """The root cause of a job that did not finish: `Class: message`, or why there is none."""
    failures = _failures(result)
    if failures:
        return f"{failures[0].cls}: {failures[0].message}"
    return "cancelled" if result.status is JobStatus.CANCELED else "no cause recorded"


def result_traceback(result: JobResult) -> str:
    """The remote traceback of the root cause, if the JobResult carries one."""
    return next((failure.traceback for failure in _failures(result) if failure.traceback), "")


class ResultLog(Protocol):
    """Where `report_result` writes: a `logging.Logger`, or an Airflow task's `self.log`."""

    def info(self, msg: str, /, *args: object) -> object:
        """Log the summary line (%-style arguments, as `logging`)."""

    def error(self, msg: str, /, *args: object) -> object:
        """Log a failure and its remote traceback (%-style arguments, as `logging`)."""


def report_result(job_result: JobResult, log: ResultLog) -> str | None:
    """Log a JobResult with its summary, and the remote traceback of a failure.

    Returns None for a FINISHED job, else the message the task should fail with.
    """
    if job_result.status is JobStatus.FINISHED:
        log.info("%s", result_summary(job_result))
        return None
    log.error("%s", result_summary(job_result))
    traceback = result_traceback(job_result)
    if traceback:
        log.error("remote traceback of job %s:\n%s", job_result.job_id, traceback)
    return f"sparkdispatch job {job_result.job_id} ended {job_result.status.value}: {result_failure(job_result)}"


#: The XCom of a job's per-vertex outputs (`vertex_outputs`).
VERTICES_XCOM_KEY = "vertices"
#: Errors of the master that a retry of the task cannot fix: the task fails without retries.
NOT_RETRYABLE: tuple[type[SparkDispatchError], ...] = (
    InvalidJobGraph,
    InvalidRequest,
    Unauthorized,
    ConfigurationError,
    BlobTooLarge,
    CorruptedBlob,
    HostRefused,
    OriginRefused,
    UnsupportedMediaType,
)
#: Failure classes of a job's task that no retry fixes: its entrypoint does not exist.
NOT_RETRYABLE_FAILURES = frozenset({EntrypointNotFound.__name__, EnvironmentBuildFailed.__name__})


def task_failure(exc: SparkDispatchError) -> AirflowException:
    """The Airflow exception a task fails with for `exc`: without retries when no retry can help."""
    if isinstance(exc, NOT_RETRYABLE) or (isinstance(exc, RepairNotPossible) and not exc.running):
        return AirflowFailException(f"{exc} (not retried: a retry cannot fix this)")
    return AirflowException(str(exc))


def result_failure_is_final(result: JobResult) -> bool:
    """Whether a failed JobResult's cause is one no retry fixes (an entrypoint that does not exist)."""
    return any(failure.cls in NOT_RETRYABLE_FAILURES for failure in _failures(result))


def vertex_outputs(job_result: JobResult) -> dict[str, dict[str, Any]]:
    """Per vertex of a JobResult: its state, rows, result path, partitions, the datasets it read
    besides the job's results and attempts (an XCom value)."""
    return {
        vertex_id: {
            "state": v.state.value,
            "rows": v.rows,
            "result_path": v.result_path,
            "partitions": list(v.partitions),
            "input_files": list(v.input_files),
            "attempts": v.attempts,
        }
        for vertex_id, v in job_result.vertices.items()
    }


def default_deferrable(*, fallback: bool | None = None) -> bool:
    """`[sparkdispatch] default_deferrable` when set; else `fallback` when given (a vertex task: True);
    else Airflow's `[operators] default_deferrable` (False in a stock Airflow)."""
    from sparkdispatch.hooks.airflow_compat import conf

    own = conf.get("sparkdispatch", "default_deferrable", fallback=None)
    if own not in (None, ""):
        return str(own).strip().lower() in ("true", "1", "yes", "on")
    if fallback is not None:
        return fallback
    return conf.getboolean("operators", "default_deferrable", fallback=False)


class _TaskInstanceAs:
    """A task instance seen as another task's of the same run: `task_id` and `task` are that task's,
    everything else (run, XComs, map index, try) the instance's own."""

    def __init__(self, ti: Any, task: Any) -> None:
        self._ti = ti
        self.task = task
        self.task_id = task.task_id

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ti, name)


def own_context(context: Context, task: Any) -> Context:
    """`context` (one task's) as `task`'s of the same run: its `task`, `ti`, `task_instance` and
    `task_instance_key_str` name `task`. What a vertex's params are rendered with at launch."""
    ti = _TaskInstanceAs(context["ti"], task)
    own: dict[str, Any] = {**context, "task": task, "ti": ti, "task_instance": ti}
    if "task_instance_key_str" in context:
        own["task_instance_key_str"] = f"{ti.dag_id}__{task.task_id}__{context.get('ds_nodash', '')}"
    return cast("Context", own)


#: What an operator's `environment=` takes: the dependencies, or a JobGraph `environment` object.
EnvironmentArgument = Mapping[str, Any] | Sequence[str] | None


def environment_body(value: EnvironmentArgument, upload: Callable[[str], str]) -> dict[str, Any] | None:
    """The JobGraph `environment` of an operator's `environment=`: a list of dependencies, or
    `{"dependencies": [...]}`; an entry that is a local `.whl` file is uploaded (`upload(path)`
    gives its key) and named by its key. Other entries go as they are (the master validates them)."""
    if value is None:
        return None
    if isinstance(value, str):
        raise AirflowFailException(
            f"environment must be a list of requirements or {{'dependencies': [...]}}, not the string {value!r}"
        )
    dependencies = value.get("dependencies") if isinstance(value, Mapping) else value
    if not isinstance(dependencies, Sequence) or isinstance(dependencies, str):
        raise AirflowFailException(f"environment needs a list of dependencies, got {dependencies!r}")
    entries = [
        upload(entry) if isinstance(entry, str) and entry.endswith(".whl") and Path(entry).is_file() else entry
        for entry in dependencies
    ]
    return {**(dict(value) if isinstance(value, Mapping) else {}), "dependencies": entries}
