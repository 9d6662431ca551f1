"""An attempt's failure as a task author should read it, and what a Spark Connect error says.

Spark's own words are kept, with a plain sentence first where they do not help: a task that
reached for the RDD API (which a Connect session has not), or whose Connect server went away
(instead of gRPC's channel dump). `session_gone` tells a slot process that its job's session is
gone on the server, so the job's next task makes a new one.
"""

from __future__ import annotations

from sparkdispatch.model.job_result import Failure

RDD_UNAVAILABLE = (
    "ctx.spark is a Spark Connect session: the RDD API (spark.sparkContext, DataFrame.rdd, "
    "_jsc, _jvm) is not available to task functions; use the DataFrame API"
)
SERVER_UNREACHABLE = (
    "the TaskExecutor's Spark Connect server stopped answering during the task (it died or "
    "is restarting; the TaskExecutor restarts it, see its connect-server.log)"
)
#: Spark's error conditions of a task reaching for the JVM-side API of a session.
_JVM_ONLY_CONDITIONS = frozenset({"JVM_ATTRIBUTE_NOT_SUPPORTED"})
#: Spark's conditions that say the session is gone on the server (it restarted, or timed out).
_SESSION_GONE_CONDITIONS = frozenset(
    {
        "NO_ACTIVE_SESSION",
        "INVALID_HANDLE.SESSION_NOT_FOUND",
        "INVALID_HANDLE.SESSION_CLOSED",
        "INVALID_HANDLE.SESSION_CHANGED",
    }
)


def failure_of(exc: BaseException) -> Failure:
    """The attempt's failure, said plainly where Spark's own words do not help.

    A task that reached for the RDD API is told it does not exist here; one whose server went
    away is told so instead of getting gRPC's channel dump.
    """
    failure = Failure.from_exception(exc)
    chain = _chain(exc)
    if any(_condition(e) in _JVM_ONLY_CONDITIONS or _is_rdd_not_implemented(e) for e in chain):
        return Failure(
            cls=failure.cls, message=f"{RDD_UNAVAILABLE}. Spark said: {failure.message}", traceback=failure.traceback
        )
    if any(_server_unreachable(e) for e in chain):
        return Failure(cls=failure.cls, message=SERVER_UNREACHABLE, traceback=failure.traceback)
    return failure


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _condition(exc: BaseException) -> str | None:
    get_condition = getattr(exc, "getCondition", None)
    if not callable(get_condition):
        return None
    try:
        condition = get_condition()
    except Exception:  # noqa: BLE001 - an exception that cannot say its condition has none
        return None
    return condition if isinstance(condition, str) else None


def _server_unreachable(exc: BaseException) -> bool:
    # gRPC's UNAVAILABLE: the channel found nobody listening (pyspark keeps the code as
    # `grpc_status_code` on its own exception; grpc's RpcError says it through `code()`)
    status = getattr(exc, "grpc_status_code", None)
    if status is not None:
        return getattr(status, "name", None) == "UNAVAILABLE"
    code = getattr(exc, "code", None)
    if callable(code):
        try:
            return getattr(code(), "name", None) == "UNAVAILABLE"
        except Exception:  # noqa: BLE001 - an error that cannot say its code is not this one
            return False
    return False


def _is_rdd_not_implemented(exc: BaseException) -> bool:
    return _condition(exc) == "NOT_IMPLEMENTED" and "rdd" in str(exc)


def session_gone(exc: BaseException) -> bool:
    """Whether `exc` (or an error it came from) says the Connect session is gone on the server."""
    return any(_condition(e) in _SESSION_GONE_CONDITIONS for e in _chain(exc))
