"""The REST client of the master: one async core, used by the CLI and the Airflow hook.

`SparkDispatchClient` finds the leader — from a list of REST addresses (any master answers
`/overview` and names the leader) or through ZooKeeper leader retrieval — and follows it when
it changes: a standby's `503` with the leader's address, a redirect, or a lost connection make
the client look again. Connection errors, `429` and `5xx` answers are retried with exponential
backoff, a bounded number of times. An error answer is raised as the class its body names
(`sparkdispatch.errors.error_from_body`), with the master's own messages and fields.

Answers come back as the shapes the master fills (`sparkdispatch.model.rest_shapes`): each is
parsed here, once, and an answer that does not fit its shape is `InvalidShape` naming the field.

`SyncSparkDispatchClient` (sync_client.py) runs the same core on a private event loop in a
background thread, for callers that are not async (Airflow operators, the CLI).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aiohttp

from sparkdispatch.model.artifacts import read_artifact
from sparkdispatch.client.leader import ZooKeeperLeader, ZooKeeperTarget, normalize_address, parse_addresses
from sparkdispatch.config import Configuration
from sparkdispatch.config.options import HA_CLUSTER_ID, HA_MODE, HA_ZOOKEEPER_PATH_ROOT, HA_ZOOKEEPER_QUORUM
from sparkdispatch.errors import (
    ERROR_HEADER,
    ConfigurationError,
    InvalidShape,
    NoLeader,
    ServiceUnavailable,
    SparkDispatchError,
    error_from_body,
)
from sparkdispatch.model.codec import Shape
from sparkdispatch.model.job_result import JobResult
from sparkdispatch.model.rest_shapes import (
    Artifact,
    AttemptLog,
    ExecutionResult,
    JobDetails,
    JobList,
    JobProgress,
    JobSummary,
    Overview,
    Submitted,
    TaskManager,
    TaskManagerList,
    VertexOutcome,
)
from sparkdispatch.model.states import JobStatus
from sparkdispatch.model.repair import RepairAnswer
from sparkdispatch.tls import ClientTls, handshake_failure, refusal_hint

log = logging.getLogger(__name__)

T = TypeVar("T")
S = TypeVar("S", bound=Shape)
E = TypeVar("E")  # an entry of a paged list

_REDIRECTS = {301, 302, 303, 307, 308}
_MAX_HOPS = 5


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a call is retried on connection errors, 429 and 5xx.

    `attempts` counts tries in all (1 = no retry); pauses grow from `initial_backoff` by
    `multiplier` up to `max_backoff`. `failover_timeout` bounds how long `wait_for_result`
    keeps waiting for a master to come back (a leader change takes a ZooKeeper session timeout).
    """

    attempts: int = 8
    initial_backoff: float = 0.25
    max_backoff: float = 5.0
    multiplier: float = 2.0
    failover_timeout: float = 120.0

    def backoff(self, attempt: int) -> float:
        """The pause after the `attempt`-th failed try (1-based)."""
        return min(self.max_backoff, self.initial_backoff * self.multiplier ** (attempt - 1))


@dataclass(frozen=True)
class SubmittedJob:
    """The master's answer to a submission: the job's id, whether this call created it, its status.

    `created` is False when the master already had this job with the same graph; `status` is
    then the job's current one, which may be globally terminal (a retry after a lost answer).
    """

    job_id: str
    created: bool
    status: JobStatus


# --------------------------------------------------------------------------------------------
# The async client


