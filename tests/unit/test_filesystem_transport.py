"""The standalone broker: a message becomes visible to consumers only once it is whole."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from queue import Empty
from typing import Any

import pytest
from celery import Celery
from kombu import Consumer, Producer, Queue

from sparkdispatch.broker import filesystem_transport
from sparkdispatch.broker.celery_app import APP_NAME, configure_celery_app
from sparkdispatch.config import Configuration
from sparkdispatch.taskexecutor.app import create_celery_app


def test_a_message_being_written_is_invisible_then_whole(tmp_path: Path, monkeypatch: Any) -> None:
    config = Configuration.from_mapping({"broker.url": "filesystem://", "storage.dir": str(tmp_path)})
    app = create_celery_app(config)
    body = {"payload": "x" * 50_000, "id": 7}
    seen_mid_write: list[Any] = []
    renamed: list[str] = []
    with app.connection() as producer, app.connection() as consumer:
        consumer_channel, producer_channel = consumer.default_channel, producer.default_channel
        assert isinstance(consumer_channel, filesystem_transport.Channel)
        assert isinstance(producer_channel, filesystem_transport.Channel)
        real_replace = os.replace

        def replace_after_a_look(src: str, dst: str) -> None:
            # the file is fully written but not yet renamed: a consumer must not see it
            assert Path(src).stat().st_size > 50_000
            with pytest.raises(Empty):
                seen_mid_write.append(consumer_channel._get("jobs"))
            renamed.append(dst)
            real_replace(src, dst)

        monkeypatch.setattr(os, "replace", replace_after_a_look)
        producer_channel._put("jobs", body)
        assert seen_mid_write == [] and len(renamed) == 1
        assert consumer_channel._get("jobs") == body
        with pytest.raises(Empty):
            consumer_channel._get("jobs")


def test_the_master_and_workers_use_the_atomic_transport(tmp_path: Path) -> None:
    config = Configuration.from_mapping({"broker.url": "filesystem://", "storage.dir": str(tmp_path)})
    master_app = Celery(APP_NAME, set_as_current=False)  # as the master's CeleryTaskExecutorGateway builds it
    configure_celery_app(master_app, config)
    for app in (master_app, create_celery_app(config)):
        with app.connection() as connection:
            assert isinstance(connection.default_channel, filesystem_transport.Channel)


def test_an_expected_message_wakes_a_slowly_polling_consumer(tmp_path: Path) -> None:
    # polled every 60 s, a message would not arrive within the drain's 20 s: expect_message wakes it
    config = Configuration.from_mapping(
        {"broker.url": "filesystem://", "storage.dir": str(tmp_path), "broker.polling-interval": "60s"}
    )
    app = create_celery_app(config)
    received: list[Any] = []
    with app.connection() as producer, app.connection() as consumer:
        queue = Queue("jobs", routing_key="jobs")
        with Consumer(
            consumer.default_channel,
            queues=[queue],
            accept=["json"],
            callbacks=[lambda body, message: received.append(body)],
        ):

            def send() -> None:
                time.sleep(0.3)  # the consumer is asleep in its slow poll by now
                Producer(producer.default_channel).publish({"n": 1}, routing_key="jobs", declare=[queue])
                filesystem_transport.expect_message()

            sender = threading.Thread(target=send)
            sender.start()
            consumer.drain_events(timeout=20)
            sender.join()
    assert received == [{"n": 1}]
