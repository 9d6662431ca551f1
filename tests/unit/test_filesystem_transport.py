"""The standalone broker: a message becomes visible to consumers only once it is whole."""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from queue import Empty
from typing import Any

import pytest
from celery import Celery
from kombu import Consumer, Producer, Queue

from sparkdispatch.broker import filesystem_transport, folder_watch
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


def _seconds_to_receive_one_message(tmp_path: Path, *, then: Callable[[], None] = lambda: None) -> float:
    """How long a consumer polling every 60 s takes to receive a message published 0.3 s into its
    30 s drain (`then` is called after the publish); without a wake, it sees it at the drain's end."""
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
                then()

            sender = threading.Thread(target=send)
            sender.start()
            began = time.monotonic()
            consumer.drain_events(timeout=30)
            drained_s = time.monotonic() - began
            sender.join()
    assert received == [{"n": 1}]
    return drained_s


def test_an_expected_message_wakes_a_slowly_polling_consumer(tmp_path: Path, monkeypatch: Any) -> None:
    # where the folder cannot be watched, expect_message wakes the consumer
    monkeypatch.setattr(filesystem_transport, "watch_folder", lambda folder, wake, ended: False)
    monkeypatch.setattr(filesystem_transport._pace, "watched", False)
    assert _seconds_to_receive_one_message(tmp_path, then=filesystem_transport.expect_message) < 15


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the broker folder is watched with Linux inotify")
def test_a_message_landing_in_the_folder_wakes_a_slowly_polling_consumer_unasked(tmp_path: Path) -> None:
    assert _seconds_to_receive_one_message(tmp_path) < 15  # woken when it landed, not at the drain's end


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the broker folder is watched with Linux inotify")
def test_a_watched_folder_that_is_removed_ends_its_watch(tmp_path: Path) -> None:
    folder = tmp_path / "queue"
    folder.mkdir()
    woken, ended = threading.Event(), threading.Event()
    assert folder_watch.watch_folder(str(folder), woken.set, ended=ended.set)
    (folder / "1_a.jobs.msg.part").write_text("{}")
    assert not woken.wait(0.2)  # a message being written is no message yet
    os.replace(folder / "1_a.jobs.msg.part", folder / "1_a.jobs.msg")
    assert woken.wait(10)
    assert not ended.is_set()
    shutil.rmtree(folder)
    assert ended.wait(10)
    assert str(folder.resolve()) not in folder_watch.watched_folders()
