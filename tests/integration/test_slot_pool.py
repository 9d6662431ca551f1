"""Slot processes against a real Spark Connect server, driven through `SlotProcessPool`.

One server serves the whole module; each test has a pool of its own (one warm spare, a 2 s
cancellation timeout) and checks when it closes that none of its processes is left. Task
functions live in slot_tasks.py, shipped as an artifact the way the TaskExecutor's cache keeps
them (a directory per content); tests that need two versions of one module write them here.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from sparkdispatch.model.environment import Environment
from sparkdispatch.model.protocol import ChainedTask
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.storage.attempt_logs import attempt_log_path, read_attempt_log
from sparkdispatch.taskexecutor.settings import SlotPoolSettings
from sparkdispatch.taskexecutor.connect_server import ConnectServer
from sparkdispatch.taskexecutor.driver_log import PREFIX
from sparkdispatch.taskexecutor.server_recycling import ConnectServers
from sparkdispatch.taskexecutor.server_watch import ConnectServerWatch
from sparkdispatch.taskexecutor.slot_pool import SlotProcessPool
from sparkdispatch.taskexecutor.python_environments import PythonEnvironments
from sparkdispatch.taskexecutor.python_workers import ReleasedSessions, WorkerDaemonReaper, worker_daemons
from sparkdispatch.taskexecutor.slot_child import spawn_slot_process
from sparkdispatch.taskexecutor.settings import PythonEnvironmentSettings
from sparkdispatch.taskexecutor.start_deadline import NOT_STARTED_LATE
from sparkdispatch.taskexecutor.slot_protocol import SLOT_PROCESS_NAME, TEMPLATE_NAME, AttemptLaunch
from sparkdispatch.testing.local_cluster import parent_pid, stat_fields
from sparkdispatch.testing.waiting import eventually_blocking
from sparkdispatch.testing.wheels import make_wheel
from sparkdispatch.testing.slot_attempts import (
    connect_settings_for_tests,
    Attempt,
    artifact,
    deployment,
    gone,
    new_job_id,
    rows_of,
    run,
    session_state,
    slot_processes,
    slot_templates,
    wait_for_marker,
)

pytestmark = pytest.mark.slow

TASKS = Path(__file__).with_name("slot_tasks.py")
CANCELLATION_TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def connect_server(
    tmp_path_factory: pytest.TempPathFactory, service_missing: Callable[[str], None]
) -> Iterator[ConnectServer]:
    if shutil.which("java") is None:
        service_missing("Spark needs java on PATH")
    settings = connect_settings_for_tests()
    server = ConnectServer(settings, work_dir=tmp_path_factory.mktemp("connect-server"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def new_pool(connect_server: ConnectServer, *, spares: int, template: bool = True) -> SlotProcessPool:
    """A pool on the module's server with `spares` warm spares (forked from a template, or not), started."""
    pool = SlotProcessPool(
        SlotPoolSettings(spares=spares, cancellation_timeout=CANCELLATION_TIMEOUT_S, template=template),
        connect_url=connect_server.url,
        driver_log=str(connect_server.log_path),
    )
    pool.start()
    return pool


@pytest.fixture
def pool(connect_server: ConnectServer) -> Iterator[SlotProcessPool]:
    pool = new_pool(connect_server, spares=1)
    try:
        yield pool
    finally:
        pool.close()
    assert slot_processes() == set(), "slot processes left after close()"
    assert slot_templates() == set(), "a slot-process template left after close()"


@pytest.fixture
def tasks(tmp_path: Path) -> str:
    """slot_tasks.py as a local artifact."""
    return artifact(tmp_path, "slot_tasks.py", TASKS.read_bytes())


def no_successor() -> ConnectServer:
    raise AssertionError("this test replaces no server")


# --------------------------------------------------------------------------------------------
# ctx, results and failures


