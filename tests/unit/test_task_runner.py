"""TaskRunner with a stand-in for the slot processes: states, reports, artifacts, slots, cancellation.

What runs inside a slot process (ctx, results, failures, Spark) is tested against a real Spark
Connect server in tests/integration/test_slot_pool.py.
"""

from __future__ import annotations

import threading
import time
import uuid
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from sparkdispatch.errors import FencingTokenMismatch, ServiceUnavailable
from sparkdispatch.model.environment import Environment
from sparkdispatch.model.job_result import Failure
from sparkdispatch.model.protocol import ExecutionStateUpdate, TaskDeploymentDescriptor
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.storage.attempt_logs import attempt_log_path
from sparkdispatch.storage.results import ResultLayout
from sparkdispatch.taskexecutor.artifact_cache import ArtifactCache
from sparkdispatch.taskexecutor.runner import TaskRunner
from sparkdispatch.taskexecutor.slot_table import SlotTable
from sparkdispatch.testing.blobs import LocalBlobs
from sparkdispatch.taskexecutor.slot_protocol import AttemptLaunch, AttemptState
from sparkdispatch.testing.waiting import eventually_blocking

SESSION = "00000000-0000-0000-0000-000000000000"
JOB_ID = "ab" * 16
WAIT_S = 30.0

Behaviour = Callable[[TaskDeploymentDescriptor, threading.Event], AttemptState]


def finishes(rows: int | None) -> Behaviour:
    """The function returned a DataFrame of `rows` rows (None: it returned nothing)."""

    def behaviour(tdd: TaskDeploymentDescriptor, cancelled: threading.Event) -> AttemptState:
        return AttemptState(
            ExecutionState.FINISHED, rows=rows, result_path=tdd.result_path if rows is not None else None
        )

    return behaviour


def runs_until_cancelled(tdd: TaskDeploymentDescriptor, cancelled: threading.Event) -> AttemptState:
    """A function that runs for a minute unless its slot process is told to cancel it."""
    if cancelled.wait(60):
        return AttemptState(ExecutionState.CANCELED)
    return AttemptState(ExecutionState.FINISHED)


def fails(tdd: TaskDeploymentDescriptor, cancelled: threading.Event) -> AttemptState:
    return AttemptState(ExecutionState.FAILED, failure=Failure("ValueError", "no sales on monday", "Traceback ..."))


class FakePool:
    """Stands in for `SlotProcessPool`: an attempt sends INITIALIZING and RUNNING, then ends as the
    behaviour its entrypoint names says. `gate`, when set, holds every attempt before the pool has it."""

    def __init__(self, behaviours: Mapping[str, Behaviour]) -> None:
        self.behaviours = behaviours
        self.runs: list[tuple[int, str, list[str]]] = []
        self.cancels: list[str] = []
        self.entered = threading.Event()
        self.gate: threading.Event | None = None
        self._lock = threading.Lock()
        self._attempts: dict[str, threading.Event] = {}

    def run(self, launch: AttemptLaunch, on_state: Callable[[AttemptState], None]) -> AttemptState:
        tdd = launch.tdd
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(WAIT_S)
        cancelled = threading.Event()
        with self._lock:
            self._attempts[tdd.execution_id] = cancelled
            self.runs.append((tdd.slot_index, tdd.execution_id, list(launch.artifact_paths)))
        try:
            on_state(AttemptState(ExecutionState.INITIALIZING))
            on_state(AttemptState(ExecutionState.RUNNING))
            return self.behaviours[tdd.entrypoint](tdd, cancelled)
        finally:
            with self._lock:
                del self._attempts[tdd.execution_id]

    def cancel(self, execution_id: str) -> bool:
        with self._lock:
            self.cancels.append(execution_id)
            cancelled = self._attempts.get(execution_id)
        if cancelled is None:
            return False
        cancelled.set()
        return True


