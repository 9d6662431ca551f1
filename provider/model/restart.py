"""Restart strategies, with Flink's parameters and names, and their JSON form in a JobGraph
(`restart_strategy`, chosen by `type`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeAlias

from marshmallow import Schema, ValidationError, fields, post_load, validate

from sparkdispatch.model.schema import StrictSchema, json_type


@dataclass(frozen=True)
class NoRestart:
    type: ClassVar[str] = "none"


@dataclass(frozen=True)
class FixedDelayRestart:
    """Restart up to `attempts` times, `delay_s` apart (`restart-strategy.fixed-delay.*`)."""

    type: ClassVar[str] = "fixed-delay"
    attempts: int = 3
    delay_s: float = 1.0


@dataclass(frozen=True)
class ExponentialDelayRestart:
    """Pauses grow by `backoff_multiplier` up to `max_backoff_s` (`restart-strategy.exponential-delay.*`)."""

    type: ClassVar[str] = "exponential-delay"
    initial_backoff_s: float = 1.0
    max_backoff_s: float = 300.0
    backoff_multiplier: float = 2.0
    reset_backoff_threshold_s: float = 3600.0
    jitter_factor: float = 0.1
    attempts: int = 10


@dataclass(frozen=True)
class FailureRateRestart:
    """Restart unless more than `max_failures_per_interval` failures fall in one interval."""

    type: ClassVar[str] = "failure-rate"
    max_failures_per_interval: int = 1
    failure_rate_interval_s: float = 60.0
    delay_s: float = 1.0


RestartStrategy: TypeAlias = NoRestart | FixedDelayRestart | ExponentialDelayRestart | FailureRateRestart


def _positive(name: str) -> validate.Range:
    return validate.Range(min=0, error=f"{name} must be >= 0")


class _Number(fields.Float):
    """A JSON number (an integer is one too); a string holding a number is refused as the wrong type."""

    def _validated(self, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.make_error("invalid")
        return super()._validated(value)


class _FixedDelaySchema(StrictSchema):
    type = fields.String(required=True)
    attempts = fields.Integer(load_default=3, strict=True, validate=_positive("attempts"))
    delay_s = _Number(load_default=1.0, validate=_positive("delay_s"))

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> FixedDelayRestart:
        data.pop("type")
        return FixedDelayRestart(**data)


class _ExponentialDelaySchema(StrictSchema):
    type = fields.String(required=True)
    initial_backoff_s = _Number(load_default=1.0, validate=_positive("initial_backoff_s"))
    max_backoff_s = _Number(load_default=300.0, validate=_positive("max_backoff_s"))
    backoff_multiplier = _Number(load_default=2.0, validate=validate.Range(min=1.0))
    reset_backoff_threshold_s = _Number(load_default=3600.0, validate=_positive("reset_backoff_threshold_s"))
    jitter_factor = _Number(load_default=0.1, validate=validate.Range(min=0.0, max=1.0))
    attempts = fields.Integer(load_default=10, strict=True, validate=_positive("attempts"))

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> ExponentialDelayRestart:
        data.pop("type")
        return ExponentialDelayRestart(**data)


class _FailureRateSchema(StrictSchema):
    type = fields.String(required=True)
    max_failures_per_interval = fields.Integer(load_default=1, strict=True, validate=validate.Range(min=1))
    failure_rate_interval_s = _Number(load_default=60.0, validate=validate.Range(min=0.001))
    delay_s = _Number(load_default=1.0, validate=_positive("delay_s"))

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> FailureRateRestart:
        data.pop("type")
        return FailureRateRestart(**data)


class _NoRestartSchema(StrictSchema):
    type = fields.String(required=True)

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> NoRestart:
        return NoRestart()


RESTART_SCHEMAS: dict[str, type[Schema]] = {
    "none": _NoRestartSchema,
    "fixed-delay": _FixedDelaySchema,
    "exponential-delay": _ExponentialDelaySchema,
    "failure-rate": _FailureRateSchema,
}
_RESTART_SCHEMA_INSTANCES: dict[str, Schema] = {kind: schema() for kind, schema in RESTART_SCHEMAS.items()}


class RestartStrategyField(fields.Field[RestartStrategy]):
    """A restart strategy, its schema chosen by `type`."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> RestartStrategy:
        if not isinstance(value, Mapping):
            raise ValidationError("must be an object with a type")
        kind = value.get("type")
        if not isinstance(kind, str) or kind not in RESTART_SCHEMAS:
            got = repr(kind) if isinstance(kind, str) or kind is None else f"a JSON {json_type(kind)}"
            raise ValidationError({"type": [f"must be one of {', '.join(RESTART_SCHEMAS)}, got {got}"]})
        strategy: RestartStrategy = _RESTART_SCHEMA_INSTANCES[kind].load(value)
        return strategy

    def _serialize(
        self, value: RestartStrategy | None, attr: str | None, obj: Any, **kwargs: Any
    ) -> dict[str, Any] | None:
        if value is None:
            return None
        body: dict[str, Any] = {"type": value.type}
        for name in value.__dataclass_fields__:
            body[name] = getattr(value, name)
        return body
