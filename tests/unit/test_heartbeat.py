"""HeartbeatMonitor: timeouts, unreachable targets and bookkeeping, on a fake clock."""

from __future__ import annotations

from typing import Any

import pytest

from sparkdispatch.config import Configuration
from sparkdispatch.resourcemanager.heartbeat import HeartbeatMonitor
from sparkdispatch.resourcemanager.settings import HeartbeatSettings
from sparkdispatch.testing.clock import ManualClock


class RecordingListener:
    def __init__(self) -> None:
        self.timeouts: list[str] = []
        self.unreachable: list[str] = []

    def notify_heartbeat_timeout(self, target_id: str) -> None:
        self.timeouts.append(target_id)

    def notify_target_unreachable(self, target_id: str) -> None:
        self.unreachable.append(target_id)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def listener() -> RecordingListener:
    return RecordingListener()


def make_monitor(listener: RecordingListener, clock: ManualClock, *, threshold: int = 2) -> HeartbeatMonitor[object]:
    return HeartbeatMonitor(listener, timeout=10.0, rpc_failure_threshold=threshold, clock=clock)


def test_a_heartbeat_restarts_the_timeout(listener: RecordingListener, clock: ManualClock) -> None:
    monitor = make_monitor(listener, clock)
    monitor.monitor("te-1")
    clock.advance(8)
    assert monitor.report("te-1", {"n": 1})
    clock.advance(8)
    assert monitor.check_timeouts() == []
    clock.advance(2.5)
    assert monitor.check_timeouts() == ["te-1"]
    assert listener.timeouts == ["te-1"]
    assert monitor.last_heartbeat("te-1") is None  # no longer watched
    assert monitor.check_timeouts() == []
    assert listener.timeouts == ["te-1"]


def test_only_silent_targets_time_out(listener: RecordingListener, clock: ManualClock) -> None:
    monitor = make_monitor(listener, clock)
    for name in ("a", "b", "c", "d"):
        monitor.monitor(name)
        clock.advance(1)
    monitor.report("a")  # a is now the freshest, b the oldest
    clock.advance(7.5)
    assert monitor.check_timeouts() == ["b"]
    clock.advance(1)
    assert monitor.check_timeouts() == ["c"]
    assert listener.timeouts == ["b", "c"]
    clock.advance(60)
    assert monitor.check_timeouts() == ["d", "a"]  # the rest, oldest heartbeat first


def test_unmonitored_targets_never_time_out(listener: RecordingListener, clock: ManualClock) -> None:
    monitor = make_monitor(listener, clock)
    monitor.monitor("te-1")
    monitor.unmonitor("te-1")
    monitor.unmonitor("never-monitored")
    clock.advance(60)
    assert monitor.check_timeouts() == []
    assert listener.timeouts == []


def test_a_report_from_an_unmonitored_target_is_ignored(listener: RecordingListener, clock: ManualClock) -> None:
    monitor = make_monitor(listener, clock)
    assert not monitor.report("stranger", "payload")
    assert monitor.last_heartbeat("stranger") is None
    assert monitor.payload("stranger") is None


def test_unreachable_after_consecutive_failures(listener: RecordingListener, clock: ManualClock) -> None:
    monitor = make_monitor(listener, clock, threshold=2)
    monitor.monitor("te-1")
    monitor.record_rpc_failure("te-1")
    monitor.record_rpc_success("te-1")
    monitor.record_rpc_failure("te-1")
    assert listener.unreachable == []
    monitor.record_rpc_failure("te-1")
    assert listener.unreachable == ["te-1"]
    assert monitor.last_heartbeat("te-1") is None
    monitor.record_rpc_failure("te-1")  # no longer watched: nothing more
    assert listener.unreachable == ["te-1"]


def test_unreachable_detection_can_be_turned_off(listener: RecordingListener, clock: ManualClock) -> None:
    monitor = make_monitor(listener, clock, threshold=-1)
    monitor.monitor("te-1")
    for _ in range(50):
        monitor.record_rpc_failure("te-1")
    assert listener.unreachable == []
    assert monitor.last_heartbeat("te-1") is not None


