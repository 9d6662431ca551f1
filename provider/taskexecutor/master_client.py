"""The TaskExecutor's HTTP calls to the leading master (docs/internals.md, TaskExecutor protocol).

Synchronous (`requests`): they run on the worker's registration thread and on the task
threads. Every call carries the leader session id it is made under; refusals come back as
the sparkdispatch error the master raised (`FencingTokenMismatch` for 409,
`UnknownTaskExecutor` for 404 on a heartbeat, ...).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import requests

from sparkdispatch import errors
from sparkdispatch.config import Configuration
from sparkdispatch.jobgraph import ExecutionStateUpdate, SlotReport

log = logging.getLogger(__name__)

SESSION_HEADER = "X-SparkDispatch-Session"

_ERROR_BY_STATUS: dict[int, type[errors.SparkDispatchError]] = {
    400: errors.SparkDispatchError,
    401: errors.Unauthorized,
    409: errors.FencingTokenMismatch,
    413: errors.RequestTooLarge,
    503: errors.ServiceUnavailable,
}


@dataclass(frozen=True)
class RegistrationAck:
    """The ResourceManager's answer to a registration."""

    resource_manager_id: str
    heartbeat_interval_s: float
    heartbeat_timeout_s: float


class MasterClient:
    """Calls from one TaskExecutor to a master, by the master's REST base URL."""

    def __init__(self, config: Configuration, *, timeout: float = 5.0) -> None:
        self._session = requests.Session()
        # no proxy, netrc or CA-bundle lookups from the environment on every state report
        self._session.trust_env = False
        token = config["rest.auth.token"]
        if token:
            self._session.headers["Authorization"] = f"Bearer {token}"
        self._timeout = timeout

    def close(self) -> None:
        self._session.close()

    def register(self, address: str, session_id: str, *, task_executor_id: str, hostname: str, queue: str,
                 slots: int, slot_report: SlotReport, spark_master: str) -> RegistrationAck:
        body = {"task_executor_id": task_executor_id, "hostname": hostname, "queue": queue, "slots": slots,
                "slot_report": slot_report.to_dict(), "spark_master": spark_master}
        answer = self._post(address, "/v1/taskexecutors", session_id, body)
        return RegistrationAck(resource_manager_id=str(answer.get("resource_manager_id", "")),
                               heartbeat_interval_s=float(answer.get("heartbeat_interval_ms", 0)) / 1000.0,
                               heartbeat_timeout_s=float(answer.get("heartbeat_timeout_ms", 0)) / 1000.0)

    def heartbeat(self, address: str, session_id: str, task_executor_id: str, *, slot_report: SlotReport,
                  executions: list[dict[str, str]]) -> None:
        """`UnknownTaskExecutor` means: register again."""
        self._post(address, f"/v1/taskexecutors/{task_executor_id}/heartbeat", session_id,
                   {"slot_report": slot_report.to_dict(), "executions": executions},
                   not_found=errors.UnknownTaskExecutor)

    def report_state(self, address: str, session_id: str, update: ExecutionStateUpdate) -> None:
        """`FencingTokenMismatch` (409) means: the report is stale, cancel the task."""
        self._post(address, f"/v1/jobs/{update.job_id}/executions/{update.execution_id}/state", session_id,
                   update.to_dict(), not_found=errors.UnknownJob)

    def _post(self, address: str, path: str, session_id: str, body: dict[str, Any], *,
              not_found: type[errors.SparkDispatchError] = errors.SparkDispatchError) -> dict[str, Any]:
        url = address.rstrip("/") + path
        try:
            response = self._session.post(url, json=body, headers={SESSION_HEADER: session_id},
                                          timeout=self._timeout)
        except requests.RequestException as exc:
            raise errors.ServiceUnavailable(f"cannot reach the master at {address}: {exc}") from None
        if response.ok:
            try:
                answer = response.json()
            except ValueError:
                return {}
            return answer if isinstance(answer, dict) else {}
        messages = _error_messages(response)
        cls = not_found if response.status_code == 404 else _ERROR_BY_STATUS.get(response.status_code,
                                                                                  errors.SparkDispatchError)
        raise _remote_error(cls, f"POST {path} refused by {address} ({response.status_code}): {messages[0]}",
                            messages[1:])


def _error_messages(response: requests.Response) -> list[str]:
    try:
        listed = response.json().get("errors")
    except (ValueError, AttributeError):
        listed = None
    if isinstance(listed, list) and listed:
        return [str(m) for m in listed]
    return [response.text.strip()[:500] or response.reason or "no reason given"]


def _remote_error(cls: type[errors.SparkDispatchError], message: str,
                  details: list[str]) -> errors.SparkDispatchError:
    # Rebuild the master's error class around the master's own message; some classes'
    # constructors take structured arguments the answer does not carry.
    exc = cls.__new__(cls)
    errors.SparkDispatchError.__init__(exc, message, details=details)
    if isinstance(exc, errors.FencingTokenMismatch):
        exc.expected = exc.received = None
    if isinstance(exc, errors.ServiceUnavailable):
        exc.leader = None
    return exc
