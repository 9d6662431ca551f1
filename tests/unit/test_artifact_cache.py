"""ArtifactCache: blobs fetched once, kept within a size bound, never removed under a running attempt."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sparkdispatch.errors import SparkDispatchError
from sparkdispatch.taskexecutor.artifact_cache import ArtifactCache
from sparkdispatch.testing.blobs import LocalBlobs

KIB = 1024


class Blobs(LocalBlobs):
    def put_sized(self, filename: str, size: int) -> str:
        return self.put(filename, (filename.encode() * size)[:size])


@pytest.fixture
def blobs(tmp_path: Path) -> Blobs:
    return Blobs(tmp_path)


def test_a_blob_is_fetched_once_into_a_directory_of_its_own(blobs: Blobs, tmp_path: Path) -> None:
    key = blobs.put_sized("tasks.py", 10)
    cache = ArtifactCache(blobs.fetch, tmp_path / "cache", max_size=KIB)
    with cache.use([key]) as first:
        pass
    with cache.use([key]) as again:
        pass
    assert first == again == [str(tmp_path / "cache" / key / "tasks.py")] and blobs.fetched == [key]


def test_beyond_the_bound_the_least_recently_used_blobs_go_and_come_back_when_used(
    blobs: Blobs, tmp_path: Path
) -> None:
    a, b, c = (blobs.put_sized(f"{name}.py", 400) for name in "abc")
    cache = ArtifactCache(blobs.fetch, tmp_path / "cache", max_size=KIB)
    for key in (a, b, a, c):  # b is the least recently used when c comes
        with cache.use([key]):
            pass
    assert cache.keys() == [a, c] and cache.size == 800
    assert not (tmp_path / "cache" / b).exists()
    with cache.use([b]) as [path]:
        assert Path(path).read_bytes() == blobs.files[b].read_bytes()
    assert blobs.fetched == [a, b, c, b] and cache.keys() == [c, b]


def test_a_blob_a_running_attempt_uses_is_never_removed(blobs: Blobs, tmp_path: Path) -> None:
    a, b, c = (blobs.put_sized(f"{name}.zip", 600) for name in "abc")
    cache = ArtifactCache(blobs.fetch, tmp_path / "cache", max_size=KIB)
    with cache.use([a]) as [path_a]:
        with cache.use([b]):
            assert Path(path_a).is_file() and cache.size == 1200  # over the bound while both run
        assert cache.keys() == [a]  # b ended: it went, a runs on
        with cache.use([a, c]):
            assert cache.size == 1200
        assert Path(path_a).is_file() and cache.keys() == [a]
    with cache.use([b]):
        pass
    assert cache.keys() == [b]


def test_blobs_fetched_before_a_restart_are_used_and_bounded_oldest_first(blobs: Blobs, tmp_path: Path) -> None:
    keys = [blobs.put_sized(f"m{i}.py", 400) for i in range(3)]
    for age, key in zip((300, 200, 100), keys, strict=True):
        path = blobs.fetch(key, tmp_path / "cache" / key)
        os.utime(path, (path.stat().st_atime, path.stat().st_mtime - age))
    (tmp_path / "cache" / "partial").mkdir()
    (tmp_path / "cache" / "partial" / ".download").write_bytes(b"x")
    blobs.fetched.clear()
    cache = ArtifactCache(blobs.fetch, tmp_path / "cache", max_size=KIB)
    assert cache.keys() == keys[1:]  # the oldest went at start
    with cache.use([keys[2]]):
        pass
    assert blobs.fetched == []


def test_a_blob_that_is_not_python_code_is_refused(blobs: Blobs, tmp_path: Path) -> None:
    key = blobs.put_sized("data.csv", 10)
    cache = ArtifactCache(blobs.fetch, tmp_path / "cache", max_size=KIB)
    with pytest.raises(SparkDispatchError, match="not a .py, .zip or .whl"):
        with cache.use([key]):
            pass
    assert cache.keys() == [] and not (tmp_path / "cache" / key).exists()


def test_a_cached_file_changed_since_it_was_fetched_is_fetched_again_before_use(blobs: Blobs, tmp_path: Path) -> None:
    key = blobs.put("tasks.py", b"def numbers(ctx):\n    return 'the job's own code'\n")
    cache = ArtifactCache(blobs.fetch, tmp_path / "cache", max_size=KIB)
    with cache.use([key]) as (path,):
        pass
    Path(path).write_bytes(b"def numbers(ctx):\n    return 'another job wrote this'\n")  # same user, same file
    with cache.use([key]) as (again,):
        assert Path(again).read_bytes() == b"def numbers(ctx):\n    return 'the job's own code'\n"
    assert blobs.fetched == [key, key] and cache.repairs == 1
    with cache.use([key]):
        pass
    assert blobs.fetched == [key, key] and cache.repairs == 1  # an intact file is not fetched again
