"""The content-addressed blob store on a temp directory."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from sparkdispatch.errors import BlobError, BlobNotFound, BlobTooLarge, CorruptedBlob
from sparkdispatch.ha.blob_store import BlobStore


@pytest.fixture
def blobs(tmp_path: Path) -> BlobStore:
    return BlobStore(tmp_path / "blobs" / "default", max_size=1024)


async def test_put_returns_the_sha256_and_keeps_the_filename(blobs: BlobStore) -> None:
    data = b"def run(ctx):\n    return 1\n"
    key = await blobs.put(data, "job.py")
    assert key == hashlib.sha256(data).hexdigest()
    path = await blobs.path(key)
    assert path.name == "job.py" and path.read_bytes() == data
    assert await blobs.filename(key) == "job.py"
    assert await blobs.exists(key)
    assert await blobs.put(data, "job.py") == key
    assert blobs.keys() == {key}
    zipped = await blobs.put(b"PK\x03\x04fake", "deps.zip")
    assert (await blobs.path(zipped)).suffix == ".zip"
    await blobs.delete(key)
    assert not await blobs.exists(key)
    with pytest.raises(BlobNotFound):
        await blobs.path(key)


async def test_too_large_and_bad_names_change_nothing(blobs: BlobStore) -> None:
    with pytest.raises(BlobTooLarge, match="1024"):
        await blobs.put(b"x" * 1025, "big.py")
    for name in ("", ".", "..", "a/b.py", "../evil.py", "x" * 256):
        with pytest.raises(BlobError):
            await blobs.put(b"x", name)
    assert blobs.keys() == set()
    assert not blobs.directory.exists() or list(blobs.directory.iterdir()) == []
    with pytest.raises(BlobNotFound):
        await blobs.path("../../etc/passwd")


async def test_corruption_is_detected_on_every_read(blobs: BlobStore) -> None:
    key = await blobs.put(b"print('ok')\n", "ok.py")
    path = blobs.path_blocking(key)
    path.write_bytes(b"print('tampered')\n")
    with pytest.raises(CorruptedBlob, match=key):
        await blobs.path(key)
    path.unlink()
    with pytest.raises(CorruptedBlob):
        blobs.path_blocking(key)
    assert await blobs.put(b"print('ok')\n", "ok.py") == key
    assert blobs.path_blocking(key).read_bytes() == b"print('ok')\n"
