"""What an attempt needs on this TaskExecutor before its slot's process runs it: its job's code
(`ArtifactCache`) and its job's Python environment (`PythonEnvironments`), both kept in use while
it runs. An environment built for the attempt says so in the attempt's log."""

from __future__ import annotations

import logging
from contextlib import ExitStack
from pathlib import Path

from sparkdispatch.errors import EnvironmentBuildFailed
from sparkdispatch.model.protocol import TaskDeploymentDescriptor
from sparkdispatch.storage.attempt_logs import attempt_log_path
from sparkdispatch.taskexecutor.artifact_cache import ArtifactCache
from sparkdispatch.taskexecutor.python_environments import PythonEnvironments

log = logging.getLogger(__name__)


def _append(path: Path | None, text: str) -> None:
    """Add `text` to an attempt's log before its slot process writes there (nothing for a remote one)."""
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        log.warning("could not write to the attempt log %s: %s", path, exc)


class AttemptPreparation:
    """Fetches an attempt's artifacts and its Python environment, kept in use by an `ExitStack`."""

    def __init__(
        self,
        *,
        task_executor_id: str,
        artifacts: ArtifactCache | None = None,
        environments: PythonEnvironments | None = None,
    ) -> None:
        self._task_executor_id = task_executor_id
        self._artifacts = artifacts
        self._environments = environments

    def artifact_paths(self, tdd: TaskDeploymentDescriptor, in_use: ExitStack) -> tuple[str, ...]:
        """The files of the attempt's code, kept in the cache while `in_use` is open."""
        if self._artifacts is None:
            return ()
        return tuple(in_use.enter_context(self._artifacts.use(tdd.artifacts)))

    def environment_python(self, tdd: TaskDeploymentDescriptor, in_use: ExitStack) -> str | None:
        """The interpreter of the attempt's Python environment, built if need be (saying so in the
        attempt's log, then the build's output and time), kept in `in_use`; None without one."""
        environment = tdd.environment
        if environment is None:
            return None
        if self._environments is None or self._artifacts is None:
            raise EnvironmentBuildFailed("this TaskExecutor builds no Python environments for jobs")
        wheel_paths = in_use.enter_context(self._artifacts.use(environment.wheel_keys))
        log_file = attempt_log_path(tdd.result_path, tdd.attempt)

        def building(key: str) -> None:
            log.info("job %s: building Python environment %s for %s", tdd.job_id, key, tdd.vertex_id)
            _append(
                log_file,
                f"[sparkdispatch] building the job's Python environment {key} on "
                f"{self._task_executor_id}: {', '.join(environment.dependencies)}\n",
            )

        try:
            ready = in_use.enter_context(
                self._environments.use(
                    environment, dict(zip(environment.wheel_keys, wheel_paths, strict=True)), on_build=building
                )
            )
        except EnvironmentBuildFailed as exc:
            _append(log_file, f"[sparkdispatch] the job's Python environment could not be built: {exc}\n")
            raise
        if ready.built_now:
            _append(
                log_file,
                f"{ready.build_output.rstrip()}\n[sparkdispatch] Python environment {ready.key} built in "
                f"{ready.build_seconds:.2f}s\n",
            )
        return ready.python
