"""The options of the configuration docs' section "TaskExecutors" (see the package's docstring)."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Final

from sparkdispatch.config.option import Section
from sparkdispatch.config.units import GiB, KiB, MiB


def _cpu_count() -> int:
    return os.cpu_count() or 1


SECTION: Final = Section("TaskExecutors")

TASKEXECUTOR_SLOTS: Final = SECTION.integer(
    "taskexecutor.slots",
    _cpu_count(),
    "Slots per TaskExecutor: tasks it runs at once.",
    minimum=1,
    default_doc="number of CPU cores",
)
TASKEXECUTOR_ID: Final = SECTION.string(
    "taskexecutor.id", "", "Identity of a TaskExecutor; empty means `<hostname>-<random>`."
)
TASKEXECUTOR_POOL: Final = SECTION.string(
    "taskexecutor.pool",
    "default",
    "The pool this TaskExecutor belongs to: it runs subtasks only of jobs whose JobGraph names this pool "
    "(`pool`; a job that names none runs in `default`), so teams that do not trust each other get TaskExecutors "
    "of their own (docs/operations.md, Trust model). 1-64 letters, digits, `_`, `.` or `-`.",
)
TASKEXECUTOR_METRICS_PORT: Final = SECTION.integer(
    "taskexecutor.metrics.port",
    0,
    "Port of a TaskExecutor's own Prometheus metrics (`/metrics`: slots, busy slots, attempts, slot processes "
    "lost, its Spark Connect server's health and restarts); 0 serves none.",
    minimum=0,
)
TASKEXECUTOR_METRICS_BIND_ADDRESS: Final = SECTION.string(
    "taskexecutor.metrics.bind-address", "127.0.0.1", "Address the TaskExecutor's metrics port binds to."
)
TASKEXECUTOR_REGISTRATION_MAX_BACKOFF: Final = SECTION.duration(
    "taskexecutor.registration.max-backoff",
    timedelta(seconds=10),
    "Longest pause between attempts to register with the ResourceManager.",
    minimum=timedelta(milliseconds=10),
)
TASKEXECUTOR_CANCELLATION_TIMEOUT: Final = SECTION.duration(
    "taskexecutor.cancellation.timeout",
    timedelta(seconds=30),
    "How long a cancelled task may run on after its Spark operations were interrupted before its slot process is "
    "killed and replaced (Flink's `task.cancellation.timeout`).",
    minimum=timedelta(milliseconds=100),
)
TASKEXECUTOR_ATTEMPT_LOG_MAX_SIZE: Final = SECTION.size(
    "taskexecutor.attempt-log.max-size",
    4 * MiB,
    "Cap of one attempt's log file (what its task printed or logged, with the Spark driver's lines about it). The "
    "first three quarters are written as they come; of what follows only the last quarter is kept, written when "
    "the attempt ends after a line saying how much was dropped, so a failing task's last lines stay. 4 MiB is "
    "some 50,000 lines, and its tail is one read of the log route (1 MiB); a job of 1,000 subtasks then holds at "
    "most 4 GiB of logs per attempt round beside its results.",
    minimum=4 * KiB,
)
TASKEXECUTOR_ARTIFACT_CACHE_MAX_SIZE: Final = SECTION.size(
    "taskexecutor.artifact-cache.max-size",
    2 * GiB,
    "Most a TaskExecutor's copies of user-code artifacts take on its disk (`<storage.dir>/te-cache/<id>/`); beyond "
    "it the least recently used ones are removed, never one a running task uses, and fetched again from the master "
    "when a task needs them.",
    minimum=1,
)
TASKEXECUTOR_SLOT_PROCESS_SPARES: Final = SECTION.integer(
    "taskexecutor.slot-process.spares",
    1,
    "Slot processes a TaskExecutor keeps started and warm for the next slots that get a task of other code (each "
    "about 145 MB, less when forked from the template). A spare taken is replaced in the background: forked from "
    "the slot-process template, about a second on a loaded 2-core host (its session's first calls); started anew "
    "(taskexecutor.slot-process.template false), a few seconds of CPU more (pyspark's Connect client imported). "
    "Jobs of new code that follow each other more closely than that wait for it once the spares are used up; raise "
    "it where new code comes in bursts (bench/small_jobs.py, new code every other job: with processes started "
    "anew, p90 6.6 s with 1 spare, 5.2 s with 2, the median 3.2 s; forked, 1 spare, p90 2.3 s, median 1.7 s).",
    minimum=0,
)
TASKEXECUTOR_SLOT_PROCESS_PYTHON_WORKERS: Final = SECTION.integer(
    "taskexecutor.slot-process.python-workers",
    0,
    "Spark Python workers each new slot process (a spare) starts in the Connect session it makes ahead for its "
    "first job, by running one Python UDF over that many partitions while it waits; 0 (the default) starts none. "
    "Spark starts a worker daemon per session at its first UDF and a worker per concurrent task, each importing "
    "pandas and pyarrow: a job's first UDF took 3.9-6.1 s in a new session and 0.7-0.9 s in one whose workers "
    "were started (2 cores, load 2.5-5). The start costs the same CPU, spent ahead, about 50 MB for the daemon, "
    "and while it runs it holds that many executor cores: in bench/small_jobs.py --udf --gap 2 (load ~5) jobs of "
    "new code took 0.66 s instead of 3.85 s with 2, but jobs of the same code, run while the next spare started "
    "its workers, 5.7 s instead of 3.8 s. Worth it where jobs of new code with Python UDFs come more than a few "
    "seconds apart; set it to the cores one task's UDFs use (the executors' cores under local[N]). A job that "
    "takes the session first interrupts the start. Not done for the next session of a process that ran a job, "
    "nor for processes in a job's own Python environment. Measured with daemons started anew; with the "
    "worker-daemon template (taskexecutor.python-workers.template, the default) a daemon is a fork and the first "
    "UDF costs far less.",
    minimum=0,
)
TASKEXECUTOR_SLOT_PROCESS_TEMPLATE: Final = SECTION.boolean(
    "taskexecutor.slot-process.template",
    True,
    "Fork a TaskExecutor's slot processes (in its own interpreter) from a template process that has imported "
    "pyspark's Connect client, instead of starting each anew: a new process for a job of new code then skips "
    "the interpreter's start and the imports (bench/small_jobs.py). The template holds no session or channel, "
    "dies with the TaskExecutor and is started again if it dies; a process it cannot fork is started anew. "
    "false starts every slot process anew.",
)
TASKEXECUTOR_PYTHON_WORKERS_TEMPLATE: Final = SECTION.boolean(
    "taskexecutor.python-workers.template",
    True,
    "With a local Spark master, fork Spark's Python worker daemons (one per Connect session, started at its first "
    "Python UDF) from a template process that has imported pyspark, pandas and pyarrow, instead of starting each "
    "anew: a one-task job with a UDF took 0.59 s instead of 2.17 s from submit to FINISHED (bench/small_jobs.py "
    "--udf, quiet 2-core host; the same call in a warm classic session 0.24-0.28 s). Spark runs a stub as its daemon "
    "module (`spark.python.daemon.module`, unless the configuration names one) that hands its streams and "
    "environment to the template; in a job's own Python environment, or without a running template, the stub "
    "starts the daemon anew. No job code runs in the template. false starts every daemon anew.",
)
TASKEXECUTOR_SLOT_PROCESS_ENVIRONMENT_SPARES: Final = SECTION.integer(
    "taskexecutor.slot-process.environment-spares",
    2,
    "Slot processes a TaskExecutor keeps started and warm in jobs' Python environments, one per environment, for "
    "the ones its tasks used last: a task of a job whose environment has a spare does not wait for a process to "
    "start in it. 0 starts a process for each slot that gets such a task.",
    minimum=0,
)
