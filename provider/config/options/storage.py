"""The options of the configuration docs' section "Storage" (see the package's docstring)."""

from __future__ import annotations

from datetime import timedelta
from typing import Final, Literal, get_args

from sparkdispatch.config.option import ConfigOption, Section
from sparkdispatch.config.units import MiB

ResultsRetention = Literal["keep", "delete"]

SECTION: Final = Section("Storage")

STORAGE_DIR: Final = SECTION.string(
    "storage.dir",
    "~/.sparkdispatch",
    "Directory for the JobResult store, blobs, archived jobs and, with `high-availability.mode: none`, the "
    "JobGraph and progress stores. Shared by all masters in HA.",
)
STORAGE_RESULTS_DIR: Final = SECTION.string(
    "storage.results-dir",
    "",
    "Where tasks write result partitions; any path or URI Spark can write (`hdfs://`, `s3a://`). Empty means "
    "`<storage.dir>/results`; TaskExecutors on several hosts need a shared one.",
)
JOB_RESULT_STORE_DELETE_ON_COMMIT: Final = SECTION.boolean(
    "job-result-store.delete-on-commit",
    True,
    "Delete a JobResult file once its job is cleaned up; otherwise rename `<id>_DIRTY.json` to `<id>.json` and "
    "keep it (Flink's semantics).",
)
RESULTS_RETENTION: Final[ConfigOption[ResultsRetention]] = SECTION.choice(
    "results.retention",
    get_args(ResultsRetention),
    "keep",
    "What happens to a finished job's intermediate results at cleanup: `keep` them, or `delete` them.",
)
JOBSTORE_MAX_IN_MEMORY: Final = SECTION.integer(
    "jobstore.max-in-memory",
    200,
    "Finished jobs kept in memory for queries; older ones are read from the archive on disk.",
    minimum=1,
)
JOBSTORE_EXPIRATION_TIME: Final = SECTION.duration(
    "jobstore.expiration-time",
    timedelta(days=7),
    "A finished job leaves the archive (in memory and on disk) this long after it ended; it can no longer be "
    "queried or repaired then (Flink's key; its default is 1h). As long as `blob.retention`: an older job's code "
    "may be gone anyway.",
    minimum=timedelta(seconds=1),
)
JOBSTORE_MAX_CAPACITY: Final = SECTION.integer(
    "jobstore.max-capacity",
    10_000,
    "The most finished jobs the archive keeps; beyond it the oldest (by end time) leave it first (Flink's key). "
    "Each stays in memory as its overview, about 1 KiB.",
    minimum=1,
)
BLOB_MAX_SIZE: Final = SECTION.size("blob.max-size", 100 * MiB, "Largest user-code artifact accepted.", minimum=1)
BLOB_RETENTION: Final = SECTION.duration(
    "blob.retention",
    timedelta(days=7),
    "A stored artifact that no stored job names and that was neither uploaded nor named by a submission or repair "
    "for this long is removed; a repair of a job whose code was removed is refused.",
    minimum=timedelta(seconds=1),
)
BLOB_CLEANUP_INTERVAL: Final = SECTION.duration(
    "blob.cleanup-interval",
    timedelta(hours=1),
    "How often the leader looks for artifacts to remove.",
    minimum=timedelta(milliseconds=100),
)
