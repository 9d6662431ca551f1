"""A TaskExecutor runs a deployment only under its current leader session and registration, and
unregisters when it stops: `MasterConnection` against a recording client, and the unregister
route of a real in-process master."""

from __future__ import annotations

import threading
import time
from typing import Any

import aiohttp
import pytest

from sparkdispatch.config import Configuration
from sparkdispatch.errors import (
    ConfigurationError,
    FencingTokenMismatch,
    ServiceUnavailable,
    SparkDispatchError,
    UnknownTaskExecutor,
)
from sparkdispatch.ha.leader import LeaderInfo
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.model.protocol import (
    ExecutionStateUpdate,
    RegistrationAck,
    SlotReport,
    TaskDeploymentDescriptor,
    TaskExecutorRegistration,
)
from sparkdispatch.taskexecutor.master_client import SESSION_HEADER, AsyncMasterClient, MasterClient
from sparkdispatch.taskexecutor.main import task_executor_pool
from sparkdispatch.taskexecutor.slot_table import SlotTable
from sparkdispatch.taskexecutor.worker import MasterConnection, TaskExecutorIdentity
from sparkdispatch.testing.master import InProcessMaster

LEADER = LeaderInfo("http://master:8081", "11111111-2222-3333-4444-555555555555")
FORMER_LEADER = LeaderInfo("http://old-master:8081", "99999999-2222-3333-4444-555555555555")
IDENTITY = TaskExecutorIdentity(
    task_executor_id="te-1", hostname="te-1@host", queue="sparkdispatch.te.te-1", spark_master="local[1]", pool="etl"
)


class RecordingClient:
    """A MasterClient that answers registrations with numbered ids and records every call."""

    def __init__(self) -> None:
        self.registrations: list[str | None] = []  # the previous registration id each one named
        self.slot_reports: list[SlotReport] = []  # of each registration
        self.pools: list[str] = []  # of each registration
        self.resume = False
        self.hold_registration: threading.Event | None = None
        self.registering = threading.Event()
        self.reports: list[tuple[str, str, ExecutionStateUpdate]] = []
        self.master_away = False  # state reports do not reach the master
        self.heartbeats: list[list[dict[str, str]]] = []  # the executions each heartbeat listed
        self.unregistered: list[tuple[str, str, str, str]] = []
        self.gave_up = False  # the ResourceManager found this TaskExecutor lost and dropped it

    def register(self, address: str, session_id: str, registration: TaskExecutorRegistration) -> RegistrationAck:
        self.registering.set()
        if self.hold_registration is not None:
            self.hold_registration.wait(10)
        previous_registration_id = registration.previous_registration_id
        self.registrations.append(previous_registration_id)
        self.slot_reports.append(registration.slot_report)
        self.pools.append(registration.pool)
        return RegistrationAck(
            "rm-1",
            300,
            2000,
            registration_id=f"reg-{len(self.registrations)}",
            resumed=self.resume and previous_registration_id is not None,
        )

    def heartbeat(self, *args: Any, executions: list[dict[str, str]], **kwargs: Any) -> None:
        if self.gave_up:
            self.gave_up = False
            raise UnknownTaskExecutor("no TaskExecutor te-1 is registered")
        self.heartbeats.append(executions)

    def report_state(self, address: str, session_id: str, update: ExecutionStateUpdate) -> None:
        if self.master_away:
            raise ServiceUnavailable(f"cannot reach the master at {address}")
        self.reports.append((address, session_id, update))

    def unregister(
        self, address: str, session_id: str, task_executor_id: str, *, registration_id: str, timeout: float
    ) -> bool:
        self.unregistered.append((address, session_id, task_executor_id, registration_id))
        return True


class Leader:
    def __init__(self) -> None:
        self.current: LeaderInfo | None = LEADER

    def __call__(self) -> LeaderInfo | None:
        return self.current


@pytest.fixture
def client() -> RecordingClient:
    return RecordingClient()