class SparkDispatchClient:
    """Async client of the master's REST API; finds and follows the leader.

    Give `addresses` (REST base URLs of any masters) or `zookeeper` (then `ha_config` may carry
    the other `high-availability.*` keys). `tls` says how HTTPS masters are verified (the system's
    trust store when None). Use it as an async context manager, or call `close()`.
    """

    def __init__(
        self,
        *,
        addresses: Sequence[str] = (),
        zookeeper: ZooKeeperTarget | None = None,
        token: str | None = None,
        retry: RetryPolicy | None = None,
        request_timeout: float = 30.0,
        ha_config: Configuration | None = None,
        tls: ClientTls | None = None,
    ) -> None:
        if not addresses and zookeeper is None:
            raise ConfigurationError("name the master: give REST addresses or a ZooKeeper quorum")
        self.addresses = parse_addresses(addresses) if addresses else []
        self.token = token or None
        self.tls = tls or ClientTls()
        self._ssl = self.tls.context()  # a missing or bad CA file is an error here, not at the first call
        self.retry = retry or RetryPolicy()
        self.request_timeout = request_timeout
        # `ha_config` carries the other high-availability.* keys (session timeout, auth) to retrieval.
        self._zookeeper = ZooKeeperLeader(zookeeper, ha_config) if zookeeper is not None else None
        self._leader: str | None = None
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def from_config(cls, config: Configuration, **kwargs: Any) -> SparkDispatchClient:
        """A client of the cluster `config` describes: `rest.address:rest.port`, or ZooKeeper in HA mode."""
        token = kwargs.pop("token", None) or config.auth_token or None
        if config.get(HA_MODE) == "zookeeper":
            target = ZooKeeperTarget(
                quorum=config.get(HA_ZOOKEEPER_QUORUM),
                cluster_id=config.get(HA_CLUSTER_ID),
                root=config.get(HA_ZOOKEEPER_PATH_ROOT),
            )
            return cls(zookeeper=target, token=token, ha_config=config, tls=ClientTls.from_config(config), **kwargs)
        return cls(addresses=[config.rest_url], token=token, tls=ClientTls.from_config(config), **kwargs)

    async def __aenter__(self) -> SparkDispatchClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the HTTP session and stop leader retrieval."""
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._zookeeper is not None:
            await self._zookeeper.close()

    @property
    def leader_address(self) -> str | None:
        """The leader's REST base URL as last found, or None before the first call."""
        return self._leader

    def describe_target(self) -> str:
        """Where this client looks for masters, for messages."""
        if self._zookeeper is not None:
            return self._zookeeper.describe()
        return ", ".join(self.addresses)

    # -- the API ---------------------------------------------------------------------------

    async def leader(self) -> str:
        """The current leader's REST base URL, found now if not known."""
        return await self._call(_const)

    async def overview(self) -> Overview:
        """The leader's `/overview`: TaskExecutors, slots, job counts."""
        return await self._get(Overview, "/overview")

    async def taskmanagers(self) -> list[TaskManager]:
        """The TaskExecutors registered with the leader, with their slots (every page)."""

        async def page(after: str | None) -> tuple[Sequence[TaskManager], str | None]:
            answer = await self.taskmanagers_page(after=after)
            return answer.taskmanagers, answer.next

        return await _every_page(page)

    async def taskmanagers_page(self, *, limit: int | None = None, after: str | None = None) -> TaskManagerList:
        """One page of `GET /taskmanagers`, by id: at most `limit` entries after the cursor `after`."""
        return await self._get(TaskManagerList, "/taskmanagers", params=_page_params(limit, after))

    async def jobs(self) -> list[JobSummary]:
        """Running and finished jobs, the most recently started first (every page): id, name, status,
        start/end time, duration."""

        async def page(after: str | None) -> tuple[Sequence[JobSummary], str | None]:
            answer = await self.jobs_page(after=after)
            return answer.jobs, answer.next

        return await _every_page(page)

    async def jobs_page(self, *, limit: int | None = None, after: str | None = None) -> JobList:
        """One page of `GET /jobs`: at most `limit` jobs after the cursor `after` (a page's `next`)."""
        return await self._get(JobList, "/jobs", params=_page_params(limit, after))

    async def job(self, job_id: str) -> JobDetails:
        """A job's details with its vertices and subtasks; `UnknownJob` if there is none."""
        return await self._get(JobDetails, f"/jobs/{job_id}")

    async def vertex(self, job_id: str, vertex_id: str) -> VertexOutcome:
        """`GET /jobs/{job_id}/vertices/{vertex_id}`: the job's status and the vertex's outcome so far."""
        return await self._get(VertexOutcome, f"/jobs/{job_id}/vertices/{vertex_id}")

    async def job_progress(self, job_id: str) -> JobProgress:
        """`GET /jobs/{job_id}/progress`: the job's status, every vertex's outcome so far and the size
        of each subtask's latest attempt log, in one answer."""
        return await self._get(JobProgress, f"/jobs/{job_id}/progress")

    async def vertex_log(
        self, job_id: str, vertex_id: str, *, subtask: int = 0, attempt: int | None = None, offset: int = 0
    ) -> AttemptLog:
        """A piece of one attempt's log (its latest attempt when `attempt` is None) from byte `offset`;
        `RouteNotFound` while it has none."""
        query = f"subtask={subtask}&offset={offset}" + (f"&attempt={attempt}" if attempt is not None else "")
        return await self._get(AttemptLog, f"/jobs/{job_id}/vertices/{vertex_id}/log?{query}")

    async def submit(self, graph: Mapping[str, Any]) -> SubmittedJob:
        """Submit a JobGraph (a dict) → the job's id, whether it is new, and its status.

        A graph without `job_id` gets a random one first, so that retrying the call after a
        lost answer cannot submit the job twice.
        """
        body = dict(graph)
        if not body.get("job_id"):
            body["job_id"] = uuid.uuid4().hex
        http_status, answer = await self._request("POST", "/jobs", json=body)
        try:
            submitted = Submitted.from_dict(answer)
        except InvalidShape as exc:
            if "status" in exc.field_errors:
                raise SparkDispatchError(
                    f"POST /jobs answered {http_status} without a job status: {answer!r:.200}"
                ) from None
            raise
        return SubmittedJob(submitted.job_id, http_status == 202, submitted.status)

    async def execution_result(self, job_id: str) -> JobResult | None:
        """The JobResult once the job is globally terminal, None while it runs."""
        return (await self._get(ExecutionResult, f"/jobs/{job_id}/execution-result")).result

    async def wait_for_result(
        self, job_id: str, *, poll_interval: float = 2.0, on_poll: Callable[[], Awaitable[None]] | None = None
    ) -> JobResult:
        """Wait until the job is globally terminal and return its JobResult.

        A master failover does not end the wait: while no master answers, it keeps looking
        for the new leader for up to `retry.failover_timeout` seconds (`patiently`). `on_poll`
        is awaited after every poll, the last one included (a caller streams the job's logs with it).
        """
        while True:
            result = await self.patiently(lambda: self.execution_result(job_id), f"job {job_id}")
            if on_poll is not None:
                await on_poll()
            if result is not None:
                return result
            await asyncio.sleep(poll_interval)

    async def patiently(self, call: Callable[[], Awaitable[T]], what: str) -> T:
        """`call()`, asked again while no master answers (`master_away`: a failover, an overload),
        for up to `retry.failover_timeout` seconds; other errors, and the last, are raised."""
        unavailable_since: float | None = None
        while True:
            try:
                return await call()
            except SparkDispatchError as exc:
                if not master_away(exc):
                    raise
                now = time.monotonic()
                unavailable_since = unavailable_since or now
                if now - unavailable_since > self.retry.failover_timeout:
                    raise
                log.warning("%s: no master answers (%s); waiting for a leader", what, exc)

    async def cancel(self, job_id: str) -> None:
        """Ask the master to cancel the job; `JobAlreadyTerminated` if it ended already."""
        await self._request("PATCH", f"/jobs/{job_id}", params={"mode": "cancel"})

    async def repair(self, job_id: str, vertices: Sequence[str]) -> RepairAnswer:
        """Run `vertices` of an ended job again, with their consumers, reusing the other results;
        `RepairNotPossible` (its `running` set while the job has not ended)."""
        _, answer = await self._request("POST", f"/jobs/{job_id}/repair", json={"vertices": list(vertices)})
        return RepairAnswer.from_dict(answer)

    async def upload_artifact(self, path: str | os.PathLike[str]) -> str:
        """Upload a `.py` or `.zip` file, or a package directory (zipped) → its blob key."""
        filename, data = read_artifact(path)

        def form() -> aiohttp.FormData:
            data_form = aiohttp.FormData()
            data_form.add_field("file", data, filename=filename, content_type="application/octet-stream")
            return data_form

        _, answer = await self._request("POST", "/artifacts", data=form)
        return Artifact.from_dict(answer).key

    def job_url(self, job_id: str, *, base: str | None = None) -> str:
        """The web UI page of a job at the leader (or `base`)."""
        base = base or self._leader or (self.addresses[0] if self.addresses else "")
        return f"{base}/ui/jobs/{job_id}"

    # -- plumbing --------------------------------------------------------------------------

    async def _get(self, shape: type[S], path: str, *, params: Mapping[str, str] | None = None) -> S:
        """`GET path` at the leader, its answer parsed as `shape`."""
        _, answer = await self._request("GET", path, params=params)
        return shape.from_dict(answer)

    async def _request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        data: Callable[[], aiohttp.FormData] | None = None,
        params: Mapping[str, str] | None = None,
    ) -> tuple[int, Any]:
        """One REST call at the leader, with leader-following and retries → (status, JSON body)."""

        async def call(base: str) -> tuple[int, Any]:
            session = self._http()
            async with session.request(
                method,
                base + path,
                json=json,
                params=params,
                data=data() if data is not None else None,
                headers=self._headers(),
                allow_redirects=False,
            ) as response:
                if response.status in _REDIRECTS and response.headers.get("Location"):
                    raise _LeaderMoved(_origin(response.headers["Location"], base))
                text = await response.text()
                if response.status < 400:
                    return response.status, _decoded(text)
                error = error_from_body(response.status, text, header=response.headers.get(ERROR_HEADER))
                if _worth_retrying(error):
                    raise _Retryable(error, retry_after=_seconds(response.headers.get("Retry-After")))
                raise error

        return await self._call(call)

    async def _call(self, call: Callable[[str], Coroutine[Any, Any, T]]) -> T:
        """Run `call(leader base URL)`, following the leader and retrying what is worth it."""
        attempt = 0
        hops = 0
        while True:
            base = self._leader
            pause: float | None = None
            try:
                base = base or await self._discover()
                self._leader = base
                return await call(base)
            except _LeaderMoved as moved:
                hops += 1
                if hops > _MAX_HOPS:
                    raise ServiceUnavailable(
                        f"masters keep sending us elsewhere (last to {moved.address}); "
                        "leadership is changing, try again"
                    ) from None
                log.info("the leader moved from %s to %s", base, moved.address)
                self._leader = moved.address
                continue
            except _Retryable as exc:
                error: SparkDispatchError = exc.error
                hint = exc.leader_hint if exc.leader_hint != base else None
                self._leader = hint
                if hint is not None and hops < _MAX_HOPS:
                    hops += 1  # a standby named the leader: go there at once
                    log.info("%s is not the leader; following it to %s", base, hint)
                    continue
                pause = exc.retry_after
            except (aiohttp.ClientError, TimeoutError) as exc:
                if (tls_error := handshake_failure(base or self.describe_target(), exc)) is not None:
                    raise tls_error from None
                where = base or self.describe_target()
                error = ServiceUnavailable(
                    f"no sparkdispatch master answers at {where}: {_describe(exc)}{refusal_hint(where, exc, self.tls)}"
                )
                self._leader = None
            except (ServiceUnavailable, NoLeader) as exc:  # from discovery
                error = exc
                self._leader = None
            attempt += 1
            if attempt >= self.retry.attempts:
                raise error
            delay = pause if pause is not None else self.retry.backoff(attempt)
            log.debug("retrying in %.2fs after: %s", delay, error)
            await asyncio.sleep(delay)

    async def _discover(self) -> str:
        """Find the leader: ask ZooKeeper, or ask each address's `/overview`."""
        if self._zookeeper is not None:
            return await self._zookeeper.leader(timeout=min(self.request_timeout, 10.0))
        problems: list[str] = []
        standbys: list[str] = []
        for address in self.addresses:
            try:
                async with self._http().get(
                    address + "/overview", headers=self._headers(), allow_redirects=False
                ) as response:
                    text = await response.text()
                    if response.status >= 400:
                        error = error_from_body(response.status, text, header=response.headers.get(ERROR_HEADER))
                        if response.status in (401, 403):
                            raise error
                        problems.append(f"{address}: HTTP {response.status} {'; '.join(error.messages())}")
                        continue
                    body = _decoded(text)
            except (aiohttp.ClientError, TimeoutError) as exc:
                if (tls_error := handshake_failure(address, exc)) is not None:
                    raise tls_error from None
                problems.append(f"{address}: {_describe(exc)}{refusal_hint(address, exc, self.tls)}")
                continue
            try:
                overview = Overview.from_dict(body)
            except InvalidShape as exc:
                problems.append(f"{address}: {exc}")
                continue
            if overview.is_leader:
                return address
            if overview.leader:
                return normalize_address(overview.leader)
            standbys.append(address)
        if standbys and not problems:
            raise NoLeader(
                f"no master leads at the moment ({', '.join(standbys)} answered as standbys that know no leader)"
            )
        raise ServiceUnavailable(
            "no sparkdispatch master answers: "
            + "; ".join(problems + [f"{s}: standby without a leader" for s in standbys])
        )

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            timeout = aiohttp.ClientTimeout(total=self.request_timeout, connect=min(5.0, self.request_timeout))
            self._session = aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(ssl=self._ssl))
        return self._session

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}


