"""The slot process's protocol and helpers, without a Spark Connect server (tests/integration/test_slot_pool.py
runs them against one)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, cast

import pytest

from sparkdispatch.errors import EntrypointNotFound
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.model.job_result import Failure
from sparkdispatch.model.protocol import TaskDeploymentDescriptor
from sparkdispatch.taskexecutor.slot_child import describe_exit
from sparkdispatch.testing.slot_attempts import artifact
from sparkdispatch.taskexecutor.attempt_failures import RDD_UNAVAILABLE, failure_of
from sparkdispatch.taskexecutor.attempt_code import import_path_entry, load_entrypoint
from sparkdispatch.taskexecutor.slot_sessions import add_code, session_url
from sparkdispatch.taskexecutor.slot_protocol import SESSION_USER, AttemptState, ControlChannel, RunRequest


def test_the_slot_process_module_imports_neither_pyspark_nor_the_workers_side() -> None:
    """pyspark's Connect client is imported by `main()`, after SPARK_CONNECT_MODE_ENABLED is set."""
    probe = (
        "import sys, sparkdispatch.taskexecutor.slot_process; "
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('pyspark', 'celery', 'aiohttp', 'kazoo') or m.startswith(('sparkdispatch.ha', 'sparkdispatch.broker', "
        "'sparkdispatch.taskexecutor.runner', 'sparkdispatch.taskexecutor.worker')))))"
    )
    done = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True)
    assert done.stdout.strip() == ""


def test_messages_round_trip_over_the_control_channel() -> None:
    ours, theirs = socket.socketpair()
    parent, child = ControlChannel(ours), ControlChannel(theirs)
    tdd = TaskDeploymentDescriptor(
        job_id="ab" * 16,
        job_master_id="jm",
        execution_id=uuid.uuid4().hex,
        vertex_id="v",
        entrypoint="m:f",
        subtask_index=0,
        parallelism=1,
        attempt=0,
        allocation_id="a",
        slot_index=0,
        result_path="/r",
        spark_conf={"k": "v"},
    )
    request = RunRequest(tdd, "sc://127.0.0.1:15002", ("/cache/x/m.py",))
    ended = AttemptState(ExecutionState.FAILED, failure=Failure("ValueError", "bad row", "Traceback ..."))
    finished = AttemptState(ExecutionState.FINISHED, rows=12, result_path="/r")
    try:
        parent.send(request.to_message())
        child.send(ended.to_message())
        child.send(finished.to_message())
        message = child.receive()
        assert message is not None and RunRequest.from_message(message) == request
        assert [AttemptState.from_message(m) for m in (parent.receive(), parent.receive()) if m] == [ended, finished]
        child.close()
        assert parent.receive() is None  # the other end is gone
    finally:
        parent.close()


@pytest.mark.parametrize(
    "returncode, text",
    [
        (0, "exited with code 0"),
        (1, "exited with code 1"),
        (-11, "killed by signal 11 (SIGSEGV)"),
        (-9, "killed by signal 9 (SIGKILL; out of memory? the kernel's OOM killer sends it)"),
    ],
)
def test_how_a_slot_process_ended_is_said_plainly(returncode: int, text: str) -> None:
    assert describe_exit(returncode) == text


def test_a_task_reaching_for_the_rdd_api_is_told_it_does_not_exist_on_connect() -> None:
    from pyspark.errors import PySparkAttributeError, PySparkNotImplementedError

    no_context = PySparkAttributeError(
        errorClass="JVM_ATTRIBUTE_NOT_SUPPORTED", messageParameters={"attr_name": "sparkContext"}
    )
    failure = failure_of(no_context)
    assert failure.cls == "PySparkAttributeError"
    assert failure.message.startswith(RDD_UNAVAILABLE) and "JVM_ATTRIBUTE_NOT_SUPPORTED" in failure.message

    no_rdd = PySparkNotImplementedError(errorClass="NOT_IMPLEMENTED", messageParameters={"feature": "rdd"})
    try:
        try:
            raise no_rdd
        except PySparkNotImplementedError as exc:
            raise RuntimeError("while building the report") from exc
    except RuntimeError as wrapped:
        assert failure_of(wrapped).message.startswith(RDD_UNAVAILABLE)

    assert failure_of(ValueError("bad row")) == Failure.from_exception(ValueError("bad row"))


def test_artifacts_go_on_the_path_as_a_zip_or_a_modules_directory() -> None:
    assert import_path_entry("/cache/k1/code.zip") == "/cache/k1/code.zip"
    assert import_path_entry("/cache/k2/helper.py") == "/cache/k2"


def test_every_session_has_an_id_of_its_own_under_the_slot_processes_user() -> None:
    first, second = session_url("sc://127.0.0.1:15002"), session_url("sc://127.0.0.1:15002/")
    assert first.startswith("sc://127.0.0.1:15002/;session_id=") and second.startswith("sc://127.0.0.1:15002/;")
    assert first != second
    session_id, user = first.removeprefix("sc://127.0.0.1:15002/;").split(";")
    uuid.UUID(session_id.removeprefix("session_id="), version=4)
    assert user == f"user_id={SESSION_USER}"


def test_a_session_keeps_the_token_of_the_servers_url() -> None:
    url = session_url("sc://localhost:15002/;token=abc")
    assert url.startswith("sc://localhost:15002/;token=abc;session_id=") and url.endswith(f";user_id={SESSION_USER}")


def test_an_entrypoint_that_does_not_exist_is_entrypoint_not_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = f"entry_{uuid.uuid4().hex[:8]}"
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / package / "tasks.py").write_text("def run(ctx):\n    return None\n\nNOT_A_FUNCTION = 3\n")
    (tmp_path / package / "broken.py").write_text("import a_dependency_nobody_installed\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_entrypoint(f"{package}.tasks:run").__name__ == "run"
    for entrypoint, message in [
        (f"{package}.absent:run", f"no module named '{package}.absent' in the job's code"),
        ("no_such_package_x.tasks:run", "no module named 'no_such_package_x' in the job's code"),
        (f"{package}.tasks:gone", f"module '{package}.tasks' has no function 'gone'"),
        (f"{package}.tasks:NOT_A_FUNCTION", "is not a function"),
    ]:
        with pytest.raises(EntrypointNotFound, match=re.escape(message)):
            load_entrypoint(entrypoint)
    # a module that exists but whose own import fails keeps its error and traceback
    with pytest.raises(ModuleNotFoundError, match="a_dependency_nobody_installed"):
        load_entrypoint(f"{package}.broken:run")


def test_an_attempts_output_goes_to_its_log_file_and_back(tmp_path: Path) -> None:
    probe = f"""
import os, sys
from pathlib import Path
from sparkdispatch.taskexecutor.attempt_code import output_to
with output_to(Path({str(tmp_path / "logs" / "0-0-e.log")!r}), max_size=1 << 20):
    print("inside")
    os.write(2, b"native stderr\\n")
with output_to(Path("/proc/cannot/be/made.log"), max_size=1 << 20):  # no log file: the output stays here
    print("kept here")
print("after")
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert (tmp_path / "logs" / "0-0-e.log").read_text() == "inside\nnative stderr\n"
    assert done.stdout == "kept here\nafter\n"


class _ArtifactSink:
    """A session's `addArtifacts`, recorded."""

    def __init__(self) -> None:
        self.added: list[tuple[tuple[str, ...], bool]] = []

    def addArtifacts(self, *paths: str, pyfile: bool = False) -> None:
        self.added.append((paths, pyfile))


def test_a_session_made_ahead_gets_the_jobs_code_files_when_they_still_hold_their_content(tmp_path: Path) -> None:
    files = [artifact(tmp_path, "tasks.py", b"A = 1\n"), artifact(tmp_path, "helpers.py", b"B = 2\n")]
    sink = _ArtifactSink()
    assert add_code(cast(Any, sink), files)
    assert sink.added == [(tuple(files), True)]


@pytest.mark.parametrize("change", ["rewritten", "removed"])
def test_code_rewritten_or_removed_since_the_jobs_task_is_not_added_ahead(tmp_path: Path, change: str) -> None:
    files = [artifact(tmp_path, "tasks.py", b"A = 1\n"), artifact(tmp_path, "helpers.py", b"B = 2\n")]
    if change == "rewritten":
        Path(files[1]).write_bytes(b"B = 'another job wrote this'\n")
    else:
        Path(files[1]).unlink()
    sink = _ArtifactSink()
    assert not add_code(cast(Any, sink), files)
    assert sink.added == []  # not even the intact file: the job's first task adds them all