@pytest.fixture
def leader() -> Leader:
    return Leader()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def slots() -> SlotTable:
    return SlotTable(2)


@pytest.fixture
def connection(client: RecordingClient, leader: Leader, slots: SlotTable, clock: Clock) -> MasterConnection:
    config = Configuration.from_mapping({"heartbeat.interval": "300ms", "heartbeat.timeout": "2s"})
    return MasterConnection(
        config,
        identity=IDENTITY,
        slots=slots,
        client=client,  # type: ignore[arg-type]
        current_leader=leader,
        clock=clock,
    )


def deployment(registration_id: str, session_id: str = LEADER.session_id) -> TaskDeploymentDescriptor:
    return TaskDeploymentDescriptor(
        job_id="a" * 32,
        job_master_id=session_id,
        execution_id="e-1",
        vertex_id="v",
        entrypoint="m:f",
        subtask_index=0,
        parallelism=1,
        attempt=0,
        allocation_id="alloc-1",
        slot_index=0,
        result_path="/r",
        registration_id=registration_id,
    )


def test_a_deployment_runs_only_under_the_current_session_and_registration(connection: MasterConnection) -> None:
    assert (
        connection.admits(deployment("reg-1"), LEADER.session_id, wait_s=0)
        == "this TaskExecutor is not registered with a ResourceManager"
    )
    connection.tick()
    assert connection.admits(deployment("reg-1"), LEADER.session_id) is None
    stale = connection.admits(deployment("reg-1", FORMER_LEADER.session_id), FORMER_LEADER.session_id)
    assert stale is not None and f"leader session {FORMER_LEADER.session_id}" in stale
    for registration_id in ("reg-0", ""):  # sent before this process registered; from no registration
        refusal = connection.admits(deployment(registration_id), LEADER.session_id)
        assert refusal is not None and "not to the current one, reg-1" in refusal


def test_registering_again_keeps_the_old_registration_only_when_resumed(
    connection: MasterConnection, client: RecordingClient, leader: Leader
) -> None:
    connection.tick()
    leader.current = None  # ZooKeeper blip: no leader known for a while
    connection.tick()
    leader.current = LEADER
    client.resume = True  # the ResourceManager still has registration reg-1 and keeps its allocations
    connection.tick()
    assert client.registrations == [None, "reg-1"]
    assert connection.admits(deployment("reg-1"), LEADER.session_id) is None
    assert connection.admits(deployment("reg-2"), LEADER.session_id) is None

    leader.current = None
    connection.tick()
    leader.current = LEADER
    client.resume = False  # the ResourceManager had dropped it: allocations of reg-1 and reg-2 are gone
    connection.tick()
    assert client.registrations == [None, "reg-1", "reg-2"]
    assert client.pools == ["etl"] * 3  # every registration names the TaskExecutor's pool
    assert connection.admits(deployment("reg-3"), LEADER.session_id) is None
    assert connection.admits(deployment("reg-2"), LEADER.session_id) is not None
    assert connection.admits(deployment("reg-1"), LEADER.session_id) is not None


def test_a_new_leader_refuses_the_former_leaders_deployments(connection: MasterConnection, leader: Leader) -> None:
    leader.current = FORMER_LEADER
    connection.tick()
    leader.current = LEADER
    connection.tick()
    refusal = connection.admits(deployment("reg-1", FORMER_LEADER.session_id), FORMER_LEADER.session_id)
    assert refusal is not None and "registered under session " + LEADER.session_id in refusal
    assert connection.admits(deployment("reg-2"), LEADER.session_id) is None


def test_a_deployment_that_overtakes_its_registration_waits_for_it(
    connection: MasterConnection, client: RecordingClient
) -> None:
    client.hold_registration = threading.Event()
    ticking = threading.Thread(target=connection.tick)
    ticking.start()
    try:
        assert client.registering.wait(5)
        threading.Timer(0.2, client.hold_registration.set).start()
        assert connection.admits(deployment("reg-1"), LEADER.session_id, wait_s=10) is None
    finally:
        client.hold_registration.set()
        ticking.join()


