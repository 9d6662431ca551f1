"""Log lines that name their job, vertex, subtask and attempt, in text or JSON (`log.format`).

The master and the TaskExecutors set what a piece of work is about once, where the work starts
(`log_context(job_id=..., vertex=...)`, context variables: asyncio tasks created inside inherit
them, threads do not), and every log record made meanwhile carries it: `ContextFilter` adds the
fields to each record, the text format appends them as `[job=... vertex=...]`, the JSON format
(one object per line, for log shippers) has them as keys.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import sys
from collections.abc import Iterator
from datetime import datetime, UTC

#: The fields, in the order the text format shows them.
FIELDS = ("job_id", "vertex", "subtask", "attempt")
FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_VARS: dict[str, contextvars.ContextVar[str | int | None]] = {
    name: contextvars.ContextVar(f"sparkdispatch_log_{name}", default=None) for name in FIELDS
}


@contextlib.contextmanager
def log_context(
    *, job_id: str | None = None, vertex: str | None = None, subtask: int | None = None, attempt: int | None = None
) -> Iterator[None]:
    """Records made inside name these (the ones given; the others keep their outer values)."""
    given = {"job_id": job_id, "vertex": vertex, "subtask": subtask, "attempt": attempt}
    tokens = [(_VARS[name], _VARS[name].set(value)) for name, value in given.items() if value is not None]
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def current() -> dict[str, str | int]:
    """The fields set here, by name."""
    return {name: value for name, var in _VARS.items() if (value := var.get()) is not None}


class ContextFilter(logging.Filter):
    """Puts the current fields on each record (`record.job_id`, ...; None when unset)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, var in _VARS.items():
            if not hasattr(record, name):
                setattr(record, name, var.get())
        return True


class TextFormatter(logging.Formatter):
    """`TEXT_FORMAT`, with ` [job=... vertex=... subtask=... attempt=...]` when a field is set."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        fields = _fields(record)
        if not fields:
            return text
        suffix = " [" + " ".join(f"{'job' if k == 'job_id' else k}={v}" for k, v in fields.items()) + "]"
        head, newline, tail = text.partition("\n")  # after the message, before a traceback
        return head + suffix + newline + tail


class JsonFormatter(logging.Formatter):
    """One JSON object per line: `time` (UTC ISO 8601), `level`, `logger`, `message`, the fields
    that are set, `process`, `thread`, and `exception` with the traceback."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **_fields(record),
            "process": record.process,
            "thread": record.threadName,
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def _fields(record: logging.LogRecord) -> dict[str, object]:
    return {name: value for name in FIELDS if (value := getattr(record, name, None)) is not None}


def configure_logging(level: str, log_format: str = "text") -> None:
    """The root logger of a server process: `level`, to stderr, in `log_format` (`text` or `json`).

    As `logging.basicConfig`, it leaves a root logger that has handlers already as it is (an
    embedding program's, a test runner's)."""
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    handler.addFilter(ContextFilter())
    root.addHandler(handler)
    root.setLevel(level.upper())
