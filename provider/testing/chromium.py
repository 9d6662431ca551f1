"""Headless Chromium for the browser tests: where it is, how it starts, and why it cannot here."""

from __future__ import annotations

import importlib.util
import os
import shutil

#: the Chromium binary (Debian's `chromium`, or `SPARKDISPATCH_CHROMIUM`)
CHROMIUM = os.environ.get("SPARKDISPATCH_CHROMIUM", "/usr/bin/chromium")
#: headless, no sandbox (tests run as root in CI), and nothing that reaches the network on its own
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
)


def chromium_args(*extra: str) -> list[str]:
    """`CHROMIUM_ARGS` and then `extra`, as playwright's `launch(args=...)` takes them."""
    return [*CHROMIUM_ARGS, *extra]


def browser_missing() -> str | None:
    """Why a browser test cannot run on this machine (no playwright, no Chromium), or None."""
    if importlib.util.find_spec("playwright") is None:
        return "Python's playwright is not installed (pip install playwright)"
    if not shutil.which(CHROMIUM):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    return None
