"""Slow and silent clients of a real master (in process), over real sockets: a request head
dribbled byte by byte, a body that stalls and a kept-alive connection left idle are cut off,
while long polls, steady slow uploads and large uploads at normal speed are answered."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import aiohttp

from sparkdispatch.testing.master import InProcessMaster

GRAPH = json.dumps({"name": "g", "vertices": [{"id": "a", "entrypoint": "m:f"}]}).encode()
BOUNDARY = "sparkdispatch-test-boundary"
WAIT = 60.0  # bounds a hang only: every wait below ends at the server's own timeout, seconds sooner


async def connect(master: InProcessMaster) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", master.port)


def head(master: InProcessMaster, method: str, path: str, **headers: str) -> bytes:
    lines = [
        f"{method} {path} HTTP/1.1",
        f"Host: 127.0.0.1:{master.port}",
        *(f"{name.replace('_', '-')}: {value}" for name, value in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def jobs(master: InProcessMaster) -> list[object]:
    async with aiohttp.ClientSession() as http, http.get(master.url + "/jobs") as answer:
        return list((await answer.json())["jobs"])


def multipart(content: bytes) -> tuple[bytes, bytes]:
    """The multipart body of an artifact upload, as the part before the file's bytes and the part after."""
    before = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="big.py"\r\n'
        "Content-Type: text/x-python\r\n\r\n"
    ).encode()
    return before, f"\r\n--{BOUNDARY}--\r\n".encode()


async def test_a_request_head_dribbled_byte_by_byte_is_cut_off() -> None:
    # a long idle timeout: what cuts the connection is the header timeout alone
    async with InProcessMaster(overrides={"rest.header-timeout": "500ms", "rest.idle-timeout": "10min"}) as master:
        reader, writer = await connect(master)
        request = head(master, "GET", "/overview", X_Slow="a" * 200)
        sent = 0
        try:
            for byte in request:  # 0.05 s a byte: the whole head would take over 12 s
                if reader.at_eof():
                    break
                writer.write(bytes([byte]))
                await writer.drain()
                sent += 1
                await asyncio.sleep(0.05)
        except ConnectionError:
            pass
        assert sent < len(request), "the master waited for the whole dribbled head"
        assert await asyncio.wait_for(reader.read(), WAIT) == b""  # closed without an answer
        writer.close()


async def test_a_body_that_stalls_is_refused_and_its_connection_closed() -> None:
    async with InProcessMaster(overrides={"rest.body-timeout": "500ms"}) as master:
        for path, content_type, start in (
            ("/jobs", "application/json", GRAPH[:10]),
            ("/artifacts", f"multipart/form-data; boundary={BOUNDARY}", multipart(b"x" * 100)[0] + b"x" * 10),
        ):
            reader, writer = await connect(master)
            writer.write(head(master, "POST", path, Content_Type=content_type, Content_Length="100000") + start)
            await writer.drain()
            answer = await asyncio.wait_for(reader.read(), WAIT)  # to the end: the master closes the connection
            writer.close()
            status_line, _, rest = answer.partition(b"\r\n")
            assert status_line == b"HTTP/1.1 408 Request Timeout", answer[:300]
            body = json.loads(rest.partition(b"\r\n\r\n")[2])
            assert body["type"] == "RequestTimeout" and "rest.body-timeout" in body["errors"][0], body
        assert await jobs(master) == []


async def test_an_idle_kept_alive_connection_is_closed() -> None:
    async with InProcessMaster(overrides={"rest.idle-timeout": "500ms", "rest.header-timeout": "10min"}) as master:
        reader, writer = await connect(master)
        writer.write(head(master, "GET", "/overview"))
        await writer.drain()
        status_line = await reader.readline()
        assert status_line.startswith(b"HTTP/1.1 200"), status_line
        headers = (await reader.readuntil(b"\r\n\r\n")).decode().lower()
        length = int(headers.split("content-length:", 1)[1].split("\r\n", 1)[0])
        await reader.readexactly(length)
        assert await asyncio.wait_for(reader.read(), WAIT) == b""  # no second request: the master closed it
        writer.close()


async def test_long_polls_slow_steady_uploads_and_large_uploads_are_answered() -> None:
    overrides = {
        "rest.header-timeout": "1s",
        "rest.idle-timeout": "1s",
        "rest.body-timeout": "2s",
        "rest.execution-result.long-poll": "2s",
    }
    async with InProcessMaster(overrides=overrides) as master, aiohttp.ClientSession() as http:
        await master.add_task_executor(script=lambda tdd: None)  # its tasks run until cancelled
        async with http.post(master.url + "/jobs", data=GRAPH, headers={"Content-Type": "application/json"}) as answer:
            assert answer.status == 202, await answer.text()
            job_id = (await answer.json())["job_id"]
        # a long poll outlasts the header and idle timeouts, on a kept-alive connection, twice
        for _ in range(2):
            async with http.get(f"{master.url}/jobs/{job_id}/execution-result") as answer:
                assert answer.status == 200 and await answer.json() == {"status": {"id": "IN_PROGRESS"}}

        before, after = multipart(b"")

        async def steady() -> AsyncIterator[bytes]:  # 3 s in all, never 2 s without a byte
            yield before
            for _ in range(12):
                await asyncio.sleep(0.25)
                yield b"# " + b"x" * 4094 + b"\n"
            yield after

        content_type = f"multipart/form-data; boundary={BOUNDARY}"
        headers = {"Content-Type": content_type}
        async with http.post(master.url + "/artifacts", data=steady(), headers=headers) as answer:
            assert answer.status == 201, await answer.text()
        large = aiohttp.FormData()
        large.add_field("file", b"# " + b"x" * (16 << 20) + b"\n", filename="large.py")
        async with http.post(master.url + "/artifacts", data=large) as answer:
            assert answer.status == 201, await answer.text()
