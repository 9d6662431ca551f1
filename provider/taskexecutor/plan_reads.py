"""Whether a Spark Connect plan reads nothing but given directories, told from the plan itself.

A task's lineage lists the datasets its DataFrame read besides the job's own results, which costs
an analysis of the whole plan on the server (`DataFrame.inputFiles()`: analysed, optimised and its
files listed). A vertex that reads only its inputs — every chained or downstream vertex — would
pay it for an empty answer. Its plan (the protobuf the client sends) says so without a call: its
only sources are Parquet reads of paths under the job's results directory, `range` and local data.
Anything else (a table, SQL text, a path given as an option, a server-side cached relation, a
relation this module does not know) answers False, and the caller asks the server as before.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TypeAlias
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: A protobuf message of pyspark's Connect protos (protobuf ships no type stubs in this environment).
Message: TypeAlias = Any

#: Relations that read no data of their own: operators over their children, and local data.
_READ_FREE = frozenset(
    {
        "project", "filter", "join", "set_op", "sort", "limit", "aggregate", "sample", "offset",
        "deduplicate", "subquery_alias", "repartition", "to_df", "with_columns_renamed", "drop", "tail",
        "with_columns", "hint", "unpivot", "to_schema", "repartition_by_expression", "collect_metrics",
        "with_watermark", "as_of_join", "with_relations", "transpose", "lateral_join", "fill_na", "drop_na",
        "replace", "sample_by", "range", "local_relation", "cached_local_relation",
        "chunked_cached_local_relation",
    }
)  # fmt: skip


def reads_only_under(frame: DataFrame, directory: str, *more: str) -> bool:
    """Whether every source of `frame`'s plan is local data or a file read of paths under
    `directory` or one of `more` (absolute paths or URIs); False when it cannot tell (not a
    Connect DataFrame)."""
    plan = getattr(frame, "_plan", None)
    session = getattr(frame, "_session", None)
    if plan is None or session is None:
        return False
    return plan_reads_only_under(plan.to_proto(session.client), directory, *more)


def plan_reads_only_under(plan: Message, directory: str, *more: str) -> bool:
    """`reads_only_under` of a plan's protobuf (`spark.connect.Plan` or any message within one)."""
    absolute = [_absolute(given) for given in (directory, *more)]
    if any(path is None for path in absolute):
        return False
    root = tuple(path.rstrip("/") + "/" for path in absolute if path is not None)
    for message in _messages(plan):
        kind = message.DESCRIPTOR.full_name
        if kind == "spark.connect.Relation":
            rel_type = message.WhichOneof("rel_type")
            if rel_type == "read":
                if not _reads_under(message.read, root):
                    return False
            elif rel_type not in _READ_FREE:
                return False
        elif kind == "spark.connect.Expression" and message.WhichOneof("expr_type") == "expression_string":
            return False  # SQL text may hold a subquery over a table
    return True


def _reads_under(read: Message, root: tuple[str, ...]) -> bool:
    if read.WhichOneof("read_type") != "data_source":
        return False  # a table
    source = read.data_source
    if not source.paths or any(key.lower() in ("path", "paths") for key in source.options):
        return False
    return all((path := _absolute(given)) is not None and path.startswith(root) for given in source.paths)


def _messages(message: Message) -> Iterator[Message]:
    """`message` and every message within it, depth first."""
    stack = [message]
    while stack:
        current = stack.pop()
        yield current
        for field, value in current.ListFields():
            if field.type != field.TYPE_MESSAGE:
                continue
            if field.is_repeated:
                if field.message_type.GetOptions().map_entry:
                    stack.extend(entry for entry in value.values() if hasattr(entry, "ListFields"))
                else:
                    stack.extend(value)
            else:
                stack.append(value)


def _absolute(location: str) -> str | None:
    """`location` as `scheme://host/path` (a bare path is a `file` one), None when it is relative."""
    parts = urlsplit(location)
    scheme = parts.scheme.lower() or "file"
    if not parts.path.startswith("/"):
        return None
    netloc = "" if scheme == "file" else parts.netloc
    return f"{scheme}://{netloc}{posixpath.normpath(parts.path)}"
