"""One slot's Python process: runs the task functions of one job as a Spark Connect client.

`python -P -m sparkdispatch.taskexecutor.slot_process --control-fd N --parent-pid P`, started
by `SlotProcessPool` (slot_pool.py), which talks to it over the socketpair end `N`
(slot_protocol.py). The process imports pyspark's Connect client at start, so a spare is warm,
and says `ready`. Its first `run` binds it to that run's code: the job's artifact files, which are
content-addressed (`<cache>/<sha256>/<name>`) and go on this process's `sys.path`. A run with other
code is refused: the pool gives each code version its own processes, so two versions of one module
never meet in one interpreter. Jobs of the same code follow each other in one process, as Spark
reuses its Python workers, each in a Connect session of its own (`session_id` of its own, the job's
`spark_conf` set key by key, its artifacts added with `addArtifacts(..., pyfile=True)`), which the
job's later tasks here reuse; the previous job's session is released when the next job comes.
A session made ahead while the process is idle (`warm`) is taken by the next job, so a job's first
task here does not pay a session's first calls, nor, after a job of the same code, the upload of
that code. Told of a `server` that replaces the current one, the process releases its sessions on
the old server (after the attempt it runs, if any) and makes its later ones, the current job's
next included, on the new one. Started in a job's Python environment (`--udf-python`, its
interpreter), the process sets `spark.sql.execution.pyspark.python` on each job session, so Spark's
Python workers run the job's UDFs in that environment too.

A `cancel` interrupts the session's operations from the control thread at once and again every
`REINTERRUPT_S` while the function runs; the attempt ends CANCELED whatever it raised. The
process exits when its parent closes the channel or dies (on Linux the kernel kills it too:
`PR_SET_PDEATHSIG`). It ignores SIGINT and SIGTERM sent to the TaskExecutor's process group:
the TaskExecutor decides when tasks stop (a warm shutdown lets them finish).

Each attempt runs alone in this process, so its stdout and stderr (inherited from the
TaskExecutor) are pointed at the attempt's log file while it runs (attempt_logs.py), with the
Spark driver's lines about the attempt (driver_log.py), through a pipe whose reader caps the file
(capped_log.py, attempt_code.py); between attempts they are the TaskExecutor's. This module is
the message loop and the attempt's course; its task function and output (attempt_code.py) and
its Connect sessions (slot_sessions.py) stand apart.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import queue
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sparkdispatch.storage.attempt_logs import attempt_log_path, chained_log_path
from sparkdispatch.errors import ConfigurationError, IllegalStateTransition
from sparkdispatch.lifeline import die_with_parent
from sparkdispatch.model.job_result import MAX_INPUT_FILES
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.storage.results import WrittenPartition, job_dir_of, write_partition
from sparkdispatch.taskexecutor.attempt_failures import failure_of, session_gone
from sparkdispatch.taskexecutor.chained_vertices import ChainedFrames, as_dataframe
from sparkdispatch.taskexecutor.connect_url import shown
from sparkdispatch.taskexecutor.executor_archive import run_udfs_in
from sparkdispatch.taskexecutor.input_datasets import input_datasets
from sparkdispatch.taskexecutor.plan_reads import reads_only_under
from sparkdispatch.taskexecutor.driver_log import DriverLog, progress_handler
from sparkdispatch.taskexecutor.attempt_code import import_path_entry, load_entrypoint, output_to
from sparkdispatch.taskexecutor.slot_python_workers import PythonWorkerStart
from sparkdispatch.taskexecutor.start_deadline import StartDeadline, StartedLate, not_started_late
from sparkdispatch.taskexecutor.slot_sessions import add_code, make_active, new_session, server_session_id
from sparkdispatch.taskexecutor.slot_protocol import (
    CANCEL,
    READY,
    RUN,
    SESSION,
    SERVER,
    STOP,
    STOPPED,
    WARM,
    WARMED,
    AttemptState,
    ControlChannel,
    Message,
    RunRequest,
)
from sparkdispatch.taskexecutor.task_context import TaskContext

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.connect.session import SparkSession

log = logging.getLogger(__name__)


#: How often a cancelled attempt's Spark operations are interrupted again while its function
#: still runs, to catch operations it starts after the first interrupt.
REINTERRUPT_S = 0.5
#: A warmed session is handed to a job only this long: well inside the server's idle-session
#: timeout (`spark.connect.session.manager.defaultSessionTimeout`, 1 h).
WARM_SESSION_MAX_AGE_S = 600.0
#: Idle this long with no warmed session, a process that has run a job makes one for the next job;
#: after a failed try, not again for `WARM_RETRY_S`.
WARM_WHEN_IDLE_S = 0.5
WARM_RETRY_S = 30.0


def _write_output(text: str) -> None:
    """Into the attempt's log (this process's stdout while an attempt runs)."""
    sys.stdout.write(text)
    sys.stdout.flush()


def _input_datasets(frame: DataFrame, result_path: str, kept_dir: str | None = None) -> tuple[str, ...]:
    """The datasets `frame` read besides the job's results, written (under `result_path`'s job
    directory) or kept on this TaskExecutor (under `kept_dir`): one analyze call to the server, none
    when its plan reads only the job's results; none when Spark cannot say, which does not fail the task."""
    own_results = job_dir_of(result_path)
    kept = () if kept_dir is None else (kept_dir,)
    try:
        if reads_only_under(frame, own_results, *kept):
            return ()
        files = frame.inputFiles()
    except Exception as exc:  # noqa: BLE001 - lineage is a description; the task's result stands
        log.warning("the input files of the task's DataFrame are left out of its lineage: %s", exc)
        return ()
    return input_datasets(files, own_results=own_results, also_own=kept, limit=MAX_INPUT_FILES)


