"""Broker connections: lost ones are retried within a second, and a consumer's unanswered BRPOP is given up."""

from __future__ import annotations

import socket

import pytest
from celery import Celery
from kombu.exceptions import OperationalError

from sparkdispatch.broker.celery_app import (
    APP_NAME,
    RECONNECT_MAX_INTERVAL_S,
    REDIS_HEALTH_CHECK_S,
    BoundedConnection,
    configure_celery_app,
)
from sparkdispatch.config import Configuration


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_lost_broker_is_tried_again_within_a_second() -> None:
    # kombu's own pauses grow 2, 4, 6 ... up to 30 s: a worker would come back long after its broker
    pauses: list[float] = []
    connection = BoundedConnection(f"redis://127.0.0.1:{_closed_port()}/0", connect_timeout=1)
    try:
        with pytest.raises(OperationalError):
            connection.ensure_connection(lambda exc, interval: pauses.append(interval), 4)
    finally:
        connection.release()
    assert len(pauses) == 4 and max(pauses) <= RECONNECT_MAX_INTERVAL_S, pauses


def test_both_sides_connect_with_the_bounded_connection_and_health_checks() -> None:
    config = Configuration.from_mapping({"broker.url": "redis://127.0.0.1:6379/0"})
    app = Celery(APP_NAME, set_as_current=False)
    configure_celery_app(app, config)
    connection = app.connection_for_read()
    try:
        assert isinstance(connection, BoundedConnection)
        assert connection.transport_options is not None
        assert connection.transport_options["health_check_interval"] == REDIS_HEALTH_CHECK_S
    finally:
        connection.release()