def test_last_heartbeat_and_payload_bookkeeping(listener: RecordingListener, clock: ManualClock) -> None:
    monitor = make_monitor(listener, clock)
    monitor.monitor("te-1")
    first = monitor.last_heartbeat_ms("te-1")
    assert first is not None
    clock.advance(2.5)
    monitor.report("te-1", {"slots": 3})
    assert monitor.last_heartbeat("te-1") == clock.now
    assert monitor.last_heartbeat_ms("te-1") == first + 2500
    assert monitor.payload("te-1") == {"slots": 3}
    assert monitor.last_heartbeat_ms("unknown") is None


def test_monitoring_again_restarts_the_target(listener: RecordingListener, clock: ManualClock) -> None:
    monitor = make_monitor(listener, clock)
    monitor.monitor("te-1")
    monitor.record_rpc_failure("te-1")
    clock.advance(9)
    monitor.monitor("te-1")
    monitor.record_rpc_failure("te-1")  # the earlier failure was forgotten
    clock.advance(9)
    assert monitor.check_timeouts() == []
    assert listener.unreachable == []


def test_a_failing_listener_does_not_stop_other_timeouts(clock: ManualClock) -> None:
    class Exploding(RecordingListener):
        def notify_heartbeat_timeout(self, target_id: str) -> None:
            super().notify_heartbeat_timeout(target_id)
            raise RuntimeError("listener bug")

    listener = Exploding()
    monitor = make_monitor(listener, clock)
    monitor.monitor("a")
    monitor.monitor("b")
    clock.advance(11)
    assert monitor.check_timeouts() == ["a", "b"]
    assert listener.timeouts == ["a", "b"]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"timeout": 0},
        {"timeout": 1, "rpc_failure_threshold": 0},
        {"timeout": 1, "rpc_failure_threshold": -2},
        {"timeout": 1, "unreachable_silence": -1},
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, Any], listener: RecordingListener) -> None:
    with pytest.raises(ValueError):
        HeartbeatMonitor(listener, **kwargs)


def test_from_settings_takes_the_timeout_and_threshold(listener: RecordingListener, clock: ManualClock) -> None:
    config = Configuration.from_mapping(
        {"heartbeat.interval": "1s", "heartbeat.timeout": "3s", "heartbeat.rpc-failure-threshold": 1}
    )
    monitor: HeartbeatMonitor[None] = HeartbeatMonitor.from_settings(
        HeartbeatSettings.from_config(config), listener, clock=clock
    )
    assert monitor.timeout == 3.0
    monitor.monitor("a")
    clock.advance(2)  # silent for two heartbeat intervals
    monitor.record_rpc_failure("a")
    assert listener.unreachable == ["a"]


def test_a_target_that_heartbeats_is_never_unreachable(listener: RecordingListener, clock: ManualClock) -> None:
    """Calls that fail while the target's heartbeats arrive failed on the way, not at the target."""
    monitor: HeartbeatMonitor[None] = HeartbeatMonitor(
        listener, timeout=10.0, rpc_failure_threshold=2, unreachable_silence=4.0, clock=clock
    )
    monitor.monitor("te-1")
    monitor.monitor("te-2")
    for _ in range(20):
        monitor.record_rpc_failure("te-1")
        clock.advance(1)
        monitor.report("te-1")
        monitor.report("te-2")
        assert monitor.check_timeouts() == []
    assert listener.unreachable == []
    clock.advance(3.5)
    monitor.record_rpc_failure("te-1")
    assert monitor.check_timeouts() == [] and listener.unreachable == []
    clock.advance(0.5)  # now silent for 4s as well: the next check finds it, without a new failed call
    assert monitor.check_timeouts() == []
    assert listener.unreachable == ["te-1"]
    assert monitor.last_heartbeat("te-1") is None and monitor.last_heartbeat("te-2") is not None
    clock.advance(6)
    assert monitor.check_timeouts() == ["te-2"]  # it never failed a call: it times out
    assert listener.unreachable == ["te-1"]


def test_clear_forgets_every_target(listener: RecordingListener, clock: ManualClock) -> None:
    monitor = make_monitor(listener, clock)
    monitor.monitor("a")
    monitor.clear()
    clock.advance(100)
    assert monitor.check_timeouts() == []
    assert listener.timeouts == []