def test_after_a_long_silence_a_deployment_waits_for_an_answered_heartbeat(
    connection: MasterConnection, client: RecordingClient, clock: Clock
) -> None:
    """The TaskExecutor was frozen (SIGSTOP) or cut off for longer than half the heartbeat timeout:
    the master may have given it up and its tasks to others, so a deployment it finds on waking
    runs only once a heartbeat has been answered after it, under the registration it names."""
    connection.tick()
    clock.now += 10
    refusal = connection.admits(deployment("reg-1"), LEADER.session_id, wait_s=0)
    assert refusal == (
        "this TaskExecutor had not heard from the master for over 1s and could not confirm its registration within 0s"
    )
    threading.Timer(0.2, connection.tick).start()  # the master still has it: the heartbeat is answered
    assert connection.admits(deployment("reg-1"), LEADER.session_id, wait_s=10) is None

    clock.now += 10
    client.gave_up = True  # meanwhile the master found it lost and failed its tasks over

    def tick_twice() -> None:  # the heartbeat refused; it registers anew
        connection.tick()
        connection.tick()

    threading.Timer(0.2, tick_twice).start()
    refusal = connection.admits(deployment("reg-1"), LEADER.session_id, wait_s=10)
    assert refusal is not None and "not to the current one, reg-2" in refusal
    assert client.registrations == [None, "reg-1"]


def test_a_refused_deployment_is_reported_failed_saying_why(
    connection: MasterConnection, client: RecordingClient
) -> None:
    connection.refuse(deployment("reg-0"), LEADER.session_id, "its slot was allocated to registration reg-0")
    [(address, session_id, update)] = client.reports
    assert (address, session_id, update.state, update.execution_id) == (
        LEADER.address,
        LEADER.session_id,
        ExecutionState.FAILED,
        "e-1",
    )
    assert update.failure is not None and update.failure.cls == "DeploymentRefused"
    assert (
        "TaskExecutor te-1 refused the deployment: its slot was allocated to registration reg-0"
        == update.failure.message
    )


def test_a_refusal_the_master_did_not_take_is_held_for_the_heartbeats(
    connection: MasterConnection, client: RecordingClient, slots: SlotTable, clock: Clock
) -> None:
    connection.tick()
    client.master_away = True
    slots.receive("a" * 32, "e-1", LEADER.session_id)
    connection.refuse(deployment("reg-0"), LEADER.session_id, "its slot was allocated to registration reg-0")
    assert client.reports == []
    assert slots.executions() == [{"job_id": "a" * 32, "execution_id": "e-1", "state": "FAILED"}]
    client.master_away = False
    clock.now += 0.5
    connection.tick()  # the heartbeat lists it, then the held report is delivered
    assert client.heartbeats[-1] == [{"job_id": "a" * 32, "execution_id": "e-1", "state": "FAILED"}]
    [(_, session_id, update)] = client.reports
    assert (session_id, update.state, update.failure.cls) == (  # type: ignore[union-attr]
        LEADER.session_id,
        ExecutionState.FAILED,
        "DeploymentRefused",
    )
    assert slots.held_reports() == [] and slots.executions() == []


def test_held_reports_go_with_the_heartbeats_until_taken_and_the_former_leaders_are_dropped(
    connection: MasterConnection, client: RecordingClient, slots: SlotTable, clock: Clock, leader: Leader
) -> None:
    def finished(execution_id: str, session_id: str) -> ExecutionStateUpdate:
        return ExecutionStateUpdate(
            job_id="a" * 32,
            job_master_id=session_id,
            execution_id=execution_id,
            state=ExecutionState.FINISHED,
            rows=7,
            result_path="/r",
        )

    connection.tick()
    slots.hold_report(LEADER.session_id, finished("e-1", LEADER.session_id))
    client.master_away = True
    clock.now += 0.5
    connection.tick()  # the heartbeat goes through, the report still does not
    assert client.heartbeats[-1] == [{"job_id": "a" * 32, "execution_id": "e-1", "state": "FINISHED"}]
    assert len(slots.held_reports()) == 1
    client.master_away = False
    clock.now += 0.5
    connection.tick()
    assert [(u.execution_id, u.rows) for _, _, u in client.reports] == [("e-1", 7)]
    assert slots.held_reports() == []

    slots.hold_report(FORMER_LEADER.session_id, finished("e-2", FORMER_LEADER.session_id))
    clock.now += 0.5
    connection.tick()
    assert client.heartbeats[-1] == []  # not the current leader's execution
    assert slots.held_reports() == [] and len(client.reports) == 1  # its JobMaster is gone: dropped