@dataclass(frozen=True)
class _SessionAhead:
    """A session `warm` made for the next job, and the code (artifact files) already added to it."""

    connect_url: str
    made: float
    session: SparkSession
    code: tuple[str, ...]


@dataclass
class _Attempt:
    execution_id: str
    cancelled: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)


class SlotProcess:
    """The serving loop: requests from the control channel, attempts on the main thread."""

    def __init__(self, channel: ControlChannel, *, udf_python: str | None = None) -> None:
        self._channel = channel
        #: the job's Python environment's interpreter, which Spark's Python workers of its sessions run too
        self._udf_python = udf_python
        self._requests: queue.SimpleQueue[Message] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._attempt: _Attempt | None = None
        #: the artifact files of the code this process runs, bound by its first run
        self._code: tuple[str, ...] | None = None
        self._job_id: str | None = None
        self._session: SparkSession | None = None
        self._connect_url: str | None = None
        #: a session `warm` made and used, kept for the next job: its first calls are paid
        self._warm_session: _SessionAhead | None = None
        self._warming: threading.Thread | None = None
        self._warm_again_at = 0.0
        #: Spark's Python workers a session made ahead starts (the pool's `warm` says how many)
        self._python_workers = 0
        self._starting_workers: PythonWorkerStart | None = None
        #: server-side ids of sessions made ahead and released unused, not yet told to the pool
        self._released_unused: list[str] = []
        self._path_entries: set[str] = set()
        self._driver_log = DriverLog(_write_output)

    def serve(self) -> int:
        """Answer requests until told to stop; returns the exit code."""
        threading.Thread(target=self._read_control, daemon=True, name="slot-control").start()
        self._channel.send({"type": READY, "pid": os.getpid()})
        while True:
            try:
                message = self._requests.get(timeout=WARM_WHEN_IDLE_S if self._wants_warm_session() else None)
            except queue.Empty:
                self._warm_in_background()
                continue
            kind = message["type"]
            if kind == RUN:
                self._channel.send(self.run_attempt(message).to_message())
            elif kind == WARM:
                self._python_workers = int(message.get("python_workers", 0))
                error = self.warm(str(message["connect_url"]))
                self._channel.send({"type": WARMED, "error": error})
                if error is None:
                    self._start_python_workers()
            elif kind == SERVER:
                self.move_to(str(message["connect_url"]))
            elif kind == STOP:
                self._stop_session()
                self._channel.send({"type": STOPPED, "released": self._take_released_unused()})
                return 0

    def _read_control(self) -> None:
        """The control thread: cancels act here at once, everything else queues for the main thread."""
        while True:
            message = self._channel.receive()
            if message is None:
                # The TaskExecutor is gone: nobody will hear of this attempt's end.
                os._exit(0)
            kind = message["type"]
            if kind == CANCEL:
                self._cancel(str(message["execution_id"]))
                continue
            if kind == RUN:
                # registered before queueing, so a cancel right behind the run finds it
                with self._lock:
                    self._attempt = _Attempt(execution_id=str(message.get("tdd", {}).get("execution_id", "")))
            self._requests.put(message)

    # ----------------------------------------------------------------------------------------
    # Attempts

    def run_attempt(self, message: Message) -> AttemptState:
        """Run one attempt to its end, sending INITIALIZING and RUNNING; returns the terminal state."""
        with self._lock:
            attempt = self._attempt
        assert attempt is not None
        try:
            try:
                request = RunRequest.from_message(message)
            except Exception as exc:  # noqa: BLE001 - the pool sends valid runs; say so if one is not
                return self._failed(exc)
            with output_to(
                attempt_log_path(request.tdd.result_path, request.tdd.attempt), max_size=request.log_max_size
            ):
                self._driver_log.begin(Path(request.driver_log) if request.driver_log else None)
                try:
                    return self._outcome(request, attempt)
                finally:
                    self._driver_log.end()
        finally:
            attempt.done.set()
            with self._lock:
                self._attempt = None

    def _outcome(self, request: RunRequest, attempt: _Attempt) -> AttemptState:
        tdd = request.tdd
        self._send_state(ExecutionState.INITIALIZING)
        code = tuple(request.artifact_paths)
        if self._code is not None and code != self._code:
            return self._failed(
                IllegalStateTransition(
                    f"this slot process runs the code of artifacts {list(self._code)}; it does not run tasks of "
                    f"job {tdd.job_id}, whose artifacts are {list(code)}"
                )
            )
        self._code = code
        if tdd.job_id != self._job_id:
            self._release_job_session()
            self._job_id = tdd.job_id
        try:
            session = self._job_session(request)
            function = load_entrypoint(tdd.entrypoint)
        except BaseException as exc:  # noqa: BLE001 - a failure of the user code's setup fails the attempt
            return self._failed(exc)
        if attempt.cancelled.is_set():
            return AttemptState(ExecutionState.CANCELED)
        deadline = StartDeadline(self._channel, self._requests, request.start_before)
        if not deadline.may_start():
            # frozen or cut off since it was admitted: the master may run this attempt elsewhere by now
            return not_started_late()
        self._send_state(ExecutionState.RUNNING)
        chain = ChainedFrames(
            session,
            tdd,
            lambda vertex_id, index: output_to(
                chained_log_path(tdd.result_path, vertex_id, index, tdd.attempt), max_size=request.log_max_size
            ),
            # again before each function: building the chain and its inputs calls the Connect server,
            # and a TaskExecutor frozen meanwhile must start no function once it thaws
            before_each=deadline.check,
        )
        try:
            target = request.write_path()
            chain.build(load_entrypoint)
            ctx = TaskContext(
                spark=session,
                params=dict(tdd.params),
                subtask_index=tdd.subtask_index,
                parallelism=tdd.parallelism,
                job_id=tdd.job_id,
                vertex_id=tdd.vertex_id,
                attempt=tdd.attempt,
                inputs=chain.inputs(tdd.inputs, tdd.input_schemas),
            )
            deadline.check()
            result = function(ctx)
            written: WrittenPartition | None = None
            input_files: tuple[str, ...] = ()
            if result is not None and not attempt.cancelled.is_set():
                frame = as_dataframe(result)
                written = write_partition(frame, target)
                input_files = _input_datasets(frame, tdd.result_path, request.kept_job_dir())
        except StartedLate:
            return not_started_late()
        except BaseException as exc:  # noqa: BLE001 - this process exists to run the function; SystemExit too
            if attempt.cancelled.is_set():
                return AttemptState(ExecutionState.CANCELED)
            self._forget_session_if_gone(exc)
            return self._failed(exc)
        if attempt.cancelled.is_set():
            return AttemptState(ExecutionState.CANCELED)
        if written is None:
            return AttemptState(ExecutionState.FINISHED, chained_rows=chain.rows())
        return AttemptState(
            ExecutionState.FINISHED,
            chained_rows=chain.rows(),
            rows=written.rows,
            result_path=target,
            result_schema=written.schema,
            input_files=input_files,
        )

    def _send_state(self, state: ExecutionState) -> None:
        self._channel.send(AttemptState(state).to_message())

    @staticmethod
    def _failed(exc: BaseException) -> AttemptState:
        return AttemptState(ExecutionState.FAILED, failure=failure_of(exc))

    def _cancel(self, execution_id: str) -> None:
        with self._lock:
            attempt = self._attempt
        if attempt is None or attempt.execution_id != execution_id or attempt.cancelled.is_set():
            return
        attempt.cancelled.set()
        threading.Thread(
            target=self._keep_interrupting, args=(attempt,), daemon=True, name=f"interrupt-{execution_id}"
        ).start()

    def _keep_interrupting(self, attempt: _Attempt) -> None:
        while not attempt.done.is_set():
            session = self._session
            if session is not None:
                try:
                    session.interruptAll()
                except Exception as exc:  # noqa: BLE001 - the next round, or the pool's kill, handles it
                    log.warning("interrupting the operations of execution %s failed: %s", attempt.execution_id, exc)
            attempt.done.wait(REINTERRUPT_S)

    # ----------------------------------------------------------------------------------------
    # The job's session

    def _job_session(self, request: RunRequest) -> SparkSession:
        """The job's Connect session in this process, made by its first task."""
        if self._session is not None:
            return self._session
        self._connect_url = request.connect_url
        entries = [import_path_entry(path) for path in request.artifact_paths]
        ahead = self._take_warm_session(request.connect_url)
        session = new_session(request.connect_url) if ahead is None else ahead.session
        try:
            for key, value in request.tdd.spark_conf.items():
                try:
                    session.conf.set(key, value)
                except Exception as exc:
                    raise ConfigurationError(
                        f"Spark refused the job's configuration {key}={value!r}: "
                        f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                    ) from exc
            if self._udf_python is not None:  # a runtime SQL setting: the session's UDFs run there
                run_udfs_in(session, self._udf_python)
            if request.artifact_paths and (ahead is None or ahead.code != tuple(request.artifact_paths)):
                session.addArtifacts(*request.artifact_paths, pyfile=True)
        except BaseException:
            self._stop_quietly(session)
            raise
        for entry in reversed(entries):
            if entry not in self._path_entries:
                sys.path.insert(0, entry)
                self._path_entries.add(entry)
        importlib.invalidate_caches()
        make_active(session)
        session.registerProgressHandler(progress_handler(self._driver_log))
        self._session = session
        # the TaskExecutor releases it should it have to kill this process
        self._channel.send(
            {
                "type": SESSION,
                "session_id": session.session_id,
                "server_session_id": server_session_id(session),
                "released": self._take_released_unused(),
            }
        )
        return session

    def move_to(self, connect_url: str) -> None:
        """Release this process's sessions on the server it leaves, now, while that server still
        serves (it stops once no attempt runs there); later sessions are made at `connect_url`."""
        self._stop_session()
        self._connect_url = connect_url
        self._warm_again_at = 0.0
        log.info("moved to the Spark Connect server at %s", shown(connect_url))

    def _forget_session_if_gone(self, exc: BaseException) -> None:
        """After the server lost the session (it restarted), the job's next task here makes a new one."""
        if session_gone(exc):
            log.info("the Connect session of job %s is gone on the server; the next task makes a new one", self._job_id)
            self._session = None

    def _release_job_session(self) -> None:
        """The previous job's session, released in the background: the next job's task goes on."""
        session, self._session = self._session, None
        if session is not None:
            threading.Thread(
                target=self._stop_quietly, args=(session,), daemon=True, name="release-previous-session"
            ).start()

    def _wants_warm_session(self) -> bool:
        return (
            self._connect_url is not None
            and self._warm_session is None
            and (self._warming is None or not self._warming.is_alive())
            and time.monotonic() >= self._warm_again_at
        )

    def _warm_in_background(self) -> None:
        """Make the next job's session while idle, in a thread: a run that comes meanwhile is not held up."""
        connect_url = self._connect_url
        assert connect_url is not None

        def warm() -> None:
            error = self.warm(connect_url)
            if error is not None:
                self._warm_again_at = time.monotonic() + WARM_RETRY_S
                log.warning("making a session ahead for the next job failed: %s", error)

        self._warming = threading.Thread(target=warm, daemon=True, name="warm-next-session")
        self._warming.start()

    def warm(self, connect_url: str) -> str | None:
        """A session's first calls paid now: the client's lazy imports, channel and Arrow paths, and
        the server's state of the session, which the next job of this process then takes over
        (its settings are set then; until then it is nobody's). A process that ran a job adds its
        code's files now, checked against their content keys (`add_code`): the next job here runs
        the same code, and its first task then skips the upload (about 20 ms on this machine).

        Neither call runs a Spark job (a local relation is collected on the driver), so a spare
        warms up even while other slots' tasks hold every executor core.
        """
        try:
            session = new_session(connect_url)
            try:
                session.range(10).selectExpr("id % 3 AS k").groupBy("k").count().schema  # noqa: B018 - analysis
                session.createDataFrame([(1, "a"), (2, "b")], "k long, v string").collect()
                # the next job here runs this process's code (`_outcome`): its files are sent now
                code = self._code or ()
                if code and not add_code(session, code):
                    code = ()
            except BaseException:
                self._stop_quietly(session)
                raise
        except Exception as exc:  # noqa: BLE001 - reported to the pool, which decides
            return f"{type(exc).__name__}: {exc}"
        self._warm_session = _SessionAhead(connect_url, time.monotonic(), session, code)
        return None

    def _start_python_workers(self) -> None:
        """Start Spark's Python workers in the session a new process made ahead, on a thread, if any
        are wanted (none in a job's environment, whose session sets its interpreter when the job takes it).

        Only a new process's (a spare's): a process that ran a job makes its next session 0.5 s after
        (`_warm_in_background`), and a job of the same code that follows as closely would meet the
        start half done; cut short, it cost such jobs more than it gained (bench/small_jobs.py --udf)."""
        if not self._python_workers or self._udf_python is not None or self._warm_session is None:
            return
        start = self._starting_workers = PythonWorkerStart(self._python_workers)
        self._warming = threading.Thread(
            target=start.run, args=(self._warm_session.session,), daemon=True, name="start-python-workers"
        )
        self._warming.start()

    def _end_warming(self) -> None:
        """Wait for the session being made ahead, its workers' start cut short: a job takes the
        session, or the process stops or moves to another server. (Left running beside a job, the
        start made the job's UDFs start workers of their own beside its: slower, not faster.)"""
        warming, starting = self._warming, self._starting_workers
        while warming is not None and warming.is_alive():
            if starting is not None:
                starting.stop()  # again each round: an interrupt sent as the UDF was being sent finds nothing
            warming.join(REINTERRUPT_S)
        self._warming = self._starting_workers = None

    def _take_warm_session(self, connect_url: str) -> _SessionAhead | None:
        self._end_warming()  # a session begun before this run came: sooner done than one begun now
        warm = self._warm_session
        if warm is None:
            return None
        # a session of a server replaced since, or one its server may have timed out, is not used
        if warm.connect_url != connect_url or time.monotonic() - warm.made > WARM_SESSION_MAX_AGE_S:
            self._release_unused_warm_session()
            return None
        self._warm_session = None
        return warm

    def _release_unused_warm_session(self) -> None:
        """Release the session made ahead; its server id is told to the pool, whose TaskExecutor ends
        the Python worker daemon Spark keeps for it (python_workers.py)."""
        warm, self._warm_session = self._warm_session, None
        if warm is None:
            return
        session = warm.session
        known = server_session_id(session)
        self._stop_quietly(session)
        if known is not None:
            self._released_unused.append(known)

    def _take_released_unused(self) -> list[str]:
        released, self._released_unused = self._released_unused, []
        return released

    def _stop_session(self) -> None:
        self._end_warming()
        if self._session is not None:
            self._stop_quietly(self._session)
            self._session = None
        self._release_unused_warm_session()

    @staticmethod
    def _stop_quietly(session: SparkSession) -> None:
        try:
            session.stop()  # releases the session and its artifacts on the server
        except Exception as exc:  # noqa: BLE001 - the server forgets the session after its timeout anyway
            log.warning("releasing a Connect session failed: %s", exc)


