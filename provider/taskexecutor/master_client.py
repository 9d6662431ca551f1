"""The TaskExecutor's HTTP calls to the leading master (docs/internals.md, TaskExecutor protocol).

`AsyncMasterClient` is the aiohttp core; `MasterClient` runs it on a private event loop for
the worker's registration thread and its task threads, which are not async. Every call carries
the leader session id it is made under; a refusal is raised as the sparkdispatch error the
master answered with (`error_from_body`): `FencingTokenMismatch` or `StaleExecution` for a
stale call, `UnknownTaskExecutor` for a heartbeat the ResourceManager does not know, ...
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp

from sparkdispatch.config import Configuration
from sparkdispatch.errors import ERROR_HEADER, CorruptedBlob, ServiceUnavailable, SparkDispatchError, error_from_body
from sparkdispatch.ha.leader import LeaderInfo
from sparkdispatch.client.loop_thread import LoopThread
from sparkdispatch.model.protocol import (
    ARTIFACT_NAME_HEADER,
    ExecutionStateUpdate,
    RegistrationAck,
    SlotReport,
    TaskExecutorRegistration,
)
from sparkdispatch.model.rest_shapes import HeartbeatAnswer, LeaderSession, Unregistered
from sparkdispatch.tls import ClientTls, handshake_failure, refusal_hint

log = logging.getLogger(__name__)

SESSION_HEADER = "X-SparkDispatch-Session"
# an artifact may be up to blob.max-size (100 MB by default): bound the silences, not the whole
ARTIFACT_TIMEOUT = aiohttp.ClientTimeout(total=None, connect=5.0, sock_read=30.0)


class AsyncMasterClient:
    """Calls from one TaskExecutor to a master, by the master's REST base URL (async core)."""

    def __init__(self, *, token: str = "", timeout: float = 5.0, tls: ClientTls | None = None) -> None:
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._tls = tls or ClientTls()
        self._ssl = self._tls.context()
        self._session: aiohttp.ClientSession | None = None
        self._in_flight: dict[asyncio.Task[Any], str] = {}  # call -> the leader session it is made under
        self._abandoned: set[asyncio.Task[Any]] = set()

    def abandon_calls_not_under(self, session_id: str) -> None:
        """Another master leads now, under `session_id`: calls in flight under an older session end at
        once with `ServiceUnavailable`, not after the timeout (a master cut off answers nothing, and
        its successor is waiting for the heartbeats and reports). On the client's loop."""
        for call, made_under in self._in_flight.items():
            if made_under != session_id and not call.done():
                self._abandoned.add(call)
                call.cancel()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def register(self, address: str, session_id: str, registration: TaskExecutorRegistration) -> RegistrationAck:
        answer = await self._post(address, "/taskexecutors", session_id, registration.to_dict())
        return RegistrationAck.from_dict(answer)

    async def unregister(self, address: str, session_id: str, task_executor_id: str, *, registration_id: str) -> bool:
        """Leave the cluster now; False if the ResourceManager did not have this registration."""
        answer = await self._post(
            address, f"/taskexecutors/{task_executor_id}/unregister", session_id, {"registration_id": registration_id}
        )
        return Unregistered.from_dict(answer).unregistered

    async def heartbeat(
        self,
        address: str,
        session_id: str,
        task_executor_id: str,
        *,
        slot_report: SlotReport,
        executions: list[dict[str, str]],
        kept_jobs: list[str] | None = None,
    ) -> HeartbeatAnswer:
        """Which of `kept_jobs` ended; `UnknownTaskExecutor` means: register again."""
        answer = await self._post(
            address,
            f"/taskexecutors/{task_executor_id}/heartbeat",
            session_id,
            {"slot_report": slot_report.to_dict(), "executions": executions, "kept_jobs": kept_jobs or []},
        )
        return HeartbeatAnswer.from_dict(answer)

    async def report_state(self, address: str, session_id: str, update: ExecutionStateUpdate) -> None:
        """`FencingTokenMismatch` (a `StaleExecution` too) or `UnknownJob` mean: the report is stale."""
        await self._post(
            address, f"/jobs/{update.job_id}/executions/{update.execution_id}/state", session_id, update.to_dict()
        )

    async def fetch_artifact(self, address: str, key: str, directory: Path) -> Path:
        """Download the artifact `key` from the master at `address` into `directory`, under its file
        name; `CorruptedBlob` if the bytes do not hash to the key (nothing is left behind then)."""
        url = f"{address.rstrip('/')}/artifacts/{key}"
        directory.mkdir(parents=True, exist_ok=True)
        partial = directory / f".fetching-{uuid.uuid4().hex}"
        digest = hashlib.sha256()
        try:
            async with self._http().get(url, timeout=ARTIFACT_TIMEOUT) as response:
                if response.status >= 400:
                    raise error_from_body(
                        response.status, await response.text(), header=response.headers.get(ERROR_HEADER)
                    )
                name = response.headers.get(ARTIFACT_NAME_HEADER, "")
                if not name or name.startswith(".") or "/" in name or "\\" in name:
                    raise SparkDispatchError(
                        f"the master at {address} named artifact {key} {name!r}, which is not a plain file name"
                    )
                with open(partial, "wb") as out:
                    async for chunk in response.content.iter_chunked(1 << 16):
                        digest.update(chunk)
                        out.write(chunk)
        except (aiohttp.ClientError, TimeoutError) as exc:
            partial.unlink(missing_ok=True)
            if (tls_error := handshake_failure(address, exc)) is not None:
                raise tls_error from None
            raise ServiceUnavailable(
                f"cannot fetch artifact {key} from the master at {address}: {str(exc) or type(exc).__name__}"
            ) from None
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        if digest.hexdigest() != key:
            partial.unlink(missing_ok=True)
            raise CorruptedBlob(
                f"artifact {key} fetched from {address} hashes to {digest.hexdigest()}: "
                "it was damaged on the way or in the master's store; upload it again"
            )
        target = directory / name
        partial.replace(target)
        return target

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # aiohttp reads no proxy or netrc settings unless asked (trust_env): none per state report
            self._session = aiohttp.ClientSession(
                timeout=self._timeout, headers=self._headers, connector=aiohttp.TCPConnector(ssl=self._ssl)
            )
        return self._session

    async def leader_session(self, address: str) -> str:
        """The session the master at `address` leads under (`GET /taskexecutors/leader-session`)."""
        return LeaderSession.from_dict(await self._call("GET", address, "/taskexecutors/leader-session")).session_id

    async def _post(self, address: str, path: str, session_id: str, body: dict[str, Any]) -> Any:
        return await self._call("POST", address, path, session_id, body)

    async def _call(
        self, method: str, address: str, path: str, session_id: str = "", body: dict[str, Any] | None = None
    ) -> Any:
        call = asyncio.current_task()
        assert call is not None
        self._in_flight[call] = session_id
        try:
            async with self._http().request(
                method,
                address.rstrip("/") + path,
                json=body,
                headers={SESSION_HEADER: session_id} if session_id else {},
            ) as response:
                text = await response.text()
                status = response.status
                error_header = response.headers.get(ERROR_HEADER)
        except asyncio.CancelledError:
            if call not in self._abandoned:
                raise
            call.uncancel()
            raise ServiceUnavailable(
                f"the master at {address} no longer leads (session {session_id}); the call was abandoned"
            ) from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            if (tls_error := handshake_failure(address, exc)) is not None:
                raise tls_error from None
            raise ServiceUnavailable(
                f"cannot reach the master at {address}: {str(exc) or type(exc).__name__}"
                f"{refusal_hint(address, exc, self._tls)}"
            ) from None
        finally:
            self._in_flight.pop(call, None)
            self._abandoned.discard(call)
        if status >= 400:
            raise error_from_body(status, text, header=error_header)
        try:
            return json.loads(text) if text else {}
        except ValueError:
            raise SparkDispatchError(
                f"{method} {path} at {address} answered {status} with a body that is not JSON: {text.strip()[:200]!r}"
            ) from None


