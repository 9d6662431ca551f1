"""A job's Python environment: the packages its code needs beyond the TaskExecutor's, and its JSON form.

`{"dependencies": ["pandas==2.2.3", "tabulate>=0.9", "<key of an uploaded .whl>"]}`: each entry
is a PEP 508 requirement with a name and, if any, versions, extras and markers, or the blob key
(64 hex characters) of a wheel uploaded with `POST /artifacts`. Where packages come from is the
TaskExecutor's configuration (`python.index-url`, ...), never the job's: a requirement naming a
URL (`name @ https://...`), a path or a pip option (`--index-url ...`, `-e ...`) is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from marshmallow import ValidationError, fields, post_dump, post_load, validate
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from sparkdispatch.model.schema import StrictSchema

BLOB_KEY = re.compile(r"[0-9a-f]{64}")
MAX_DEPENDENCIES = 500
MAX_REQUIREMENT_LENGTH = 1000


@dataclass(frozen=True)
class Environment:
    """The packages a job's (or a vertex's) Python code runs with: requirements and wheel keys, as given."""

    dependencies: tuple[str, ...] = ()

    @property
    def requirements(self) -> tuple[str, ...]:
        """The PEP 508 requirements, normalised (canonical names, `str(Requirement)`), sorted, once each."""
        return tuple(sorted({normalised(entry) for entry in self.dependencies if not is_wheel_key(entry)}))

    @property
    def wheel_keys(self) -> tuple[str, ...]:
        """The blob keys of the uploaded wheels, in the order given, once each."""
        return tuple(dict.fromkeys(entry for entry in self.dependencies if is_wheel_key(entry)))


def is_wheel_key(entry: str) -> bool:
    """Whether a dependency names an uploaded wheel by its blob key."""
    return BLOB_KEY.fullmatch(entry) is not None


def normalised(requirement: str) -> str:
    """A valid requirement in one spelling: `Pandas == 2.2.3` and `pandas==2.2.3` are the same."""
    parsed = Requirement(requirement)
    parsed.name = canonicalize_name(parsed.name)
    return str(parsed)


def refusal(entry: str) -> str | None:
    """Why a dependency string is refused, or None for a PEP 508 requirement or a wheel key."""
    if is_wheel_key(entry):
        return None
    text = entry.strip()
    if not text:
        return "is empty: give a requirement such as 'pandas==2.2.3' or the key of an uploaded wheel"
    if len(text) > MAX_REQUIREMENT_LENGTH:
        return f"is longer than {MAX_REQUIREMENT_LENGTH} characters"
    if any(token.startswith("-") for token in text.split()):
        return (
            f"{entry!r} is a pip option: options are the TaskExecutor's (python.index-url, python.find-links, ...), "
            "a job gives requirements only"
        )
    if "://" in text or text.startswith(("/", ".", "~")) or text.endswith((".whl", ".tar.gz", ".zip")):
        if "@" in text and "://" in text:
            return f"{entry!r} names a URL: a job's packages come from the TaskExecutor's index; upload a wheel instead"
        return f"{entry!r} is a URL or a path, not a requirement: upload a wheel with POST /artifacts and give its key"
    try:
        parsed = Requirement(text)
    except InvalidRequirement as exc:
        first = str(exc).splitlines()[0] if str(exc) else "not PEP 508"
        return f"{entry!r} is not a PEP 508 requirement ({first})"
    if parsed.url is not None:
        return f"{entry!r} names a URL: a job's packages come from the TaskExecutor's index; upload a wheel instead"
    return None


class _Dependency(fields.String):
    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> str:
        text: str = super()._deserialize(value, attr, data, **kwargs)
        if (refused := refusal(text)) is not None:
            raise ValidationError(refused)
        return text


class EnvironmentSchema(StrictSchema):
    dependencies = fields.List(
        _Dependency(),
        required=True,
        validate=validate.Length(
            min=1, max=MAX_DEPENDENCIES, error=f"an environment names 1 to {MAX_DEPENDENCIES} dependencies"
        ),
    )

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> Environment:
        return Environment(dependencies=tuple(data["dependencies"]))

    @post_dump
    def lists(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        data["dependencies"] = list(data["dependencies"])
        return data


def environment_field() -> fields.Nested:
    """The optional `environment` field of a JobGraph, a vertex or a deployment."""
    return fields.Nested(EnvironmentSchema, allow_none=True, load_default=None)