class RecordingReporter:
    """Records reports; refuses the ones whose state is in `refuse` as stale; does not reach the master
    with those in `unreachable`; takes `delay_s` per state."""

    def __init__(
        self,
        refuse: frozenset[ExecutionState] = frozenset(),
        delay_s: dict[ExecutionState, float] | None = None,
        unreachable: frozenset[ExecutionState] = frozenset(),
    ) -> None:
        self.updates: list[ExecutionStateUpdate] = []
        self.refuse = refuse
        self.unreachable = unreachable
        self.delay_s = delay_s or {}
        self.lock = threading.Lock()

    def report(self, session_id: str, update: ExecutionStateUpdate) -> None:
        assert session_id == SESSION
        time.sleep(self.delay_s.get(update.state, 0.0))
        if update.state in self.unreachable:
            raise ServiceUnavailable("cannot reach the master at http://master:8081")
        with self.lock:
            self.updates.append(update)
        if update.state in self.refuse:
            raise FencingTokenMismatch("JobMaster", "other", update.job_master_id)

    def states(self, execution_id: str) -> list[ExecutionState]:
        with self.lock:
            return [u.state for u in self.updates if u.execution_id == execution_id]

    def last(self, execution_id: str) -> ExecutionStateUpdate:
        with self.lock:
            return [u for u in self.updates if u.execution_id == execution_id][-1]


class Blobs(LocalBlobs):
    """User code as blobs: files in a folder, resolved by their sha256 key."""

    def cache(self) -> ArtifactCache:
        return ArtifactCache(self.fetch, self.root / "cache", max_size=1 << 20)


def tdd_for(
    entrypoint: str, tmp_path: Path, *, artifacts: tuple[str, ...] = (), slot_index: int = 0, **fields: Any
) -> TaskDeploymentDescriptor:
    execution_id = uuid.uuid4().hex
    values: dict[str, Any] = dict(
        job_id=JOB_ID,
        job_master_id="jm-1",
        execution_id=execution_id,
        vertex_id="v",
        entrypoint=entrypoint,
        subtask_index=0,
        parallelism=1,
        attempt=0,
        allocation_id=f"alloc-{slot_index}",
        slot_index=slot_index,
        result_path=ResultLayout(str(tmp_path / "results")).attempt_path(JOB_ID, "v", 0, execution_id),
        artifacts=artifacts,
    )
    values.update(fields)
    return TaskDeploymentDescriptor(**values)


@pytest.fixture
def blobs(tmp_path: Path) -> Blobs:
    return Blobs(tmp_path)


def make_runner(
    pool: FakePool,
    reporter: RecordingReporter,
    blobs: Blobs | None = None,
    slots: int = 2,
    slot_release_timeout_s: float = 0.2,
) -> TaskRunner:
    return TaskRunner(
        pool=pool,
        slots=SlotTable(slots),
        reporter=reporter,
        task_executor_id="te-1",
        artifacts=blobs.cache() if blobs is not None else None,
        slot_release_timeout_s=slot_release_timeout_s,
    )


def in_thread(
    runner: TaskRunner, tdd: TaskDeploymentDescriptor, outcome: dict[str, ExecutionState]
) -> threading.Thread:
    thread = threading.Thread(target=lambda: outcome.__setitem__(tdd.execution_id, runner.run(tdd, SESSION)))
    thread.start()
    return thread


def test_the_attempt_runs_in_its_slots_process_and_its_states_are_reported_in_order(
    blobs: Blobs, tmp_path: Path
) -> None:
    key = blobs.put("tasks.py", b"def task(ctx): pass\n")
    pool = FakePool({"tasks:task": finishes(25)})
    reporter = RecordingReporter()
    runner = make_runner(pool, reporter, blobs)
    tdd = tdd_for("tasks:task", tmp_path, artifacts=(key,), slot_index=1)

    assert runner.run(tdd, SESSION) is ExecutionState.FINISHED

    assert pool.runs == [(1, tdd.execution_id, [str(tmp_path / "cache" / key / "tasks.py")])]
    # DEPLOYING is the JobMaster's own
    assert reporter.states(tdd.execution_id) == [
        ExecutionState.INITIALIZING,
        ExecutionState.RUNNING,
        ExecutionState.FINISHED,
    ]
    finished = reporter.last(tdd.execution_id)
    assert (finished.rows, finished.result_path, finished.task_executor_id) == (25, tdd.result_path, "te-1")
    assert runner.slots.slot_report().slots[1].allocation_id is None


