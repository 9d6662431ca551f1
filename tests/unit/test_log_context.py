"""Log lines naming their job, vertex, subtask and attempt: the formats, and a real master's deployment line."""

from __future__ import annotations

import io
import json
import logging
import threading
from typing import Any
from collections.abc import Iterator

import aiohttp
import pytest

from sparkdispatch.log_context import ContextFilter, JsonFormatter, TextFormatter, current, log_context
from sparkdispatch.testing.master import InProcessMaster
from sparkdispatch.testing.waiting import eventually


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    """What the sparkdispatch loggers write meanwhile, in the JSON format."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(ContextFilter())
    logger = logging.getLogger("sparkdispatch")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


def record(message: str, exc_info: bool = False) -> logging.LogRecord:
    made = logging.LogRecord("sparkdispatch.test", logging.WARNING, __file__, 1, message, (), None)
    if exc_info:
        try:
            raise ValueError("bad row 7")
        except ValueError as exc:
            made.exc_info = (type(exc), exc, exc.__traceback__)
    ContextFilter().filter(made)
    return made


def test_fields_nest_and_reset_and_threads_start_without_them() -> None:
    seen: dict[str, object] = {}
    with log_context(job_id="j1"):
        with log_context(vertex="clean", subtask=1, attempt=0):
            assert current() == {"job_id": "j1", "vertex": "clean", "subtask": 1, "attempt": 0}
            thread = threading.Thread(target=lambda: seen.update(current()))
            thread.start()
            thread.join()
        assert current() == {"job_id": "j1"}
    assert current() == {} and seen == {}


def test_the_text_and_json_formats_carry_the_fields() -> None:
    with log_context(job_id="j1", vertex="clean", subtask=1, attempt=2):
        text = TextFormatter().format(record("execution e1 finished", exc_info=True))
        entry = json.loads(JsonFormatter().format(record("execution e1 failed", exc_info=True)))
    first, *trace = text.splitlines()
    assert first.endswith("WARNING sparkdispatch.test: execution e1 finished [job=j1 vertex=clean subtask=1 attempt=2]")
    assert trace[-1] == "ValueError: bad row 7"
    assert entry["message"] == "execution e1 failed" and entry["level"] == "WARNING"
    assert (entry["job_id"], entry["vertex"], entry["subtask"], entry["attempt"]) == ("j1", "clean", 1, 2)
    assert entry["exception"].endswith("ValueError: bad row 7") and entry["time"].endswith("+00:00")
    plain = json.loads(JsonFormatter().format(record("no job here")))
    assert "job_id" not in plain and TextFormatter().format(record("no job here")).endswith(": no job here")


async def test_a_real_masters_deployment_line_names_its_job_vertex_subtask_and_attempt(lines: io.StringIO) -> None:
    async with InProcessMaster() as master:
        await master.wait_for_leadership()
        await master.add_task_executor(slots=2)
        graph = {"name": "g", "vertices": [{"id": "clean", "entrypoint": "m:f", "parallelism": 2}]}
        async with aiohttp.ClientSession() as http, http.post(master.url + "/jobs", json=graph) as answer:
            job_id = (await answer.json())["job_id"]

        def logged() -> list[dict[str, Any]]:
            return [json.loads(line) for line in lines.getvalue().splitlines()]

        await eventually(lambda: sum("deploying" in e["message"] for e in logged()) == 2, "two deployment lines")
        entries = logged()
        deploying = [e for e in entries if "deploying" in e["message"]]
    assert {(e["job_id"], e["vertex"], e["subtask"], e["attempt"]) for e in deploying} == {
        (job_id, "clean", 0, 0),
        (job_id, "clean", 1, 0),
    }
    running = [e for e in entries if e["logger"].startswith("sparkdispatch.jobmaster") and "job_id" in e]
    assert running and all(e["job_id"] == job_id for e in running)


def test_configure_logging_sets_up_a_bare_root_logger_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkdispatch.log_context import configure_logging

    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "level", logging.WARNING)
    configure_logging("debug", "json")
    [handler] = root.handlers
    assert isinstance(handler.formatter, JsonFormatter) and root.level == logging.DEBUG
    assert any(isinstance(f, ContextFilter) for f in handler.filters)
    configure_logging("info", "text")  # a root with a handler is left as it is
    assert root.handlers == [handler] and root.level == logging.DEBUG