def test_registering_with_a_new_leader_reports_the_former_leaders_slots_free(
    connection: MasterConnection, client: RecordingClient, slots: SlotTable, leader: Leader
) -> None:
    leader.current = FORMER_LEADER
    connection.tick()
    assert connection.registered_session == FORMER_LEADER.session_id
    running = slots.occupy(deployment("reg-1", FORMER_LEADER.session_id), FORMER_LEADER.session_id)
    assert running is not None
    leader.current = None  # a ZooKeeper blip: the same leader comes back and the task keeps its slot
    connection.tick()
    assert connection.registered_session is None
    leader.current = FORMER_LEADER
    connection.tick()
    assert client.slot_reports[-1].slots[0].allocation_id == "alloc-1"
    leader.current = LEADER  # the former leader died: a new one, under a new session
    connection.tick()
    assert connection.registered_session == LEADER.session_id
    assert [s.allocation_id for s in client.slot_reports[-1].slots] == [None, None]


def test_stopping_unregisters_once_and_registers_no_more(connection: MasterConnection, client: RecordingClient) -> None:
    connection.tick()
    connection.unregister()
    connection.unregister()
    assert client.unregistered == [(LEADER.address, LEADER.session_id, "te-1", "reg-1")]
    connection.tick()
    assert client.registrations == [None]
    assert connection.admits(deployment("reg-1"), LEADER.session_id) is not None


# -- the route ----------------------------------------------------------------------------------


async def test_the_unregister_route_removes_the_named_registration_only() -> None:
    async with InProcessMaster() as master, aiohttp.ClientSession() as http:
        te = AsyncMasterClient()
        try:
            registration = TaskExecutorRegistration(
                task_executor_id="te-1",
                hostname="te-1@h",
                queue="sparkdispatch.te.te-1",
                slots=2,
                slot_report=SlotReport.free(2),
                spark_master="local[1]",
            )
            ack = await te.register(master.url, master.session_id, registration)
            with pytest.raises(FencingTokenMismatch):
                await te.unregister(master.url, FORMER_LEADER.session_id, "te-1", registration_id=ack.registration_id)
            assert not await te.unregister(master.url, master.session_id, "te-1", registration_id="another")
            async with http.post(
                f"{master.url}/v1/taskexecutors/te-1/unregister", json={}, headers={SESSION_HEADER: master.session_id}
            ) as response:
                assert response.status == 400 and "registration_id" in (await response.json())["errors"][0]
            async with http.get(f"{master.url}/taskmanagers") as response:
                assert [e["id"] for e in (await response.json())["taskmanagers"]] == ["te-1"]

            assert await te.unregister(master.url, master.session_id, "te-1", registration_id=ack.registration_id)
            async with http.get(f"{master.url}/taskmanagers") as response:
                assert (await response.json())["taskmanagers"] == []
        finally:
            await te.close()


def test_unregistering_from_a_master_that_does_not_answer_gives_up_in_time() -> None:
    started = time.monotonic()
    with MasterClient(Configuration.from_mapping({})) as client, pytest.raises(SparkDispatchError):
        # a blackholed address: nothing answers, nothing refuses
        client.unregister("http://10.255.255.1:9", LEADER.session_id, "te-1", registration_id="reg-1", timeout=0.2)
    assert time.monotonic() - started < 3


