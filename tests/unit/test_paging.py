"""`GET /jobs` and `GET /taskmanagers` a page at a time (rest/paging.py, docs/rest-api.md#pages)."""

from __future__ import annotations

import uuid

import aiohttp
import pytest

from sparkdispatch.client import SparkDispatchClient
from sparkdispatch.errors import InvalidRequest
from sparkdispatch.rest.paging import PageRequest, decode_cursor, encode_cursor, page_of
from sparkdispatch.testing.master import InProcessMaster

ENTRIES = [(5, "e"), (4, "d"), (3, "c"), (2, "b"), (1, "a")]  # sorted newest first


def key(entry: tuple[int, str]) -> tuple[int, str]:
    return entry


def test_pages_follow_one_another_by_cursor_until_the_last_says_none() -> None:
    first = page_of(ENTRIES, key, PageRequest(limit=2), descending=True)
    assert list(first.entries) == [(5, "e"), (4, "d")]
    assert first.next is not None
    second = page_of(ENTRIES, key, PageRequest(limit=2, after=decode_cursor(first.next)), descending=True)
    assert list(second.entries) == [(3, "c"), (2, "b")]
    assert second.next is not None
    last = page_of(ENTRIES, key, PageRequest(limit=2, after=decode_cursor(second.next)), descending=True)
    assert (list(last.entries), last.next) == ([(1, "a")], None)


def test_a_cursor_keeps_its_place_when_entries_come_and_go() -> None:
    first = page_of(ENTRIES, key, PageRequest(limit=2), descending=True)
    assert first.next is not None
    # a newer entry arrives and the cursor's own entry expires: the next page neither repeats nor skips
    changed = [(6, "f"), *[entry for entry in ENTRIES if entry != (4, "d")]]
    second = page_of(changed, key, PageRequest(limit=2, after=decode_cursor(first.next)), descending=True)
    assert list(second.entries) == [(3, "c"), (2, "b")]


def test_an_ascending_list_and_an_exact_last_page() -> None:
    ascending = sorted(ENTRIES)
    first = page_of(ascending, key, PageRequest(limit=5), descending=False)
    assert (list(first.entries), first.next) == (ascending, None)
    assert page_of([], key, PageRequest(limit=3), descending=False).next is None


@pytest.mark.parametrize("cursor", ["", "not base64!", encode_cursor(()), "x" * 600, "bnVsbA", "WzEuNV0"])
def test_a_cursor_the_master_did_not_give_is_refused_naming_after(cursor: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        page_of(ENTRIES, key, PageRequest(limit=2, after=decode_cursor(cursor)), descending=True)
    assert list(refused.value.field_errors) == ["after"]


def test_a_cursor_of_another_lists_keys_is_refused_naming_after() -> None:
    with pytest.raises(InvalidRequest) as refused:
        page_of(ENTRIES, key, PageRequest(limit=2, after=("te-1",)), descending=True)
    assert list(refused.value.field_errors) == ["after"]


def graph(name: str) -> dict[str, object]:
    return {
        "job_id": uuid.uuid4().hex,
        "name": name,
        "restart_strategy": {"type": "none"},
        "vertices": [{"id": "a", "entrypoint": "m:f"}],
    }


async def test_a_master_pages_its_jobs_and_task_executors() -> None:
    async with InProcessMaster(overrides={"rest.list.page-size": "2"}) as master:
        for index in range(3):
            await master.add_task_executor(f"te-{index}", slots=1)
        async with SparkDispatchClient(addresses=[master.url]) as client:
            submitted = [(await client.submit(graph(f"job-{index}"))).job_id for index in range(5)]

            first = await client.jobs_page()
            assert len(first.jobs) == 2 and first.next is not None
            everyone = await client.jobs()  # every page
            assert sorted(job.id for job in everyone) == sorted(submitted)
            assert [job.id for job in everyone[:2]] == [job.id for job in first.jobs]
            starts = [(job.start_time, job.id) for job in everyone]
            assert starts == sorted(starts, reverse=True)
            assert (await client.jobs_page(limit=1, after=first.next)).jobs == (everyone[2],)

            task_executors = await client.taskmanagers_page()
            assert [te.id for te in task_executors.taskmanagers] == ["te-0", "te-1"]
            assert task_executors.next is not None
            assert [te.id for te in await client.taskmanagers()] == ["te-0", "te-1", "te-2"]

        async with aiohttp.ClientSession() as http:
            for query, field in (
                ("limit=3", "limit"),
                ("limit=0", "limit"),
                ("limit=x", "limit"),
                ("after=%3F", "after"),
            ):
                async with http.get(f"{master.url}/jobs?{query}") as answer:
                    body = await answer.json()
                    assert (answer.status, body["type"], list(body["field_errors"])) == (400, "InvalidRequest", [field])
