"""The content-addressed blob store on a temp directory."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from sparkdispatch.config import Configuration
from sparkdispatch.errors import BlobError, BlobNotFound, BlobTooLarge, CorruptedBlob
from sparkdispatch.ha import BlobReader, create_ha_services
from sparkdispatch.ha.blob_store import BlobStore


@pytest.fixture
def blobs(tmp_path: Path) -> BlobStore:
    return BlobStore(tmp_path / "blobs" / "default", max_size=1024)


def stored(blobs: BlobStore) -> set[str]:
    """The names in the store's directory: blob keys, and nothing else."""
    return {p.name for p in blobs.directory.iterdir()} if blobs.directory.exists() else set()


async def test_put_returns_the_sha256_and_keeps_the_filename(blobs: BlobStore) -> None:
    data = b"def run(ctx):\n    return 1\n"
    key = await blobs.put(data, "job.py")
    assert key == hashlib.sha256(data).hexdigest()
    path = blobs.path_blocking(key)
    assert path.name == "job.py" and path.read_bytes() == data
    assert await blobs.put(data, "job.py") == key
    assert stored(blobs) == {key}
    zipped = await blobs.put(b"PK\x03\x04fake", "deps.zip")
    assert blobs.path_blocking(zipped).suffix == ".zip"
    wheel = await blobs.put(b"PK\x03\x04wheel", "my_lib-1.0-py3-none-any.whl")
    assert blobs.path_blocking(wheel).name == "my_lib-1.0-py3-none-any.whl"
    with pytest.raises(BlobNotFound):
        blobs.path_blocking("0" * 64)


async def test_too_large_and_bad_names_change_nothing(blobs: BlobStore) -> None:
    with pytest.raises(BlobTooLarge, match="1024"):
        await blobs.put(b"x" * 1025, "big.py")
    for name in ("", ".", "..", "a/b.py", "../evil.py", "x" * 256, "mylib.whl", "mylib-1.0.whl"):
        with pytest.raises(BlobError):
            await blobs.put(b"x", name)
    assert stored(blobs) == set()
    with pytest.raises(BlobNotFound):
        blobs.path_blocking("../../etc/passwd")


async def test_corruption_is_detected_on_every_read(blobs: BlobStore) -> None:
    key = await blobs.put(b"print('ok')\n", "ok.py")
    path = blobs.path_blocking(key)
    path.write_bytes(b"print('tampered')\n")
    with pytest.raises(CorruptedBlob, match=key):
        blobs.path_blocking(key)
    path.unlink()
    with pytest.raises(CorruptedBlob):
        blobs.path_blocking(key)
    assert await blobs.put(b"print('ok')\n", "ok.py") == key
    assert blobs.path_blocking(key).read_bytes() == b"print('ok')\n"


async def test_a_follower_reads_the_clusters_blobs_and_checks_them(standalone_config: Configuration) -> None:
    services = create_ha_services(standalone_config)
    key = await services.blob_store.put(b"def run(ctx):\n    return 1\n", "job.py")
    reader = BlobReader(services.blob_store.directory)
    path = reader.path_blocking(key)
    assert path == services.blob_store.path_blocking(key) and path.name == "job.py"
    path.write_bytes(b"tampered")
    with pytest.raises(CorruptedBlob):
        reader.path_blocking(key)
    with pytest.raises(BlobNotFound):
        reader.path_blocking("0" * 64)
    await services.close()


async def test_a_read_during_a_sweep_finds_the_whole_blob_or_none(
    blobs: BlobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = await blobs.put(b"def run(ctx):\n    return 3\n", "job.py")
    seen: list[type[Exception]] = []
    real_rmtree = shutil.rmtree

    def rmtree_halfway(path: Path, ignore_errors: bool = False) -> None:
        for child in Path(path).iterdir():  # the removal is half done: its file is gone
            child.unlink()
        try:
            blobs.path_blocking(key)
        except (BlobNotFound, CorruptedBlob) as exc:
            seen.append(type(exc))
        real_rmtree(path, ignore_errors=ignore_errors)

    monkeypatch.setattr("sparkdispatch.ha.blob_store.shutil.rmtree", rmtree_halfway)
    assert blobs.sweep_blocking(retention_s=-1, keep=()) == [key]
    assert seen == [BlobNotFound]
    assert stored(blobs) == set()
