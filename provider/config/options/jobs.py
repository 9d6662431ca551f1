"""The options of the configuration docs' section "Jobs" (see the package's docstring)."""

from __future__ import annotations

from typing import Final

from sparkdispatch.config.option import Section

SECTION: Final = Section("Jobs")

JOBGRAPH_MAX_SUBTASKS: Final = SECTION.integer(
    "jobgraph.max-subtasks",
    100_000,
    "Most subtasks a job may have in all (the sum of its vertices' parallelism). A larger JobGraph is refused at "
    "submission with 400 `JobTooLarge`, and a stored one (accepted under a higher limit) fails at recovery instead "
    "of running; the master builds each subtask's state in memory (per 100,000: about 45 MB, and 0.5-2 s of a "
    "thread on a 2-core machine).",
    minimum=1,
)