def test_a_function_returning_nothing_finishes_without_rows_or_path(tmp_path: Path) -> None:
    reporter = RecordingReporter()
    tdd = tdd_for("tasks:task", tmp_path)

    assert make_runner(FakePool({"tasks:task": finishes(None)}), reporter).run(tdd, SESSION) is ExecutionState.FINISHED

    finished = reporter.last(tdd.execution_id)
    assert (finished.state, finished.rows, finished.result_path) == (ExecutionState.FINISHED, None, None)


def test_the_terminal_report_follows_the_slow_earlier_ones(tmp_path: Path) -> None:
    reporter = RecordingReporter(delay_s={ExecutionState.INITIALIZING: 0.3, ExecutionState.RUNNING: 0.3})
    runner = make_runner(FakePool({"tasks:task": finishes(None)}), reporter)
    tdds = [tdd_for("tasks:task", tmp_path) for _ in range(2)]

    for tdd in tdds:
        assert runner.run(tdd, SESSION) is ExecutionState.FINISHED
        assert reporter.states(tdd.execution_id) == [
            ExecutionState.INITIALIZING,
            ExecutionState.RUNNING,
            ExecutionState.FINISHED,
        ]


def test_a_failure_in_the_slot_process_is_reported_as_it_came(tmp_path: Path) -> None:
    reporter = RecordingReporter()
    tdd = tdd_for("tasks:task", tmp_path)

    assert make_runner(FakePool({"tasks:task": fails}), reporter).run(tdd, SESSION) is ExecutionState.FAILED

    failed = reporter.last(tdd.execution_id)
    assert failed.failure == Failure("ValueError", "no sales on monday", "Traceback ...")
    assert reporter.states(tdd.execution_id)[-2] is ExecutionState.RUNNING


def test_py_and_zip_artifacts_are_copied_once_into_the_cache_and_handed_over_in_order(
    blobs: Blobs, tmp_path: Path
) -> None:
    archive = tmp_path / "code.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("pkg/__init__.py", "")
    zip_key = blobs.put("code.zip", archive.read_bytes())
    helper_key = blobs.put("helper.py", b"FACTOR = 7\n")
    pool = FakePool({"pkg.jobs:task": finishes(7)})
    runner = make_runner(pool, RecordingReporter(), blobs)

    for _ in range(2):
        assert (
            runner.run(tdd_for("pkg.jobs:task", tmp_path, artifacts=(zip_key, helper_key)), SESSION)
            is ExecutionState.FINISHED
        )

    copies = [str(tmp_path / "cache" / zip_key / "code.zip"), str(tmp_path / "cache" / helper_key / "helper.py")]
    assert [paths for _, _, paths in pool.runs] == [copies, copies]
    assert all(Path(copy).is_file() for copy in copies)
    assert blobs.fetched == [zip_key, helper_key]  # cached per TaskExecutor


def test_an_artifact_that_is_neither_py_nor_zip_fails_the_attempt_before_it_runs(blobs: Blobs, tmp_path: Path) -> None:
    key = blobs.put("notes.txt", b"not code")
    pool = FakePool({"tasks:task": finishes(1)})
    reporter = RecordingReporter()
    tdd = tdd_for("tasks:task", tmp_path, artifacts=(key,))

    assert make_runner(pool, reporter, blobs).run(tdd, SESSION) is ExecutionState.FAILED

    failure = reporter.last(tdd.execution_id).failure
    assert failure is not None and "is not a .py, .zip or .whl file" in failure.message
    assert pool.runs == []