def _leave_it_to_the_task_executor(signum: int, _: object) -> None:
    log.info("slot process ignores %s: its TaskExecutor stops it", signal.Signals(signum).name)


def import_connect_client() -> None:
    """pyspark's Connect client (pandas, pyarrow and grpc included), as a Connect client: a spare
    or the slot-process template (slot_template.py) pays this before any task."""
    # Before any user import: pyspark decides Connect or classic by this variable, and a @udf
    # run at import time before a session exists would otherwise make a classic UDF.
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    import grpc._channel  # type: ignore[import-untyped]  # noqa: F401 - a session's first calls import it; no channel yet
    import pyspark.sql.connect.session
    import pyspark.sql.functions
    import pyspark.sql.types  # noqa: F401


def tie_to(parent_pid: int) -> None:
    """Die with `parent_pid` (the TaskExecutor, or the template that forked this process), even by
    SIGKILL, and leave SIGINT and SIGTERM sent to the TaskExecutor's process group to it."""
    die_with_parent(parent_pid)
    # Not SIG_IGN, which processes the task starts would inherit.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _leave_it_to_the_task_executor)


def serve_slot(control_fd: int, *, udf_python: str | None = None) -> int:
    """Serve the control channel `control_fd` as a slot process until told to stop; the exit code."""
    channel = ControlChannel(socket.socket(fileno=control_fd))
    return SlotProcess(channel, udf_python=udf_python).serve()


def configure_output() -> None:
    """Prints reach an attempt's log before the process dies; log lines name the process."""
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s slot-process[%(process)d] %(name)s: %(message)s"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sparkdispatch.taskexecutor.slot_process")
    parser.add_argument("--control-fd", type=int, required=True, help="this end of the control socketpair")
    parser.add_argument("--parent-pid", type=int, required=True, help="the TaskExecutor's process id")
    parser.add_argument(
        "--udf-python", default=None, help="the interpreter of the job's Python environment (this process's)"
    )
    args = parser.parse_args(argv)
    tie_to(args.parent_pid)
    configure_output()
    import_connect_client()
    return serve_slot(args.control_fd, udf_python=args.udf_python)


if __name__ == "__main__":
    sys.exit(main())
