"""Raw JSON HTTP calls to a master for tests and benchmarks that check status codes themselves.

Callers that want the API (leader following, retries, errors raised as their classes) use
`sparkdispatch.client.rest_client`; these helpers give back the answer as it came, `(status, body)`, on the
same aiohttp stack. A connection that fails or breaks raises `ConnectionError` (an `OSError`),
a timeout `TimeoutError`.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import aiohttp

from sparkdispatch.client.loop_thread import LoopThread
from sparkdispatch.model.rest_shapes import Artifact


async def request_json(
    method: str, url: str, body: Any = None, *, token: str = "", timeout: float = 30.0
) -> tuple[int, Any]:
    """One HTTP call with a JSON body (bytes are sent as they are) → (status, decoded JSON answer or its text)."""
    data = json.dumps(body).encode() if body is not None and not isinstance(body, bytes) else body
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return await _call(method, url, data, headers, timeout)


def http_json(method: str, url: str, body: Any = None, *, token: str = "", timeout: float = 30.0) -> tuple[int, Any]:
    """`request_json` for synchronous callers, also from inside a running event loop (an async test)."""
    return _loop().run(request_json(method, url, body, token=token, timeout=timeout))


@functools.cache
def _loop() -> LoopThread:
    # one private loop for every synchronous call of the process: it lives as long as the process
    return LoopThread("sparkdispatch-test-http")


async def upload_file(url: str, path: Path, *, token: str = "", timeout: float = 30.0) -> tuple[int, Any]:
    """POST `path` as the multipart field `file` (as `POST /artifacts` takes it) → (status, JSON answer)."""
    form = aiohttp.FormData()
    form.add_field("file", path.read_bytes(), filename=path.name, content_type="application/octet-stream")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return await _call("POST", url, form, headers, timeout)


async def _call(
    method: str, url: str, data: bytes | aiohttp.FormData | None, headers: dict[str, str], timeout: float
) -> tuple[int, Any]:
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            async with session.request(method, url, data=data, headers=headers) as answer:
                raw = await answer.read()
                status = answer.status
    except TimeoutError:
        raise
    except aiohttp.ClientError as exc:
        raise ConnectionError(f"{method} {url}: {str(exc) or type(exc).__name__}") from exc
    if not raw:
        return status, None
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


def upload_artifact(base_url: str, path: Path, *, token: str = "", timeout: float = 30.0) -> str:
    """Upload a `.py` or `.zip` file to a master → its blob key; `RuntimeError` if it is refused."""
    status, body = _loop().run(upload_file(base_url.rstrip("/") + "/artifacts", path, token=token, timeout=timeout))
    if status != 201:
        raise RuntimeError(f"the artifact {path.name} was refused with {status}: {body}")
    return Artifact.from_dict(body).key