def test_ctx_results_and_failures_of_one_job_in_its_slot_process(
    pool: SlotProcessPool, tasks: str, tmp_path: Path
) -> None:
    job_id = new_job_id()
    tdd = deployment(
        tmp_path,
        "slot_tasks:context",
        job_id=job_id,
        slot_index=1,
        subtask_index=2,
        parallelism=3,
        attempt=4,
        params={"day": "2026-01-01"},
        inputs={"up": ()},
    )
    [row] = rows_of(run(pool, tdd, [tasks]))
    assert json.loads(row["ctx"]) == {
        "params": {"day": "2026-01-01", "marker_dir": str(tmp_path / "markers")},
        "subtask_index": 2,
        "parallelism": 3,
        "job_id": job_id,
        "vertex_id": "v",
        "attempt": 4,
        "inputs": ["up"],
    }
    process = row["pid"]

    # rows come from the write itself and equal the DataFrame's count, also for an empty one
    seven = run(pool, deployment(tmp_path, "slot_tasks:multiples_of_seven", job_id=job_id, slot_index=1), [tasks])
    assert (seven.rows, len(rows_of(seven))) == (143, 143)
    few = run(
        pool,
        deployment(tmp_path, "slot_tasks:multiples_of_seven", job_id=job_id, slot_index=1, params={"below": 20}),
        [tasks],
    )
    assert (few.rows, len(rows_of(few))) == (3, 3)
    assert (
        run(
            pool,
            deployment(tmp_path, "slot_tasks:multiples_of_seven", job_id=job_id, slot_index=1, params={"below": 0}),
            [tasks],
        ).rows
        == 0
    )

    # inputs: all partitions of a vertex together, read lazily (`never_read` does not exist)
    inputs = run(
        pool,
        deployment(
            tmp_path,
            "slot_tasks:even_inputs",
            job_id=job_id,
            slot_index=1,
            inputs={
                "up": (str(seven.result_path), str(few.result_path)),
                "empty": (),
                "never_read": (str(tmp_path / "missing"),),
            },
        ),
        [tasks],
    )
    assert inputs.state is ExecutionState.FINISHED, inputs.failure
    assert inputs.rows == len([i for i in range(0, 1000, 7) if i % 2 == 0]) + len([0, 14])

    # failures: class, message and traceback of the function's exception; bad entrypoints and results
    failed = run(
        pool, deployment(tmp_path, "slot_tasks:fails", job_id=job_id, slot_index=1, params={"day": "monday"}), [tasks]
    )
    assert failed.state is ExecutionState.FAILED and failed.failure is not None
    assert (failed.failure.cls, failed.failure.message) == ("ValueError", "no sales on monday")
    assert 'raise ValueError("no sales on "' in failed.failure.traceback and "slot_tasks.py" in failed.failure.traceback
    for entrypoint, cls in [
        ("nowhere_module_x:task", "EntrypointNotFound"),
        ("slot_tasks:absent", "EntrypointNotFound"),
        ("slot_tasks:not_a_frame", "TypeError"),
    ]:
        end = run(pool, deployment(tmp_path, entrypoint, job_id=job_id, slot_index=1), [tasks])
        assert (end.state, end.failure.cls if end.failure else None) == (ExecutionState.FAILED, cls)

    # the RDD API does not exist on a Connect session, and the failure says so
    rdd = run(pool, deployment(tmp_path, "slot_tasks:uses_rdd", job_id=job_id, slot_index=1), [tasks])
    assert rdd.state is ExecutionState.FAILED and rdd.failure is not None
    assert rdd.failure.cls == "PySparkAttributeError"
    assert "the RDD API (spark.sparkContext" in rdd.failure.message
    assert "JVM_ATTRIBUTE_NOT_SUPPORTED" in rdd.failure.message

    # every task of the job ran in the slot's one process
    [again] = rows_of(run(pool, deployment(tmp_path, "slot_tasks:context", job_id=job_id, slot_index=1), [tasks]))
    assert again["pid"] == process


def test_a_finished_task_names_the_tables_its_dataframe_read_besides_the_jobs_results(
    pool: SlotProcessPool, tasks: str, tmp_path: Path
) -> None:
    """`DataFrame.inputFiles()` of the returned DataFrame: a partitioned Parquet source is one
    dataset, its table directory; the job's own results it also read are not listed."""
    job_id = new_job_id()
    source = tmp_path / "sources" / "orders"
    params = {"source": str(source)}
    wrote = run(
        pool, deployment(tmp_path, "slot_tasks:writes_partitioned_source", job_id=job_id, params=params), [tasks]
    )
    assert wrote.state is ExecutionState.FINISHED, wrote.failure
    assert wrote.input_files == () and {p.name for p in source.iterdir()} >= {"region=eu", "region=us"}
    up = run(pool, deployment(tmp_path, "slot_tasks:multiples_of_seven", job_id=job_id), [tasks])
    assert up.input_files == ()  # spark.range reads no file
    read = run(
        pool,
        deployment(
            tmp_path,
            "slot_tasks:reads_source_and_input",
            job_id=job_id,
            params=params,
            inputs={"up": (str(up.result_path),)},
        ),
        [tasks],
    )
    assert read.state is ExecutionState.FINISHED, read.failure
    assert read.rows == 6 + 143
    [dataset] = read.input_files
    assert (urlsplit(dataset).scheme, urlsplit(dataset).path) == ("file", str(source))