def test_a_task_with_an_environment_on_a_taskexecutor_that_builds_none_fails_before_it_runs(
    blobs: Blobs, tmp_path: Path
) -> None:
    pool = FakePool({"tasks:task": finishes(1)})
    reporter = RecordingReporter()
    tdd = tdd_for("tasks:task", tmp_path, environment=Environment(("tabulate>=0.9",)))

    assert make_runner(pool, reporter, blobs).run(tdd, SESSION) is ExecutionState.FAILED

    failure = reporter.last(tdd.execution_id).failure
    assert failure is not None and failure.cls == "EnvironmentBuildFailed" and pool.runs == []
    log = attempt_log_path(tdd.result_path, tdd.attempt)
    assert log is None or not log.exists()


def test_a_stale_report_stops_the_task_and_frees_the_slot(tmp_path: Path) -> None:
    """RUNNING goes out in the background while the function runs; its refusal cancels the attempt."""
    pool = FakePool({"tasks:task": runs_until_cancelled})
    reporter = RecordingReporter(refuse=frozenset({ExecutionState.RUNNING}))
    runner = make_runner(pool, reporter)
    tdd = tdd_for("tasks:task", tmp_path)

    assert runner.run(tdd, SESSION) is ExecutionState.CANCELED

    assert tdd.execution_id in pool.cancels  # the function did not run to its end
    # the JobMaster refused the execution: no terminal report for it
    assert reporter.states(tdd.execution_id) == [ExecutionState.INITIALIZING, ExecutionState.RUNNING]
    assert runner.slots.running() == []


def writes_its_partition(tdd: TaskDeploymentDescriptor, cancelled: threading.Event) -> AttemptState:
    """The function returned a DataFrame, written to the attempt's partition."""
    Path(tdd.result_path).mkdir(parents=True, exist_ok=True)
    Path(tdd.result_path, "part-0.parquet").write_bytes(b"rows")
    return AttemptState(ExecutionState.FINISHED, rows=1, result_path=tdd.result_path)


def test_a_finished_attempt_whose_end_is_refused_leaves_no_partition_behind(tmp_path: Path) -> None:
    """The task ran on while its job ended and was cleaned up (a frozen TaskExecutor, resumed): the
    JobMaster refuses its end, and the job's result directory does not come back."""
    tdd = tdd_for("tasks:writes", tmp_path)
    reporter = RecordingReporter(refuse=frozenset({ExecutionState.FINISHED}))
    runner = make_runner(FakePool({"tasks:writes": writes_its_partition}), reporter)

    assert runner.run(tdd, SESSION) is ExecutionState.FINISHED

    assert reporter.states(tdd.execution_id)[-1] is ExecutionState.FINISHED
    assert not (tmp_path / "results" / JOB_ID).exists()


def test_a_taken_end_keeps_its_partition_and_a_held_one_keeps_it_until_dropped(tmp_path: Path) -> None:
    taken, held = tdd_for("tasks:writes", tmp_path), tdd_for("tasks:writes", tmp_path)
    runner = make_runner(FakePool({"tasks:writes": writes_its_partition}), RecordingReporter())
    assert runner.run(taken, SESSION) is ExecutionState.FINISHED
    assert Path(taken.result_path, "part-0.parquet").is_file()

    runner = make_runner(
        FakePool({"tasks:writes": writes_its_partition}),
        RecordingReporter(unreachable=frozenset({ExecutionState.FINISHED})),
    )
    assert runner.run(held, SESSION) is ExecutionState.FINISHED
    assert Path(held.result_path, "part-0.parquet").is_file()  # the master may still take it
    runner.cancel_other_sessions("22222222-2222-3333-4444-555555555555")  # a new leader: nobody will
    assert not Path(held.result_path).exists() and Path(taken.result_path, "part-0.parquet").is_file()