def test_an_admitted_attempt_may_start_until_a_heartbeat_timeout_less_an_interval_after_the_last_answer(
    connection: MasterConnection, clock: Clock
) -> None:
    assert connection.start_deadline() is None  # never answered: registration fences
    connection.tick()  # registered: the master answered now
    assert connection.start_deadline() == pytest.approx(clock.now + 2.0 - 0.3)


def test_an_attempt_admitted_before_the_master_gave_this_task_executor_up_may_not_start_after_it(
    connection: MasterConnection, client: RecordingClient, clock: Clock
) -> None:
    """A TaskExecutor frozen past the heartbeat timeout (SIGSTOP) with an attempt admitted but not
    started: the master ran that attempt elsewhere, maybe to the job's end. Once it is thawed and
    registered afresh, its heartbeats are answered again, but the attempt's registration is not its
    own any more: no fresh start deadline for it (the chaos run found such an attempt start after
    its job's JobResult)."""
    connection.tick()  # registered as reg-1
    assert connection.start_deadline("reg-1") == pytest.approx(clock.now + 2.0 - 0.3)
    clock.now += 10
    client.gave_up = True
    connection.tick()  # the heartbeat is refused
    connection.tick()  # registered anew, as reg-2: heartbeats are answered from now
    assert client.registrations == [None, "reg-1"]  # it asked to go on as reg-1; the master had dropped it
    assert connection.start_deadline("reg-2") == pytest.approx(clock.now + 2.0 - 0.3)
    assert connection.start_deadline("reg-1") == 0.0  # long past: the function must not start


@pytest.mark.parametrize(("pool", "valid"), [("etl", True), ("team-a.gpu_1", True), ("../x", False), ("", False)])
def test_a_task_executor_takes_its_pool_from_the_configuration(pool: str, valid: bool) -> None:
    config = Configuration.from_mapping({"taskexecutor.pool": pool})
    if valid:
        assert task_executor_pool(config) == pool
    else:
        with pytest.raises(ConfigurationError, match="taskexecutor.pool"):
            task_executor_pool(config)


class RestartedMasterClient(RecordingClient):
    """A master of HA mode `none` that restarted: it refuses heartbeats under `refused` (its former session)."""

    refused = "session-of-the-former-run"

    def heartbeat(self, *args: Any, executions: list[dict[str, str]], **kwargs: Any) -> None:
        if args[1] == self.refused:
            raise FencingTokenMismatch("master")
        super().heartbeat(*args, executions=executions, **kwargs)


class AskedSession:
    """`AskedLeaderSession` as MasterConnection sees it: the master tells its new session once asked again."""

    def __init__(self) -> None:
        self.known = LeaderInfo(LEADER.address, RestartedMasterClient.refused)
        self.forgotten = 0

    def current(self) -> LeaderInfo:
        return self.known

    def forget(self) -> None:
        self.forgotten += 1
        self.known = LeaderInfo(LEADER.address, "session-of-the-new-run")


def test_a_session_the_master_refuses_is_asked_for_again_and_the_taskexecutor_registers_under_the_new_one(
    slots: SlotTable, clock: Clock
) -> None:
    client, asked = RestartedMasterClient(), AskedSession()
    connection = MasterConnection(
        Configuration.from_mapping({"heartbeat.interval": "300ms", "heartbeat.timeout": "2s"}),
        identity=IDENTITY,
        slots=slots,
        client=client,  # type: ignore[arg-type]
        current_leader=asked.current,
        session_refused=asked.forget,
        clock=clock,
    )
    connection.tick()
    assert connection.registered_session == RestartedMasterClient.refused
    clock.now += 1.0
    connection.tick()  # the heartbeat is refused: the session is forgotten with the registration
    registered: str | None = connection.registered_session
    assert (asked.forgotten, registered) == (1, None)
    connection.tick()
    assert connection.registered_session == "session-of-the-new-run" and len(client.registrations) == 2