def test_what_a_task_prints_or_logs_goes_to_its_attempts_log_file(
    pool: SlotProcessPool, tasks: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    tdd = deployment(tmp_path, "slot_tasks:chatty", job_id=new_job_id(), subtask_index=1, attempt=2)
    assert run(pool, tdd, [tasks]).state is ExecutionState.FINISHED
    path = attempt_log_path(tdd.result_path, tdd.attempt)
    assert path is not None and path.name == f"1-2-{tdd.execution_id}.log" and path.parent.name == "_logs"
    text = path.read_text()
    for line in ("printed by subtask 1", "WARNING slot-process", "logged by the task", "written to stderr"):
        assert line in text, text
    assert "printed by subtask 1" not in capfd.readouterr().out  # not also in the TaskExecutor's output


def test_a_chatty_attempts_log_is_capped_keeping_its_head_and_its_last_words(
    connect_server: ConnectServer, tasks: str, tmp_path: Path
) -> None:
    cap = 64 << 10
    pool = SlotProcessPool(
        SlotPoolSettings(spares=0, cancellation_timeout=CANCELLATION_TIMEOUT_S, attempt_log_max_size=cap),
        connect_url=connect_server.url,
        driver_log=str(connect_server.log_path),
    )
    pool.start()
    try:
        tdd = deployment(tmp_path, "slot_tasks:very_chatty", job_id=new_job_id(), params={"lines": 200_000})
        end = run(pool, tdd, [tasks])  # 7.8 MB of prints
    finally:
        pool.close()
    assert end.state is ExecutionState.FAILED and end.failure is not None and "chatty to the end" in end.failure.message
    path = attempt_log_path(tdd.result_path, tdd.attempt)
    assert path is not None
    text = path.read_text()
    assert cap < len(text) < cap + 600
    printed = [line for line in text.splitlines() if line.startswith("line ")]  # the driver's lines among them
    assert printed[0] == "line 0000000 of a chatty task (3 rows)" and printed[-1].startswith("line 0199999 ")
    assert "its last 16384 bytes follow" in text and "taskexecutor.attempt-log.max-size is 64kb" in text
    dropped = re.search(r"\[sparkdispatch\] (\d+) bytes of this attempt's output were dropped", text)
    assert dropped is not None and 7_700_000 < int(dropped[1]) < 7_800_000
    assert "line 0199999 of a chatty task" in text and "the task's last words" in text
    # what the log route reads, the UI and Airflow's live logs follow, from its first byte to its last
    read = read_attempt_log(str(tmp_path / "results"), tdd.job_id, "v", 0, None)
    assert read is not None and read.text == text
    assert slot_processes() == set()


def test_the_drivers_messages_about_an_attempt_go_to_its_log_file(
    pool: SlotProcessPool, tasks: str, tmp_path: Path
) -> None:
    """The Connect server's warnings on the attempt's operations, and a long operation's progress."""
    tdd = deployment(tmp_path, "slot_tasks:driver_messages", job_id=new_job_id())
    assert run(pool, tdd, [tasks]).state is ExecutionState.FINISHED
    path = attempt_log_path(tdd.result_path, tdd.attempt)
    assert path is not None
    driver = [line.removeprefix(PREFIX) for line in path.read_text().splitlines() if line.startswith(PREFIX)]
    assert any(
        re.search(r" WARN WindowExec \[SparkConnectExecuteThread_opId=[0-9a-f-]+\]: No Partition Defined", line)
        for line in driver
    ), driver
    assert any(
        re.fullmatch(r"operation [0-9a-f]{8}: stage \d+ \d/2(, .*)?; \d tasks? running", line) for line in driver
    ), driver
    assert re.fullmatch(r"operation [0-9a-f]{8} ended", driver[-1]), driver


def test_an_attempt_whose_start_deadline_passed_fails_without_running_its_function(
    pool: SlotProcessPool, tasks: str, tmp_path: Path
) -> None:
    """A TaskExecutor frozen between admitting an attempt and starting it (the chaos suite's
    SIGSTOP): past the deadline, and without a fresh one (no heartbeat answered since), the
    master may have run the attempt elsewhere; with a fresh one, it runs."""
    tdd = deployment(tmp_path, "slot_tasks:chatty", job_id=new_job_id())
    states: list[ExecutionState] = []
    asked: list[float] = []

    def passed() -> float:
        asked.append(time.monotonic())
        return time.monotonic() - 1

    end = pool.run(AttemptLaunch(tdd, (tasks,), start_deadline=passed), lambda s: states.append(s.state))
    assert end.state is ExecutionState.FAILED and end.failure is not None
    assert (end.failure.cls, end.failure.message) == ("StaleExecution", NOT_STARTED_LATE)
    assert ExecutionState.RUNNING not in states and len(asked) == 2  # at the run, then when it would start
    path = attempt_log_path(tdd.result_path, tdd.attempt)
    assert path is not None and "printed by subtask" not in (path.read_text() if path.exists() else "")
    # its deadline passed while it set up, but the TaskExecutor has a fresh one: it runs
    deadlines = itertools.chain([time.monotonic() - 1], itertools.repeat(time.monotonic() + 60))
    again = deployment(tmp_path, "slot_tasks:chatty", job_id=tdd.job_id)
    assert (
        pool.run(AttemptLaunch(again, (tasks,), start_deadline=lambda: next(deadlines)), lambda s: None).state
        is ExecutionState.FINISHED
    )


def test_a_chain_whose_start_deadline_passes_while_it_is_built_starts_no_further_function(
    pool: SlotProcessPool, tasks: str, tmp_path: Path
) -> None:
    """A TaskExecutor frozen while an attempt builds its chain (its functions call the Connect
    server): once thawed, no function starts past the deadline without a fresh one, neither a
    chained vertex's nor the head's (the chaos suite's one duplicate, a function started after its
    job ended)."""
    markers = tmp_path / "markers"
    asked: list[float] = []

    def deadline() -> float:
        # passed at the launch (every start asks for a fresh one); fresh until the chain's first
        # function started; from then on the master is silent
        asked.append(time.monotonic())
        return time.monotonic() + (-1 if len(asked) == 1 or (markers / "built-0").exists() else 60)

    built = ChainedTask("built", "slot_tasks:marks_its_start", parallelism=2, params={"marker_dir": str(markers)})
    tdd = deployment(
        tmp_path, "slot_tasks:marks_its_start", job_id=new_job_id(), inputs={"built": ()}, chained=(built,)
    )
    states: list[ExecutionState] = []
    end = pool.run(AttemptLaunch(tdd, (tasks,), start_deadline=deadline), lambda s: states.append(s.state))
    assert end.state is ExecutionState.FAILED and end.failure is not None, end
    assert (end.failure.cls, end.failure.message) == ("StaleExecution", NOT_STARTED_LATE)
    assert sorted(p.name for p in markers.iterdir()) == ["built-0"]  # neither built-1 nor the head's v-0
    assert ExecutionState.RUNNING in states  # it had started: its first function ran
    assert len(asked) == 4  # at the launch, at the attempt's start, before built-0 and before built-1
    # with fresh deadlines all along, the same chain runs whole
    for marker in markers.iterdir():
        marker.unlink()
    again = deployment(
        tmp_path, "slot_tasks:marks_its_start", job_id=tdd.job_id, inputs={"built": ()}, chained=(built,)
    )
    ended = pool.run(AttemptLaunch(again, (tasks,), start_deadline=lambda: time.monotonic() + 60), lambda s: None)
    assert ended.state is ExecutionState.FINISHED, ended
    assert sorted(p.name for p in markers.iterdir()) == ["built-0", "built-1", "v-0"]


def test_a_configuration_key_spark_refuses_fails_the_attempt_naming_it(
    pool: SlotProcessPool, tasks: str, tmp_path: Path
) -> None:
    end = run(
        pool,
        deployment(
            tmp_path,
            "slot_tasks:context",
            job_id=new_job_id(),
            spark_conf={"spark.sql.shuffle.partitions": "4", "spark.executor.memory": "2g"},
        ),
        [tasks],
    )
    assert end.state is ExecutionState.FAILED and end.failure is not None
    assert end.failure.cls == "ConfigurationError"
    assert "spark.executor.memory='2g'" in end.failure.message and "CANNOT_MODIFY_CONFIG" in end.failure.message


# --------------------------------------------------------------------------------------------
# Isolation


def versioned_module(tmp_path: Path, name: str, version: str) -> str:
    return artifact(tmp_path, f"{name}.py", f"VERSION = {version!r}\n".encode())


def test_a_reuploaded_module_runs_its_new_code_in_a_later_job(
    pool: SlotProcessPool, tasks: str, tmp_path: Path
) -> None:
    module = f"pipeline_{uuid.uuid4().hex[:8]}"
    seen = []
    for version in ("v1", "v2"):  # same file name, new content: a new blob, a new job
        code = versioned_module(tmp_path, module, version)
        end = run(
            pool,
            deployment(tmp_path, "slot_tasks:versions", job_id=new_job_id(), params={"module": module}),
            [tasks, code],
        )
        [row] = rows_of(end)
        seen.append(row)
    assert [(r["here"], r["on_executors"]) for r in seen] == [("v1", "v1"), ("v2", "v2")]
    assert seen[0]["pid"] != seen[1]["pid"]  # the slot process that ran v1 never runs other code
    assert gone(seen[0]["pid"])


def ended(pid: int) -> bool:
    """Gone, or a zombie its parent (this process) has not reaped yet."""
    try:
        return stat_fields(pid)[0] == "Z"
    except FileNotFoundError:
        return True


def test_new_code_runs_in_a_process_forked_from_the_template_which_never_holds_a_jobs_module(
    pool: SlotProcessPool, tasks: str, tmp_path: Path
) -> None:
    assert pool.template is not None
    module = f"pipeline_{uuid.uuid4().hex[:8]}"
    seen = []
    for version in ("v1", "v2", "v3"):  # each a new process, forked after the last version ran
        code = versioned_module(tmp_path, module, version)
        end = run(
            pool,
            deployment(tmp_path, "slot_tasks:versions", job_id=new_job_id(), params={"module": module}),
            [tasks, code],
        )
        seen.append(rows_of(end)[0])
    template = pool.template.pid
    assert template is not None and slot_templates() == {template}
    assert [(r["here"], r["on_executors"], r["ppid"]) for r in seen] == [
        ("v1", "v1", template),
        ("v2", "v2", template),
        ("v3", "v3", template),
    ]  # a fork of a template that had imported v1 or v2 would see that version
    assert len({r["pid"] for r in seen}) == 3
    assert Path(f"/proc/{seen[-1]['pid']}/comm").read_text().strip() == SLOT_PROCESS_NAME
    assert Path(f"/proc/{template}/comm").read_text().strip() == TEMPLATE_NAME
    # no Connect channel or gRPC thread in the template: its one socket is its control channel
    sockets = [fd for fd in Path(f"/proc/{template}/fd").iterdir() if os.readlink(fd).startswith("socket:")]
    threads = [(task / "comm").read_text().strip() for task in Path(f"/proc/{template}/task").iterdir()]
    assert len(sockets) == 1 and not [name for name in threads if name.startswith("grpc")], (sockets, threads)


def test_a_dead_template_takes_its_processes_along_and_another_forks_the_next(
    pool: SlotProcessPool, tasks: str, tmp_path: Path
) -> None:
    assert pool.template is not None
    [before] = rows_of(run(pool, deployment(tmp_path, "slot_tasks:context", job_id=new_job_id()), [tasks]))
    old = pool.template.pid
    assert old is not None and parent_pid(before["pid"]) == old
    spare = eventually_blocking(lambda: pool._spares[0].pid if pool._spares else None, "a spare")

    os.kill(old, signal.SIGKILL)

    eventually_blocking(
        lambda: ended(old) and gone(before["pid"]) and gone(spare), "the template and its processes to end"
    )
    module = f"pipeline_{uuid.uuid4().hex[:8]}"
    end = run(
        pool,
        deployment(tmp_path, "slot_tasks:versions", job_id=new_job_id(), params={"module": module}),
        [tasks, versioned_module(tmp_path, module, "after")],
    )
    [row] = rows_of(end)
    new = pool.template.pid
    assert new is not None and new != old and slot_templates() == {new}
    assert (row["here"], row["ppid"]) == ("after", new)


def test_with_the_template_switched_off_slot_processes_are_started_anew(
    connect_server: ConnectServer, tasks: str, tmp_path: Path
) -> None:
    pool = new_pool(connect_server, spares=1, template=False)
    try:
        [row] = rows_of(run(pool, deployment(tmp_path, "slot_tasks:context", job_id=new_job_id()), [tasks]))
        assert parent_pid(row["pid"]) == os.getpid() and slot_templates() == set()
    finally:
        pool.close()
    assert slot_processes() == set(), "slot processes left after close()"


def daemons_since(server: int, earlier: dict[int, str]) -> dict[int, str]:
    """The server's Python worker daemons (pid → session) not among `earlier`."""
    return {pid: session for pid, session in worker_daemons(server) if pid not in earlier}


def test_a_spares_session_has_sparks_python_workers_started_for_its_first_jobs_udfs(
    connect_server: ConnectServer, tasks: str, tmp_path: Path
) -> None:
    server = connect_server.pid
    assert server is not None
    earlier = dict(worker_daemons(server))  # other tests' sessions' daemons on the module's server
    pool = SlotProcessPool(
        SlotPoolSettings(spares=1, cancellation_timeout=CANCELLATION_TIMEOUT_S, python_workers=2),
        connect_url=connect_server.url,
        driver_log=str(connect_server.log_path),
    )
    pool.start()
    try:
        # the spare's session, made ahead, has its daemon before any job came
        [spares_daemon] = eventually_blocking(
            lambda: daemons_since(server, earlier) or None, "the spare's Python worker daemon"
        )
        end = run(pool, deployment(tmp_path, "slot_tasks:udf_worker_parents", job_id=new_job_id()), [tasks])
        assert {row["daemon"] for row in rows_of(end)} == {spares_daemon}  # the job's UDFs ran in its workers
    finally:
        pool.close()
    assert slot_processes() == set(), "slot processes left after close()"


def test_a_slot_process_stopped_with_its_session_unused_tells_it_released_and_its_daemon_is_ended(
    connect_server: ConnectServer,
) -> None:
    server = connect_server.pid
    assert server is not None
    earlier = dict(worker_daemons(server))
    settings = SlotPoolSettings(python_workers=2)
    child = spawn_slot_process(settings, lambda: connect_server.url, require_warm=True)
    try:
        [(daemon, session)] = eventually_blocking(
            lambda: list(daemons_since(server, earlier).items()) or None,
            "the Python worker daemon of the process's session",
        )
        released = ReleasedSessions()
        child.stop(settings.stop_grace, released)
        assert released.recent() == {session}
    finally:
        child.kill()
    assert WorkerDaemonReaper(lambda: [server], released).check() == 1
    eventually_blocking(lambda: ended(daemon), "the unused session's daemon to end")


def test_a_later_job_of_the_same_code_runs_in_the_same_process_in_a_session_of_its_own(
    pool: SlotProcessPool, tasks: str, tmp_path: Path, connect_server: ConnectServer
) -> None:
    first = rows_of(
        run(
            pool,
            deployment(
                tmp_path,
                "slot_tasks:session_facts",
                job_id=new_job_id(),
                params={"view": "first_jobs_view"},
                spark_conf={"spark.sql.shuffle.partitions": "3"},
            ),
            [tasks],
        )
    )[0]
    time.sleep(1.0)  # idle: the process makes the next job's session ahead
    second = rows_of(run(pool, deployment(tmp_path, "slot_tasks:session_facts", job_id=new_job_id()), [tasks]))[0]
    assert second["pid"] == first["pid"]  # the same code: no new process
    assert second["session_id"] != first["session_id"]
    assert [(r["partitions"], r["views"], r["active"]) for r in (first, second)] == [
        ("3", "first_jobs_view", True),
        ("2", "", True),
    ]  # the second job sees none of the first's settings or views
    # released once the next job came
    eventually_blocking(
        lambda: session_state(connect_server, first["session_id"]) != "open",
        "the first job's session to be released on the server",
        interval=0.2,
    )


def test_the_session_made_ahead_for_the_next_job_of_the_same_code_holds_that_code_already(
    pool: SlotProcessPool, tasks: str, tmp_path: Path, connect_server: ConnectServer
) -> None:
    module = f"pipeline_{uuid.uuid4().hex[:8]}"
    code = versioned_module(tmp_path, module, "v1")

    def sessions_holding_the_module() -> int:
        return len(list((connect_server.work_dir / "local").rglob(f"{module}.py")))

    def versions_job() -> dict[str, Any]:
        tdd = deployment(tmp_path, "slot_tasks:versions", job_id=new_job_id(), params={"module": module})
        return rows_of(run(pool, tdd, [tasks, code]))[0]

    first = versions_job()
    # idle, the process makes the next job's session and sends it this code: the first job's
    # session (open until the next job comes) and that one hold the module
    eventually_blocking(
        lambda: sessions_holding_the_module() == 2, "the session made ahead to hold the job's code", interval=0.2
    )
    Path(code).write_text("VERSION = 'rewritten'\n")  # after it was sent: the session has it as it was
    second = versions_job()
    assert second["pid"] == first["pid"]
    # the second job's first task did not send the rewritten file: its workers import what was sent ahead
    assert [(r["here"], r["on_executors"]) for r in (first, second)] == [("v1", "v1"), ("v1", "v1")]


def test_a_task_in_a_jobs_python_environment_runs_there_with_its_udfs_and_leaves_a_warm_spare_in_it(
    pool: SlotProcessPool, tasks: str, tmp_path: Path
) -> None:
    make_wheel(tmp_path / "wheelhouse", "sd_probe", "2.0")
    environments = PythonEnvironments(
        PythonEnvironmentSettings(
            directory=tmp_path / "envs", find_links=(str(tmp_path / "wheelhouse"),), no_index=True
        )
    )
    with environments.use(Environment(("sd_probe==2.0",)), {}) as ready:

        def in_environment(slot_index: int) -> dict[str, Any]:
            tdd = deployment(
                tmp_path,
                "slot_tasks:versions",
                job_id=new_job_id(),
                slot_index=slot_index,
                params={"module": "sd_probe"},
            )
            return rows_of(pool.run(AttemptLaunch(tdd, (tasks,), python=ready.python), lambda _: None))[0]

        first = in_environment(0)
        assert (first["here"], first["on_executors"]) == ("2.0", "2.0")  # the task, and its UDF on Spark's workers
        spare = eventually_blocking(
            lambda: next(iter(pool._environment_spares.values()), None), "a warm spare in the environment"
        )
        second = in_environment(1)
        assert second["pid"] == spare.pid and (second["here"], second["on_executors"]) == ("2.0", "2.0")
        # the TaskExecutor's own interpreter on slot 0 again: a process without the environment
        plain = run(
            pool,
            deployment(tmp_path, "slot_tasks:versions", job_id=new_job_id(), params={"module": "sd_probe"}),
            [tasks],
        )
        assert (
            plain.state is ExecutionState.FAILED and plain.failure is not None and "sd_probe" in plain.failure.message
        )


def test_two_concurrent_jobs_run_their_own_module_version_and_shuffle_partitions(
    pool: SlotProcessPool, tasks: str, tmp_path: Path
) -> None:
    module = f"pipeline_{uuid.uuid4().hex[:8]}"
    jobs = {new_job_id(): ("v1", "3"), new_job_id(): ("v2", "5")}
    attempts = []
    for slot_index, (job_id, (version, partitions)) in enumerate(jobs.items()):
        peers = [other for other in jobs if other != job_id]
        tdd = deployment(
            tmp_path,
            "slot_tasks:versions",
            job_id=job_id,
            slot_index=slot_index,
            params={"module": module, "peers": peers},
            spark_conf={"spark.sql.shuffle.partitions": partitions, "spark.sql.adaptive.enabled": "false"},
        )
        attempts.append(Attempt(pool, tdd, [tasks, versioned_module(tmp_path, module, version)]))
    seen = {attempt.tdd.job_id: rows_of(attempt.join())[0] for attempt in attempts}
    assert {job_id: (r["here"], r["on_executors"], r["conf"], r["partitions"]) for job_id, r in seen.items()} == {
        job_id: (version, version, partitions, int(partitions)) for job_id, (version, partitions) in jobs.items()
    }


def test_new_code_on_both_slots_at_once_runs_in_two_warm_spares_and_the_processes_stay_bounded(
    connect_server: ConnectServer, tasks: str, tmp_path: Path
) -> None:
    module = f"pipeline_{uuid.uuid4().hex[:8]}"
    pool = new_pool(connect_server, spares=2)
    try:
        bound: list[set[int]] = []
        for round_ in range(2):  # each round, a new version of the module on both slots, running at once
            warm = eventually_blocking(
                lambda: {child.pid for child in pool._spares} if len(pool._spares) == 2 else None,
                "two warm spares",
            )
            jobs = {new_job_id(): f"r{round_}-slot{slot_index}" for slot_index in (0, 1)}
            attempts = [
                Attempt(
                    pool,
                    deployment(
                        tmp_path,
                        "slot_tasks:versions",
                        job_id=job_id,
                        slot_index=slot_index,
                        params={"module": module, "peers": [other for other in jobs if other != job_id]},
                    ),
                    [tasks, versioned_module(tmp_path, module, version)],
                )
                for slot_index, (job_id, version) in enumerate(jobs.items())
            ]
            seen = {attempt.tdd.job_id: rows_of(attempt.join())[0] for attempt in attempts}
            assert {job_id: (r["here"], r["on_executors"]) for job_id, r in seen.items()} == {
                job_id: (version, version) for job_id, version in jobs.items()
            }
            bound.append({r["pid"] for r in seen.values()})
            assert bound[-1] == warm  # both ran in the spares made ahead, none in a process started for them
        eventually_blocking(lambda: all(gone(pid) for pid in bound[0]), "the first round's processes to stop")
        spares = eventually_blocking(
            lambda: {child.pid for child in pool._spares} if len(pool._spares) == 2 else None,
            "the spares to be made again",
        )
        assert slot_processes() == bound[1] | spares  # one per slot and the two spares, nothing more
    finally:
        pool.close()
    assert slot_processes() == set(), "slot processes left after close()"


# --------------------------------------------------------------------------------------------
# Cancellation and dying processes


def test_cancelling_interrupts_the_spark_operation_at_once_and_leaves_the_other_slot_running(
    pool: SlotProcessPool, tasks: str, tmp_path: Path
) -> None:
    job_id = new_job_id()
    endless = Attempt(pool, deployment(tmp_path, "slot_tasks:endless_spark", job_id=job_id, slot_index=0), [tasks])
    other = Attempt(
        pool,
        deployment(tmp_path, "slot_tasks:after_marker", job_id=job_id, slot_index=1, params={"wait_for": "go"}),
        [tasks],
    )
    process = wait_for_marker(tmp_path, "spark-started")
    wait_for_marker(tmp_path, "waiting")
    time.sleep(1.0)  # the Spark operation runs

    cancelled_at = time.monotonic()
    assert pool.cancel(endless.tdd.execution_id)
    assert endless.join().state is ExecutionState.CANCELED
    assert endless.ended_at - cancelled_at < CANCELLATION_TIMEOUT_S  # interrupted, not killed
    assert not gone(process)

    (tmp_path / "markers" / "go").write_text("")
    assert other.join().rows == 3
    assert not pool.cancel(endless.tdd.execution_id)  # over
    # the slot's process and the job's session serve the job's next task
    [row] = rows_of(run(pool, deployment(tmp_path, "slot_tasks:context", job_id=job_id, slot_index=0), [tasks]))
    assert row["pid"] == process


def test_a_task_that_swallows_cancellation_is_killed_after_the_timeout_and_its_slot_runs_the_next_job(
    pool: SlotProcessPool, connect_server: ConnectServer, tasks: str, tmp_path: Path
) -> None:
    stubborn = Attempt(pool, deployment(tmp_path, "slot_tasks:swallow_cancellation", job_id=new_job_id()), [tasks])
    process = wait_for_marker(tmp_path, "swallowing")

    session_id = (tmp_path / "markers" / "session-id").read_text()
    assert session_state(connect_server, session_id) == "open"

    cancelled_at = time.monotonic()
    assert pool.cancel(stubborn.tdd.execution_id)
    assert stubborn.join().state is ExecutionState.CANCELED
    assert CANCELLATION_TIMEOUT_S <= stubborn.ended_at - cancelled_at < CANCELLATION_TIMEOUT_S + 3.0
    assert gone(process)
    # its session was released on the server, not left until the server's session timeout
    eventually_blocking(
        lambda: session_state(connect_server, session_id) != "open",
        f"session {session_id} of the killed process to be released",
        interval=0.1,
    )
    assert session_state(connect_server, session_id) == "closed"

    [row] = rows_of(run(pool, deployment(tmp_path, "slot_tasks:context", job_id=new_job_id()), [tasks]))
    assert row["pid"] != process


@pytest.mark.parametrize(
    "params, how", [({"code": 1}, "exited with code 1"), ({"signal": "SIGSEGV"}, "killed by signal 11 (SIGSEGV)")]
)
def test_a_dying_slot_process_fails_only_its_attempt_and_the_next_task_runs(
    pool: SlotProcessPool, tasks: str, tmp_path: Path, params: dict[str, Any], how: str
) -> None:
    job_id = new_job_id()
    neighbour = Attempt(
        pool,
        deployment(tmp_path, "slot_tasks:after_marker", job_id=job_id, slot_index=1, params={"wait_for": "dying"}),
        [tasks],
    )
    wait_for_marker(tmp_path, "waiting")

    end = run(pool, deployment(tmp_path, "slot_tasks:die", job_id=job_id, slot_index=0, params=params), [tasks])

    process = wait_for_marker(tmp_path, "dying")
    assert end.state is ExecutionState.FAILED and end.failure is not None
    assert (end.failure.cls, end.failure.message) == (
        "SlotProcessLost",
        f"the slot process (pid {process}) died during the task: {how}",
    )
    assert neighbour.join().rows == 3  # the other slot's task went on
    [row] = rows_of(run(pool, deployment(tmp_path, "slot_tasks:context", job_id=job_id, slot_index=0), [tasks]))
    assert row["pid"] != process


# --------------------------------------------------------------------------------------------
# The server dies under the slot processes (last in the module: it restarts the shared server)


def test_a_dead_connect_server_is_restarted_and_the_slot_processes_follow_it(
    pool: SlotProcessPool, connect_server: ConnectServer, tasks: str, tmp_path: Path
) -> None:
    job_id = new_job_id()
    [before] = rows_of(run(pool, deployment(tmp_path, "slot_tasks:context", job_id=job_id), [tasks]))
    running = Attempt(pool, deployment(tmp_path, "slot_tasks:endless_spark", job_id=job_id, slot_index=1), [tasks])
    wait_for_marker(tmp_path, "spark-started")
    assert connect_server.pid is not None
    os.killpg(connect_server.pid, signal.SIGKILL)  # the server and everything it started, as a crash would
    eventually_blocking(lambda: not connect_server.is_alive(), "the killed server to end", timeout=10)

    ConnectServerWatch(ConnectServers(connect_server, successor=no_successor), pool).check()

    assert connect_server.is_healthy()
    end = running.join()
    assert end.state is ExecutionState.FAILED and end.failure is not None
    # the task's action fails fast when the server dies, or the watch replaces its process
    assert "Spark Connect server" in end.failure.message, end.failure
    [after] = rows_of(run(pool, deployment(tmp_path, "slot_tasks:context", job_id=job_id), [tasks]))
    assert after["pid"] != before["pid"]  # a fresh process with a session on the new server