async def _const(value: T) -> T:
    return value


class _LeaderMoved(Exception):
    def __init__(self, address: str) -> None:
        super().__init__(address)
        self.address = address


class _Retryable(Exception):
    """An answer worth another try: 429, 5xx, an unavailable master (maybe naming the leader)."""

    def __init__(self, error: SparkDispatchError, *, retry_after: float | None = None) -> None:
        super().__init__(str(error))
        self.error = error
        leader = error.leader if isinstance(error, ServiceUnavailable) else None
        self.leader_hint = normalize_address(leader) if leader else None
        self.retry_after = retry_after


def _worth_retrying(error: SparkDispatchError) -> bool:
    return isinstance(error, (ServiceUnavailable, NoLeader)) or error.http_status == 429 or error.http_status >= 500


def master_away(error: SparkDispatchError) -> bool:
    """No master serves now (failover, overload): a waiting caller keeps waiting."""
    return isinstance(error, (ServiceUnavailable, NoLeader)) or error.http_status in (429, 503)


def _decoded(text: str) -> Any:
    """A success answer's JSON body ({} when empty)."""
    if not text:
        return {}
    try:
        return json.loads(text)
    except ValueError:
        raise SparkDispatchError(f"the master answered with a body that is not JSON: {text.strip()[:200]!r}") from None


def _seconds(retry_after: str | None) -> float | None:
    try:
        return min(float(retry_after), 60.0) if retry_after else None
    except ValueError:
        return None


def _origin(location: str, base: str) -> str:
    parts = urlsplit(location)
    if not parts.scheme:  # a relative redirect stays on this master
        return base
    return normalize_address(f"{parts.scheme}://{parts.netloc}")


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    return str(exc) or type(exc).__name__


async def _every_page(page: Callable[[str | None], Awaitable[tuple[Sequence[E], str | None]]]) -> list[E]:
    """The entries of every page of a list, following each page's `next` cursor."""
    entries: list[E] = []
    after: str | None = None
    while True:
        found, after = await page(after)
        entries += found
        if after is None:
            return entries


def _page_params(limit: int | None, after: str | None) -> dict[str, str]:
    params = {"limit": str(limit)} if limit is not None else {}
    return params | ({"after": after} if after is not None else {})
