"""The options of the configuration docs' section "Jobs' Python environments" (see the package's docstring)."""

from __future__ import annotations

from typing import Final

from sparkdispatch.config.option import Section
from sparkdispatch.config.units import GiB

SECTION: Final = Section("Jobs' Python environments")

PYTHON_INDEX_URL: Final = SECTION.string(
    "python.index-url",
    "",
    "Package index a TaskExecutor installs a job's `environment.dependencies` from (uv's `--index-url`); empty "
    "means uv's default, PyPI. Jobs name requirements only: where packages come from is the TaskExecutor's choice.",
)
PYTHON_EXTRA_INDEX_URL: Final = SECTION.string(
    "python.extra-index-url",
    "",
    "More package indexes, separated by spaces (uv's `--extra-index-url`, one per URL).",
)
PYTHON_FIND_LINKS: Final = SECTION.string(
    "python.find-links",
    "",
    "Directories or URLs of wheels to install from, separated by spaces (uv's `--find-links`): with "
    "`python.no-index`, an offline mirror.",
)
PYTHON_NO_INDEX: Final = SECTION.boolean(
    "python.no-index",
    False,
    "Install from `python.find-links` only, asking no package index (uv's `--no-index`).",
)
PYTHON_ENVIRONMENTS_DIR: Final = SECTION.string(
    "python.environments.dir",
    "",
    "Where a TaskExecutor keeps the jobs' Python environments, one virtual environment per distinct set of "
    "requirements; empty means `<storage.dir>/python-environments`. TaskExecutors of one host may share it (file "
    "locks keep a build single and an environment in use in place); keep it on a local disk.",
)
PYTHON_ENVIRONMENTS_MAX_SIZE: Final = SECTION.size(
    "python.environments.max-size",
    10 * GiB,
    "Most the jobs' Python environments take in `python.environments.dir` (uv's own download cache, "
    "`uv-cache/` there, not counted); beyond it the least recently used environments no running task uses are "
    "removed, and built again when a job needs them.",
    minimum=1,
)
