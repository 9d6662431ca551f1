"""A job's Python environment shipped to a Spark cluster's executors, as Spark documents for Connect.

With a cluster master (`spark://…`) a UDF runs on executors that may be on other hosts, where the
environment's directory on the TaskExecutor's host does not exist. So the TaskExecutor packs the
environment once, into `<environment>/.sparkdispatch-executors.tar.gz` (kept and evicted with it),
and a job session in that environment adds it with `addArtifacts("…#environment", archive=True)`
and runs its UDFs with `environment/bin/python`: Spark unpacks the archive in the session's
directory on each executor, which is the Python workers' working directory.

The archive holds the job's own packages, not the TaskExecutor's: executors get pyspark from Spark
itself (`pyspark.zip` on the workers' `PYTHONPATH`, ahead of any site-packages). It keeps the `.pth`
that layers the TaskExecutor's site-packages under the job's, by their absolute paths: pyspark
4.3's Python workers import pyarrow for every Python UDF (Arrow-batched UDFs are the default), and
pandas UDFs need pandas, so an executor host finds them there when it has the TaskExecutor's
installation at the same path (an image shared by TaskExecutors and Spark workers); on a host
without it the `.pth` adds nothing and the job names pyarrow (and pandas) in its dependencies.
The environment is made with `uv venv --relocatable`, so its site-packages and scripts are found
wherever it is unpacked, but its `bin/python` stays a link to the TaskExecutor's base interpreter
(`home` in `pyvenv.cfg`): that interpreter must exist at the same path on every executor host
(venv-pack has the same condition). With a local master the archive is not made and UDFs run the
environment's interpreter in place.
"""

from __future__ import annotations

import os
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql.connect.session import SparkSession

ARCHIVE_NAME = ".sparkdispatch-executors.tar.gz"
#: The directory Spark unpacks the archive to, in the session's directory on each executor.
UNPACKED_AS = "environment"
#: The Spark SQL setting naming the Python a session's UDFs run in (`spark.pyspark.python` is the static default).
UDF_PYTHON_CONF = "spark.sql.execution.pyspark.python"


def pack(environment: Path, *, left_out: frozenset[str]) -> Path:
    """Write the archive of `environment` (without the files named in `left_out`, the archive and
    its partial copy); atomic, so a reader never sees half an archive."""
    archive = environment / ARCHIVE_NAME
    partial = environment / f"{ARCHIVE_NAME}.partial"
    skipped = left_out | {ARCHIVE_NAME, partial.name}

    def keep(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
        return None if Path(member.name).name in skipped else member

    with tarfile.open(partial, "w:gz", compresslevel=1) as tar:  # speed over size: packed on a task's path
        for entry in sorted(os.listdir(environment)):
            if entry not in skipped:
                tar.add(environment / entry, arcname=entry, filter=keep)
    partial.replace(archive)
    return archive


def archive_of(python: str) -> Path | None:
    """The archive of the environment whose interpreter is `python` (`<environment>/bin/python`), if packed."""
    archive = Path(python).parent.parent / ARCHIVE_NAME
    return archive if archive.is_file() else None


def run_udfs_in(session: SparkSession, python: str) -> None:
    """Make `session`'s UDFs run in the environment of `python`: its archive unpacked on the
    executors when it was packed (a cluster master), else `python` itself."""
    archive = archive_of(python)
    if archive is None:
        session.conf.set(UDF_PYTHON_CONF, python)
        return
    session.addArtifacts(f"{archive}#{UNPACKED_AS}", archive=True)
    session.conf.set(UDF_PYTHON_CONF, f"{UNPACKED_AS}/bin/python")