def test_a_cancelled_attempt_leaves_no_partition_behind(tmp_path: Path) -> None:
    """The function wrote its partition, but its cancel came first: nobody reads what it wrote."""
    tdd = tdd_for("tasks:writes", tmp_path)
    pool = FakePool({"tasks:writes": writes_its_partition})
    pool.gate = threading.Event()
    reporter = RecordingReporter()
    runner = make_runner(pool, reporter)
    outcome: dict[str, ExecutionState] = {}
    thread = in_thread(runner, tdd, outcome)
    assert pool.entered.wait(WAIT_S)
    eventually_blocking(lambda: runner.slots.find(tdd.execution_id) is not None, "the attempt to occupy its slot")
    runner.cancel(tdd.execution_id)
    pool.gate.set()
    thread.join(WAIT_S)

    assert outcome == {tdd.execution_id: ExecutionState.CANCELED}
    assert not Path(tdd.result_path).exists()


def test_a_busy_slot_refuses_a_second_task(tmp_path: Path) -> None:
    reporter = RecordingReporter()
    runner = make_runner(FakePool({"tasks:task": finishes(None)}), reporter)
    first = tdd_for("tasks:task", tmp_path, slot_index=0)
    held = runner.slots.occupy(first, SESSION)
    second = tdd_for("tasks:task", tmp_path, slot_index=0)

    assert runner.run(second, SESSION) is ExecutionState.FAILED

    message = reporter.last(second.execution_id).failure.message  # type: ignore[union-attr]
    assert "slot 0 is busy" in message and "did not stop within" in message
    report = runner.slots.slot_report()
    assert (report.slots[0].allocation_id, report.slots[0].job_id) == (first.allocation_id, JOB_ID)
    assert runner.slots.executions() == [{"job_id": JOB_ID, "execution_id": first.execution_id, "state": "DEPLOYING"}]
    assert held is not None
    runner.slots.release(held)
    assert runner.slots.slot_report().slots[0].allocation_id is None


def test_a_new_deployment_supersedes_the_attempt_still_in_its_slot(tmp_path: Path) -> None:
    """The master released the slot (its job was cancelled) before the old task stopped here."""
    pool = FakePool({"tasks:long": runs_until_cancelled, "tasks:quick": finishes(2)})
    reporter = RecordingReporter()
    runner = make_runner(pool, reporter, slot_release_timeout_s=60.0)
    old = tdd_for("tasks:long", tmp_path, slot_index=0)
    new = tdd_for("tasks:quick", tmp_path, slot_index=0)
    outcome: dict[str, ExecutionState] = {}
    thread = in_thread(runner, old, outcome)
    eventually_blocking(lambda: ExecutionState.RUNNING in reporter.states(old.execution_id), "the old task to run")

    assert runner.run(new, SESSION) is ExecutionState.FINISHED
    thread.join(WAIT_S)
    assert outcome == {old.execution_id: ExecutionState.CANCELED}
    assert reporter.last(new.execution_id).rows == 2


def test_cancelling_one_slot_stops_only_its_attempt(tmp_path: Path) -> None:
    release_short = threading.Event()

    def short(tdd: TaskDeploymentDescriptor, cancelled: threading.Event) -> AttemptState:
        assert release_short.wait(WAIT_S)
        return AttemptState(ExecutionState.FINISHED, rows=4, result_path=tdd.result_path)

    pool = FakePool({"tasks:long": runs_until_cancelled, "tasks:short": short})
    reporter = RecordingReporter()
    runner = make_runner(pool, reporter)
    long_tdd = tdd_for("tasks:long", tmp_path, slot_index=0)
    short_tdd = tdd_for("tasks:short", tmp_path, slot_index=1)
    outcome: dict[str, ExecutionState] = {}
    threads = [in_thread(runner, tdd, outcome) for tdd in (long_tdd, short_tdd)]
    # RUNNING seen: the attempts' states passed the runner (which tells the pool again of a cancel that came first)
    eventually_blocking(
        lambda: all(ExecutionState.RUNNING in reporter.states(t.execution_id) for t in (long_tdd, short_tdd)),
        "both attempts running in their slot processes",
    )

    assert runner.cancel(long_tdd.execution_id)
    release_short.set()
    for thread in threads:
        thread.join(WAIT_S)

    assert outcome == {long_tdd.execution_id: ExecutionState.CANCELED, short_tdd.execution_id: ExecutionState.FINISHED}
    assert reporter.states(long_tdd.execution_id)[-1] is ExecutionState.CANCELED
    assert reporter.last(short_tdd.execution_id).rows == 4
    assert pool.cancels == [long_tdd.execution_id]
    assert not runner.cancel(long_tdd.execution_id)  # gone from its slot


