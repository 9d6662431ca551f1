"""The slot processes of one TaskExecutor: one Python process per slot, bound to one code version.

`SlotProcessPool.run(launch, on_state)` runs an attempt in the slot's
process (slot_process.py). A slot keeps its process while it runs tasks of the same code, the
same artifact files (content-addressed, so the same bytes) in the same interpreter (the
TaskExecutor's, or a job's Python environment's: python_environments.py), whatever their job: each job gets a
Connect session of its own there. A task of other code gets a fresh process, a pre-started spare
(`taskexecutor.slot-process.spares`, pyspark's Connect client imported and a session's first
calls made), and the old one is stopped in the background. Spares are refilled in the background
after each one taken. A process in the TaskExecutor's interpreter is forked from the slot-process
template (`taskexecutor.slot-process.template`, slot_template.py), which has imported the Connect
client already, or started anew when the template cannot fork. A task in a job's Python
environment takes a spare started in that environment's interpreter, or starts a process in it;
either way a spare in that environment is started next, for its next task on another slot, and at most
`taskexecutor.slot-process.environment-spares` such spares are kept (the least recently asked
for environment's stops first).

`cancel(execution_id)` tells the process to interrupt the attempt's Spark operations; an
attempt still running `taskexecutor.cancellation.timeout` later has its process killed, ends
CANCELED, and the slot takes a spare next time. A process that dies under its attempt fails
that attempt only (`SlotProcessLost`, saying how it died); the pool replaces it. The session of a
process killed or dead under its attempt is interrupted and released on the server by the pool.

`switch_server(url)` moves the pool to a successor of its Connect server (server_recycling.py):
later attempts run there; each process releases its sessions on the old server, at once when
idle, after its attempt when busy, so `attempts_on(old_url)` falls to 0 and the old server can stop.

Every child is started by one of two long-lived threads, the spares' and the one that starts a
process a task waits for in a job's Python environment (`PR_SET_PDEATHSIG` fires when the thread that
started a process ends, not only the process), in the TaskExecutor's process group, with the
TaskExecutor's stdout and stderr; the spares' thread starts the template too, whose forked
children die with it; `close()` stops them all.
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from sparkdispatch.errors import SlotProcessLost, SparkDispatchError
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.model.job_result import Failure
from sparkdispatch.taskexecutor.settings import SlotPoolSettings
from sparkdispatch.taskexecutor.connect_server import release_session
from sparkdispatch.taskexecutor.connect_url import shown
from sparkdispatch.taskexecutor.python_workers import ReleasedSessions
from sparkdispatch.taskexecutor.slot_child import SlotChild, SlotSession, fork_slot_process, spawn_slot_process
from sparkdispatch.taskexecutor.slot_forking import SlotTemplate
from sparkdispatch.taskexecutor.slot_protocol import (
    CANCEL,
    MAY_START,
    SESSION,
    SESSION_USER,
    START_DEADLINE,
    STATE,
    STOP,
    AttemptLaunch,
    AttemptState,
    RunRequest,
)

log = logging.getLogger(__name__)

#: Logged when a spare is ready, with its pid and the seconds since it was wanted (bench/small_jobs.py reads it).
SPARE_READY = "spare slot process %d ready %.2fs after it was wanted"


@dataclass
class _Attempt:
    execution_id: str
    slot_index: int
    child: SlotChild | None = None
    connect_url: str | None = None  # the server it runs on, once sent
    cancelled: bool = False
    killed: bool = False
    kill_timer: threading.Timer | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class SlotProcessPool:
    """Per slot, the process bound to it (or none); a few warm spares; attempts run and cancelled."""

    def __init__(self, settings: SlotPoolSettings, *, connect_url: str, driver_log: str | None = None) -> None:
        self._settings = settings
        self._connect_url = connect_url
        self._driver_log = driver_log  # the Connect server's log, whose lines about an attempt go to its log
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._bound: dict[int, SlotChild] = {}
        self._spares: list[SlotChild] = []
        self._starting = 0
        #: warm spares in jobs' Python environments, one per interpreter, the most recently asked for last
        self._environment_spares: OrderedDict[str, SlotChild] = OrderedDict()
        self._environment_starting: set[str] = set()
        self._retiring: set[SlotChild] = set()
        #: processes replaced because the Connect server was restarted under them, until their
        #: attempt has said so (idle ones stay: a few objects per server restart)
        self._server_lost: set[SlotChild] = set()
        self._attempts: dict[str, _Attempt] = {}
        self._sessions_made = 0  # job sessions made on the server at `_connect_url`
        #: sessions the processes released, whose Python worker daemons may end (python_workers.py)
        self.released_sessions = ReleasedSessions()
        self._closed = False
        #: slot processes that died under an attempt or were killed (the metrics' count)
        self.processes_lost = 0
        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sparkdispatch-slot-spawner")
        #: starts the processes a task waits for in a job's Python environment, not queued behind spares
        self._starter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sparkdispatch-slot-starter")
        #: forks the processes in the TaskExecutor's interpreter, if `settings.template`
        self.template = SlotTemplate(start_timeout=settings.start_timeout) if settings.template else None

    def start(self) -> None:
        """Start the spares and warm each against the Connect server; raises `SlotProcessLost` if one fails."""
        for _ in range(self._settings.spares):
            child = self._spawner.submit(self._spawn, require_warm=True).result()
            with self._lock:
                self._spares.append(child)

    # ----------------------------------------------------------------------------------------
    # Attempts

    def run(self, launch: AttemptLaunch, on_state: Callable[[AttemptState], None]) -> AttemptState:
        """Run one attempt in the slot's process; `on_state` gets INITIALIZING and RUNNING, the end is returned.

        With `launch.python` (a job's Python environment) the process runs that interpreter: the slot's
        process if it does already, else one started now (the spares run the TaskExecutor's own)."""
        tdd, start_deadline = launch.tdd, launch.start_deadline
        attempt = _Attempt(execution_id=tdd.execution_id, slot_index=tdd.slot_index)
        with self._lock:
            if self._closed:
                return _failed(SlotProcessLost("the TaskExecutor's slot processes are stopping"))
            self._attempts[tdd.execution_id] = attempt
        try:
            try:
                child = self._child_for(tdd.slot_index, launch.artifact_paths, launch.python)
            except SparkDispatchError as exc:
                return _failed(exc)
            with attempt.lock:
                if attempt.cancelled:
                    return AttemptState(ExecutionState.CANCELED)
                attempt.child = child
                with self._lock:
                    attempt.connect_url = connect_url = self._connect_url
                    child.running = True
                try:
                    child.channel.send(
                        RunRequest(
                            tdd,
                            connect_url,
                            launch.artifact_paths,
                            self._driver_log,
                            start_deadline() if start_deadline else None,
                            log_max_size=self._settings.attempt_log_max_size,
                            kept_results_dir=self._settings.kept_results_dir,
                        ).to_message()
                    )
                except OSError:
                    return self._lost(attempt, child)
            while True:
                message = child.channel.receive()
                if message is None:
                    return self._lost(attempt, child)
                if message["type"] == SESSION:
                    child.forget_session(self.released_sessions)  # the process releases its last job's
                    self.released_sessions.add_all(message.get("released", ()))  # and ones it made ahead
                    child.session = SlotSession(
                        str(message["session_id"]), message.get("server_session_id"), connect_url
                    )
                    with self._lock:
                        if connect_url == self._connect_url:
                            self._sessions_made += 1
                    continue
                if message["type"] == MAY_START:  # its deadline passed while it set up: a fresh one, if any
                    child.channel.send(
                        {"type": START_DEADLINE, "start_before": start_deadline() if start_deadline else None}
                    )
                    continue
                if message["type"] != STATE:
                    log.warning("slot process %d sent an unexpected %r during a task", child.pid, message["type"])
                    continue
                state = AttemptState.from_message(message)
                if state.state.is_terminal:
                    return state
                try:
                    on_state(state)
                except Exception:  # the attempt runs on; its end is still returned
                    log.exception("execution %s: handling its %s state failed", tdd.execution_id, state.state.value)
        finally:
            with self._lock:
                self._attempts.pop(tdd.execution_id, None)
                if attempt.child is not None:
                    attempt.child.running = False
                    if attempt.child.releases_after_attempt:  # the process releases its session now
                        attempt.child.releases_after_attempt = False
                        attempt.child.forget_session(self.released_sessions)
            if attempt.kill_timer is not None:
                attempt.kill_timer.cancel()

    def cancel(self, execution_id: str) -> bool:
        """Interrupt an attempt; kill its process if it runs on after the cancellation timeout.

        False when the attempt does not run here.
        """
        with self._lock:
            attempt = self._attempts.get(execution_id)
        if attempt is None:
            return False
        with attempt.lock:
            if attempt.cancelled:
                return True
            attempt.cancelled = True
            child = attempt.child
            if child is not None:
                try:
                    child.channel.send({"type": CANCEL, "execution_id": execution_id})
                except OSError:
                    pass  # the process died; its run notices
                timer = threading.Timer(self._settings.cancellation_timeout, self._kill_if_running, (attempt,))
                timer.daemon = True
                timer.name = f"cancel-timeout-{execution_id}"
                attempt.kill_timer = timer
                timer.start()
        return True

    def _kill_if_running(self, attempt: _Attempt) -> None:
        with self._lock:
            running = self._attempts.get(attempt.execution_id) is attempt
        if not running or attempt.child is None:
            return
        log.warning(
            "execution %s did not stop within %gs of its cancellation; killing its slot process %d",
            attempt.execution_id,
            self._settings.cancellation_timeout,
            attempt.child.pid,
        )
        attempt.killed = True
        attempt.child.process.kill()
        self._release_session_of(attempt.child)

    def _lost(self, attempt: _Attempt, child: SlotChild) -> AttemptState:
        """The process died under the attempt (or was killed for ignoring its cancellation)."""
        how = child.ended(wait_s=5.0)
        child.channel.close()
        with self._lock:
            self.processes_lost += 1
            if self._bound.get(attempt.slot_index) is child:
                del self._bound[attempt.slot_index]
            server_lost = child in self._server_lost
            self._server_lost.discard(child)
        if not (attempt.killed or server_lost or self._closed):  # killed: released then; else gone anyway
            self._release_session_of(child)
        if attempt.killed:
            log.info(
                "execution %s: slot process %d killed (%s); slot %d takes a spare next",
                attempt.execution_id,
                child.pid,
                how,
                attempt.slot_index,
            )
            return AttemptState(ExecutionState.CANCELED)
        if attempt.cancelled:
            return AttemptState(ExecutionState.CANCELED)
        if self._closed:
            return _failed(
                SlotProcessLost(f"the TaskExecutor stopped the slot process (pid {child.pid}) during the task: {how}")
            )
        if server_lost:
            return _failed(
                SlotProcessLost(
                    "the TaskExecutor's Spark Connect server died during the task and "
                    "was restarted; the task's session was lost with it"
                )
            )
        log.warning(
            "execution %s: slot process %d of slot %d died: %s",
            attempt.execution_id,
            child.pid,
            attempt.slot_index,
            how,
        )
        return _failed(SlotProcessLost(f"the slot process (pid {child.pid}) died during the task: {how}"))

    def _release_session_of(self, child: SlotChild) -> None:
        """A process killed or dead under its attempt could not release its session: the operations
        it started would run on, and the session hold its state, until the server's session timeout."""
        session = child.session
        if session is None:
            return
        child.forget_session(self.released_sessions)
        threading.Thread(
            target=release_session,
            args=(session.connect_url, session.session_id, SESSION_USER),
            daemon=True,
            name=f"release-session-{child.pid}",
        ).start()

    def switch_server(self, connect_url: str) -> None:
        """Run later attempts on the Connect server at `connect_url`, a successor of the current one
        that still serves: every process moves there, a busy one once its attempt ended."""
        with self._lock:
            self._connect_url = connect_url
            self._sessions_made = 0
            for child in [*self._bound.values(), *self._spares, *self._environment_spares.values()]:
                child.tell_server(connect_url, self.released_sessions)
        log.info("slot processes moved to the Spark Connect server at %s", shown(connect_url))

    def attempts_on(self, connect_url: str) -> int:
        """Attempts running (or being sent) on the Connect server at `connect_url`."""
        with self._lock:
            return sum(1 for attempt in self._attempts.values() if attempt.connect_url == connect_url)

    def sessions_made(self, connect_url: str) -> int:
        """Job sessions the processes made on the server at `connect_url` since the pool moved to it
        (0 for any other server)."""
        with self._lock:
            return self._sessions_made if connect_url == self._connect_url else 0

    def reconnect(self, connect_url: str) -> None:
        """The Connect server was restarted (its sessions are gone): replace every slot process.

        Idle and spare processes stop now; a process running a task stops too, and its attempt
        fails saying the server was restarted. New spares connect to `connect_url`.
        """
        with self._changed:
            self._connect_url = connect_url
            self._sessions_made = 0
            old = [*self._bound.values(), *self._spares, *self._environment_spares.values()]
            self._bound.clear()
            self._spares.clear()
            self._environment_spares.clear()
            self._retiring.update(old)
            self._server_lost.update(old)
        for child in old:
            threading.Thread(
                target=self._retire, args=(child,), daemon=True, name=f"retire-slot-process-{child.pid}"
            ).start()
        self._refill()

    # ----------------------------------------------------------------------------------------
    # Processes

    def _child_for(self, slot_index: int, code: tuple[str, ...], python: str | None) -> SlotChild:
        """The slot's process if it runs this code in this interpreter, else a spare (or, for a job's
        Python environment, a process started in it) bound to it; the old one retires."""
        with self._lock:
            current = self._bound.get(slot_index)
            if current is not None and current.code == code and current.python == python and current.alive:
                return current
            self._bound.pop(slot_index, None)
            if current is not None:
                self._retiring.add(current)
        if current is not None and not current.alive:
            log.warning("slot process %d of slot %d died while idle: %s", current.pid, slot_index, current.ended(0.0))
        if current is not None:
            threading.Thread(
                target=self._retire, args=(current,), daemon=True, name=f"retire-slot-process-{current.pid}"
            ).start()
        child = self._take_spare() if python is None else self._take_environment_spare(python)
        child.code = code
        with self._lock:
            if not self._closed:
                child.tell_server(self._connect_url, self.released_sessions)  # started for a server replaced since?
                self._bound[slot_index] = child
                return child
        child.kill()
        raise SlotProcessLost("the TaskExecutor's slot processes are stopping")

    def _retire(self, child: SlotChild) -> None:
        child.stop(self._settings.stop_grace, self.released_sessions)
        child.forget_session(self.released_sessions)
        with self._lock:
            self._retiring.discard(child)

    def _take_spare(self) -> SlotChild:
        """A ready spare (waiting for one being started), else a process started now."""
        self._refill()
        child: SlotChild | None = None
        with self._changed:
            while True:
                for dead in [c for c in self._spares if not c.alive]:
                    self._spares.remove(dead)
                    log.warning("spare slot process %d died while idle: %s", dead.pid, dead.ended(0.0))
                if self._closed:
                    raise SlotProcessLost("the TaskExecutor's slot processes are stopping")
                if self._spares:
                    child = self._spares.pop(0)
                    break
                if self._starting == 0:
                    break  # the spares being started failed: start one for this task
                self._changed.wait()
        self._refill()
        if child is not None:
            return child
        try:
            return self._spawner.submit(self._spawn, require_warm=False).result()
        except SlotProcessLost:
            raise
        except Exception as exc:  # the spawner shut down (the pool is closing), or a bad handshake
            raise SlotProcessLost(f"could not start a slot process: {type(exc).__name__}: {exc}") from exc

    def _take_environment_spare(self, python: str) -> SlotChild:
        """A warm spare in this job's Python environment if one waits, else a process started in it
        now; either way a spare in it is started next, for the environment's next task elsewhere."""
        with self._lock:
            child = self._environment_spares.pop(python, None)
        if child is not None and not child.alive:
            log.warning("spare slot process %d in %s died while idle: %s", child.pid, python, child.ended(0.0))
            child = None
        if child is None:
            child = self._start_in(python)
        self._refill_environment(python)
        return child

    def _refill_environment(self, python: str) -> None:
        with self._lock:
            if (
                self._closed
                or self._settings.environment_spares == 0
                or python in self._environment_spares
                or python in self._environment_starting
            ):
                return
            self._environment_starting.add(python)
        self._spawner.submit(self._start_environment_spare, python)

    def _start_environment_spare(self, python: str) -> None:
        """Start a spare in a job's environment; beyond `environment_spares` of them, the one whose
        environment was asked for least recently stops."""
        child: SlotChild | None = None
        try:
            child = self._spawn(require_warm=False, python=python)
        except Exception:  # the environment's next task starts a process itself
            log.warning("could not start a spare slot process in %s", python, exc_info=True)
        surplus: list[SlotChild] = []
        with self._lock:
            self._environment_starting.discard(python)
            if child is not None and not self._closed:
                child.tell_server(self._connect_url, self.released_sessions)  # started for a server replaced since?
                self._environment_spares[python] = child
                child = None
                while len(self._environment_spares) > self._settings.environment_spares:
                    surplus.append(self._environment_spares.popitem(last=False)[1])
                self._retiring.update(surplus)
        if child is not None:
            child.kill()
        for old in surplus:
            threading.Thread(
                target=self._retire, args=(old,), daemon=True, name=f"retire-slot-process-{old.pid}"
            ).start()

    def _start_in(self, python: str) -> SlotChild:
        """A slot process started now in a job's Python environment (no spare runs its interpreter)."""
        try:
            return self._starter.submit(self._spawn, require_warm=False, python=python).result()
        except SlotProcessLost:
            raise
        except Exception as exc:  # the spawner shut down (the pool is closing), or a bad handshake
            raise SlotProcessLost(f"could not start a slot process in {python}: {type(exc).__name__}: {exc}") from exc

    def _refill(self) -> None:
        with self._lock:
            missing = self._settings.spares - len(self._spares) - self._starting
            if self._closed or missing <= 0:
                return
            self._starting += missing
        for _ in range(missing):
            self._spawner.submit(self._start_spare, time.monotonic())

    def _start_spare(self, wanted: float) -> None:
        child: SlotChild | None = None
        try:
            child = self._spawn(require_warm=False)
        except Exception:  # a task that finds no spare starts a process itself
            log.warning("could not start a spare slot process", exc_info=True)
        with self._changed:
            self._starting -= 1
            if child is not None and not self._closed:
                child.tell_server(self._connect_url, self.released_sessions)  # started for a server replaced since?
                self._spares.append(child)
                log.info(SPARE_READY, child.pid, time.monotonic() - wanted)
                child = None
            self._changed.notify_all()
        if child is not None:
            child.kill()

    def _spawn(self, *, require_warm: bool, python: str | None = None) -> SlotChild:
        if python is None and self.template is not None:
            try:
                return fork_slot_process(
                    self._settings, self.template, lambda: self._connect_url, require_warm=require_warm
                )
            except SlotProcessLost as exc:
                if self._closed:
                    raise
                log.warning("could not fork a slot process from the template, starting one anew: %s", exc)
        return spawn_slot_process(self._settings, lambda: self._connect_url, require_warm=require_warm, python=python)

    # ----------------------------------------------------------------------------------------
    # Stopping

    def close(self) -> None:
        """Stop every slot process: bound, spare, retiring or starting. Running attempts end with them."""
        with self._changed:
            self._closed = True
            children = [*self._bound.values(), *self._spares, *self._environment_spares.values()]
            self._bound.clear()
            self._spares.clear()
            self._environment_spares.clear()
            attempts = list(self._attempts.values())
            self._changed.notify_all()
        for attempt in attempts:
            if attempt.kill_timer is not None:
                attempt.kill_timer.cancel()
        for child in children:
            try:
                child.channel.send({"type": STOP})
            except OSError:
                pass
        deadline = time.monotonic() + self._settings.stop_grace
        for child in children:
            try:
                child.process.wait(max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                log.warning("slot process %d did not stop within %gs; killing it", child.pid, self._settings.stop_grace)
            child.kill()
        with self._lock:
            retiring = list(self._retiring)
        for child in retiring:
            child.kill()
        if self.template is not None:
            self.template.close()
        # Last: the children's PR_SET_PDEATHSIG fires when this thread ends. A process being
        # started now is killed by its spawn, which finds the pool closed.
        self._starter.shutdown(wait=True, cancel_futures=True)
        self._spawner.shutdown(wait=True, cancel_futures=True)


def _failed(exc: SparkDispatchError) -> AttemptState:
    return AttemptState(ExecutionState.FAILED, failure=Failure.from_exception(exc))