class MasterClient:
    """`AsyncMasterClient` for synchronous callers: its calls may come from any thread."""

    def __init__(self, config: Configuration, *, timeout: float = 5.0) -> None:
        self.async_client = AsyncMasterClient(
            token=config.task_executor_credential, timeout=timeout, tls=ClientTls.from_config(config)
        )
        self._loop = LoopThread("sparkdispatch-master-client")

    def __enter__(self) -> MasterClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._loop.closed:
            return
        try:
            self._loop.run(self.async_client.close())
        finally:
            self._loop.close()

    def leader_changed(self, leader: LeaderInfo | None) -> None:
        """A `LeaderListener`: once another master leads, calls to the former leader are abandoned
        (`AsyncMasterClient.abandon_calls_not_under`). No leader known changes nothing: this
        TaskExecutor's own ZooKeeper connection may be what is suspended."""
        if leader is not None and not self._loop.closed:
            self._loop.loop.call_soon_threadsafe(self.async_client.abandon_calls_not_under, leader.session_id)

    def register(self, address: str, session_id: str, registration: TaskExecutorRegistration) -> RegistrationAck:
        return self._loop.run(self.async_client.register(address, session_id, registration))

    def unregister(
        self, address: str, session_id: str, task_executor_id: str, *, registration_id: str, timeout: float
    ) -> bool:
        """`AsyncMasterClient.unregister`, given up after `timeout` seconds (`ServiceUnavailable`)."""

        async def call() -> bool:
            try:
                async with asyncio.timeout(timeout):
                    return await self.async_client.unregister(
                        address, session_id, task_executor_id, registration_id=registration_id
                    )
            except TimeoutError:
                raise ServiceUnavailable(f"the master at {address} did not answer within {timeout:g}s") from None

        return self._loop.run(call())

    def heartbeat(
        self,
        address: str,
        session_id: str,
        task_executor_id: str,
        *,
        slot_report: SlotReport,
        executions: list[dict[str, str]],
        kept_jobs: list[str] | None = None,
    ) -> HeartbeatAnswer:
        return self._loop.run(
            self.async_client.heartbeat(
                address,
                session_id,
                task_executor_id,
                slot_report=slot_report,
                executions=executions,
                kept_jobs=kept_jobs,
            )
        )

    def leader_session(self, address: str) -> str:
        return self._loop.run(self.async_client.leader_session(address))

    def report_state(self, address: str, session_id: str, update: ExecutionStateUpdate) -> None:
        self._loop.run(self.async_client.report_state(address, session_id, update))

    def fetch_artifact(self, address: str, key: str, directory: Path) -> Path:
        return self._loop.run(self.async_client.fetch_artifact(address, key, directory))
