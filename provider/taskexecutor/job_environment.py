"""The environment a job's code runs in: the TaskExecutor's own, without the cluster's credentials.

Slot processes, the Spark Connect server and its Python workers (a UDF's process) get it, so a
task cannot read the REST token or the cluster secret from its environment. Jobs share the
TaskExecutor's operating-system user all the same, and with it what that user may read: this
keeps credentials out of reach of a careless `print(os.environ)`, not of a hostile job
(docs/operations.md, "Trust model").
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from sparkdispatch.config import CLUSTER_SECRET_ENV_VAR, TOKEN_ENV_VAR

#: Variables of the TaskExecutor's environment that a job's processes do not get.
#: pyspark's Connect client and server read a token from it; the TaskExecutor hands its own by URL.
CONNECT_TOKEN_ENV_VAR = "SPARK_CONNECT_AUTHENTICATE_TOKEN"
WITHHELD = frozenset({TOKEN_ENV_VAR, CLUSTER_SECRET_ENV_VAR, CONNECT_TOKEN_ENV_VAR})


def job_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without `WITHHELD`, with `extra` on top."""
    return {**{name: value for name, value in os.environ.items() if name not in WITHHELD}, **(extra or {})}
