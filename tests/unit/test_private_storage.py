"""A master's or TaskExecutor's files are its user's alone: the umask and directories `keep_private` sets."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkdispatch.storage.private import keep_private


@pytest.fixture
def umask() -> Iterator[None]:
    """keep_private sets the process's umask: the test process gets its own back."""
    before = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(before)


@pytest.mark.usefixtures("umask")
def test_new_storage_and_results_directories_and_what_is_made_in_them_are_the_users_alone(tmp_path: Path) -> None:
    storage, results = tmp_path / "storage", tmp_path / "elsewhere" / "results"
    keep_private(storage, results_dir=f"file://{results}")
    (storage / "jobgraphs").mkdir()
    (storage / "jobgraphs" / "job.json").write_text("{}")
    modes = {path: path.stat().st_mode & 0o777 for path in (storage, results, storage / "jobgraphs")}
    assert modes == {storage: 0o700, results: 0o700, storage / "jobgraphs": 0o700}
    assert (storage / "jobgraphs" / "job.json").stat().st_mode & 0o777 == 0o600


@pytest.mark.usefixtures("umask")
def test_a_directory_others_may_enter_keeps_its_mode_with_a_warning_and_remote_results_are_left_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    storage = tmp_path / "mounted"
    storage.mkdir(mode=0o755)
    storage.chmod(0o755)
    with caplog.at_level(logging.WARNING, logger="sparkdispatch.storage.private"):
        keep_private(storage, results_dir="s3a://bucket/results")
    assert storage.stat().st_mode & 0o777 == 0o755
    assert f"{storage} is 0755" in caplog.text
    assert not (tmp_path / "bucket").exists() and not Path("s3a:").exists()
