"""The provider's earlier names, kept for one release: each use warns, then works as the new name.

| earlier | now |
| --- | --- |
| `SubmitJobGraphOperator` | `SparkDispatchSubmitJobOperator` |
| `JobResultSensor` | `SparkDispatchJobSensor` |
| `JobResultTrigger` | `SparkDispatchJobTrigger` |
| `VertexTrigger` | `SparkDispatchVertexTrigger` |
| `conn_id=` | `sparkdispatch_conn_id=` |
| `params=` of a vertex task | `vertex_params=` |

The warning is Airflow's `AirflowProviderDeprecationWarning` (a `DeprecationWarning`).
"""

from __future__ import annotations

import warnings
from typing import TypeVar

from airflow.exceptions import AirflowProviderDeprecationWarning

T = TypeVar("T")


def warn_renamed(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn that `old` is deprecated in favour of `new`."""
    warnings.warn(
        f"{old} is deprecated and goes away in the next release: use {new}",
        AirflowProviderDeprecationWarning,
        stacklevel=stacklevel,
    )


def renamed_argument(owner: str, old: str, new: str, new_value: T, old_value: T | None) -> T:
    """The value of argument `new`, or of its deprecated name `old` when that was given (warned)."""
    if old_value is None:
        return new_value
    warn_renamed(f"{owner}({old}=...)", f"{new}=...", stacklevel=4)
    return old_value