def test_a_task_cancelled_before_its_process_had_it_is_cancelled_there_too(tmp_path: Path) -> None:
    pool = FakePool({"tasks:task": runs_until_cancelled})
    pool.gate = threading.Event()
    reporter = RecordingReporter()
    runner = make_runner(pool, reporter)
    tdd = tdd_for("tasks:task", tmp_path)
    outcome: dict[str, ExecutionState] = {}
    thread = in_thread(runner, tdd, outcome)
    assert pool.entered.wait(WAIT_S)

    assert runner.cancel(tdd.execution_id)  # the pool does not have the attempt yet
    pool.gate.set()
    thread.join(WAIT_S)

    # the first cancellation found no attempt in the pool; the one sent once it had it stopped it
    assert outcome == {tdd.execution_id: ExecutionState.CANCELED}
    assert pool.cancels[:2] == [tdd.execution_id, tdd.execution_id]


def test_an_attempt_that_finished_after_its_cancellation_ends_canceled(tmp_path: Path) -> None:
    cancelled_meanwhile = threading.Event()
    runner: TaskRunner | None = None

    def finishes_anyway(tdd: TaskDeploymentDescriptor, cancelled: threading.Event) -> AttemptState:
        assert runner is not None and runner.cancel(tdd.execution_id)
        cancelled_meanwhile.set()
        return AttemptState(ExecutionState.FINISHED, rows=1, result_path=tdd.result_path)

    reporter = RecordingReporter()
    runner = make_runner(FakePool({"tasks:task": finishes_anyway}), reporter)
    tdd = tdd_for("tasks:task", tmp_path)

    assert runner.run(tdd, SESSION) is ExecutionState.CANCELED
    assert cancelled_meanwhile.is_set()
    assert reporter.last(tdd.execution_id).state is ExecutionState.CANCELED


# -- what the heartbeats list -------------------------------------------------------------------


def test_a_deployment_taken_from_the_broker_is_listed_until_it_runs_and_runs_once(tmp_path: Path) -> None:
    """Listed as DEPLOYING while it waits for a thread or its slot; a second delivery of it is dropped."""
    pool = FakePool({"tasks:task": finishes(3)})
    reporter = RecordingReporter()
    runner = make_runner(pool, reporter)
    tdd = tdd_for("tasks:task", tmp_path)
    runner.slots.receive(JOB_ID, tdd.execution_id, SESSION)
    runner.slots.receive(JOB_ID, tdd.execution_id, SESSION)  # delivered twice
    assert runner.slots.executions() == [{"job_id": JOB_ID, "execution_id": tdd.execution_id, "state": "DEPLOYING"}]
    assert runner.slots.slot_report().slots[0].allocation_id is None  # not in its slot yet

    assert runner.run(tdd, SESSION) is ExecutionState.FINISHED
    assert runner.slots.executions() == []
    assert runner.run(tdd, SESSION) is ExecutionState.CANCELED  # the second delivery
    runner.slots.receive(JOB_ID, tdd.execution_id, SESSION)  # a third one, taken after the first ran
    assert runner.slots.executions() == []
    assert len(pool.runs) == 1
    assert reporter.states(tdd.execution_id) == [
        ExecutionState.INITIALIZING,
        ExecutionState.RUNNING,
        ExecutionState.FINISHED,
    ]


