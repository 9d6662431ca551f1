"""What every JobMaster test shares: its background work must not fail."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def no_background_errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Illegal state transitions or crashes in the JobMaster's background work fail the test."""
    caplog.set_level(logging.INFO, logger="sparkdispatch.jobmaster")
    yield
    crashes = [
        r
        for r in caplog.records
        if "background call failed" in r.getMessage() or "ResourceManager call" in r.getMessage()
    ]
    assert not crashes, crashes[0].exc_info
