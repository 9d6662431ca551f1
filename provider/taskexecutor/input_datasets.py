"""The datasets a task's DataFrame read, from the files Spark lists (`DataFrame.inputFiles()`).

A lineage dataset is a table, not a file: each file is named by its directory, and trailing
partition directories (`key=value`, Hive's layout) are folded into their table's directory, as
OpenLineage's Spark integration trims them (its key-value dataset name trimmer). Files under the
job's own results are left out: the JobGraph names those inputs already.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from urllib.parse import urlsplit, urlunsplit

#: A Hive-style partition directory: `region=eu`, `dt=2026-11-28`.
_PARTITION_DIR = re.compile(r"[^=/]+=[^/]*")


def input_datasets(
    files: Iterable[str], *, own_results: str, limit: int, also_own: tuple[str, ...] = ()
) -> tuple[str, ...]:
    """The table directories of `files` (paths or URIs), in their first order, at most `limit`,
    without those under `own_results` (the job's results directory) or `also_own` (its results kept
    on the TaskExecutor)."""
    own = tuple(_normalized(directory).rstrip("/") + "/" for directory in (own_results, *also_own))
    datasets: dict[str, None] = {}
    for file in files:
        if _normalized(file).startswith(own):
            continue
        datasets.setdefault(table_directory(file))
        if len(datasets) >= limit:
            break
    return tuple(datasets)


def table_directory(file: str) -> str:
    """The directory of `file` (a path or URI) without its trailing `key=value` directories."""
    parts = urlsplit(file)
    directory = posixpath.dirname(parts.path.rstrip("/"))
    while directory not in ("", "/") and _PARTITION_DIR.fullmatch(posixpath.basename(directory)):
        directory = posixpath.dirname(directory)
    return urlunsplit(parts._replace(path=directory, query="", fragment=""))


def _normalized(location: str) -> str:
    """`location` compared as `scheme://host/path`: a bare path and `file:` URIs are `file` paths."""
    parts = urlsplit(location)
    scheme = parts.scheme.lower() or "file"
    if scheme == "file":
        return f"file://{posixpath.normpath(parts.path)}"
    return f"{scheme}://{parts.netloc}{posixpath.normpath(parts.path or '/')}"