def test_a_deployment_cancelled_before_it_reached_its_slot_never_runs(tmp_path: Path) -> None:
    pool = FakePool({"tasks:task": finishes(3)})
    reporter = RecordingReporter()
    runner = make_runner(pool, reporter)
    tdd = tdd_for("tasks:task", tmp_path)
    runner.slots.receive(JOB_ID, tdd.execution_id, SESSION)
    assert runner.cancel(tdd.execution_id)  # a stale execution the JobMaster saw in a heartbeat
    assert runner.slots.executions() == []

    assert runner.run(tdd, SESSION) is ExecutionState.CANCELED
    assert pool.runs == []
    assert reporter.states(tdd.execution_id) == [ExecutionState.CANCELED]
    assert not runner.cancel(tdd.execution_id)


def test_a_terminal_report_the_master_did_not_take_is_held_and_listed(tmp_path: Path) -> None:
    pool = FakePool({"tasks:task": finishes(3)})
    reporter = RecordingReporter(unreachable=frozenset({ExecutionState.FINISHED}))
    runner = make_runner(pool, reporter)
    tdd = tdd_for("tasks:task", tmp_path)

    assert runner.run(tdd, SESSION) is ExecutionState.FINISHED
    assert runner.slots.slot_report().slots[0].allocation_id is None  # the slot is free again
    [held] = runner.slots.held_reports()
    assert (held.session_id, held.update.state, held.update.rows) == (SESSION, ExecutionState.FINISHED, 3)
    assert runner.slots.executions() == [{"job_id": JOB_ID, "execution_id": tdd.execution_id, "state": "FINISHED"}]
    runner.slots.report_taken(tdd.execution_id)
    assert runner.slots.executions() == [] and runner.slots.held_reports() == []


def test_a_new_leader_session_frees_the_former_leaders_slots_and_cancels_its_tasks(tmp_path: Path) -> None:
    """The former leader was SIGKILLed: its JobMasters are gone, a new leader recovers its jobs."""
    new_session = "22222222-2222-3333-4444-555555555555"
    pool = FakePool({"tasks:long": runs_until_cancelled, "tasks:quick": finishes(2)})
    reporter = RecordingReporter()
    runner = make_runner(pool, reporter)
    old = tdd_for("tasks:long", tmp_path, slot_index=0)
    outcome: dict[str, ExecutionState] = {}
    thread = in_thread(runner, old, outcome)
    eventually_blocking(lambda: ExecutionState.RUNNING in reporter.states(old.execution_id), "the old task to run")
    queued = tdd_for("tasks:quick", tmp_path, slot_index=1)
    runner.slots.receive(JOB_ID, queued.execution_id, SESSION)
    runner.slots.hold_report(
        SESSION,
        ExecutionStateUpdate(job_id=JOB_ID, job_master_id="jm-1", execution_id="e-9", state=ExecutionState.FINISHED),
    )
    # the same session (a ZooKeeper blip): everything stays
    assert runner.slots.slot_report(SESSION).slots[0].allocation_id == old.allocation_id
    assert len(runner.slots.executions(SESSION)) == 3
    # a new session: the former leader's slots are free for it at once, and none of its executions is listed
    assert [s.allocation_id for s in runner.slots.slot_report(new_session).slots] == [None, None]
    assert runner.slots.executions(new_session) == []

    runner.cancel_other_sessions(new_session)

    thread.join(WAIT_S)
    assert outcome == {old.execution_id: ExecutionState.CANCELED} and pool.cancels == [old.execution_id]
    assert runner.slots.held_reports() == []
    assert runner.run(queued, SESSION) is ExecutionState.CANCELED and len(pool.runs) == 1  # it never ran
    assert runner.slots.executions() == []
