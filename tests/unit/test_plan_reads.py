"""What a Spark Connect plan reads, told from its protobuf without a server (`plan_reads`)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, cast

import pytest
from pyspark.sql.connect.proto import base_pb2 as pb
from pyspark.sql.connect.proto import expressions_pb2 as ex
from pyspark.sql.connect.proto import relations_pb2 as rel

from sparkdispatch.taskexecutor.plan_reads import plan_reads_only_under
from sparkdispatch.taskexecutor.slot_process import _input_datasets

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

RESULTS = "/data/results/job-1"


def parquet(*paths: str, **options: str) -> rel.Relation:
    source = rel.Read.DataSource(format="parquet", paths=list(paths), options=options)
    return rel.Relation(read=rel.Read(data_source=source))


def joined(left: rel.Relation, right: rel.Relation) -> rel.Relation:
    return rel.Relation(join=rel.Join(left=left, right=right))


def test_a_plan_over_the_jobs_results_range_and_local_data_reads_only_them() -> None:
    own = parquet(f"{RESULTS}/a/0-x", f"file://{RESULTS}/b/0-y")
    local = rel.Relation(local_relation=rel.LocalRelation(schema="id long"))
    counted = rel.Relation(aggregate=rel.Aggregate(input=joined(own, rel.Relation(range=rel.Range(end=10)))))
    assert plan_reads_only_under(rel.Relation(set_op=rel.SetOperation(left_input=counted, right_input=local)), RESULTS)


@pytest.mark.parametrize(
    "source",
    [
        parquet("/data/sources/orders"),
        parquet(f"{RESULTS}/../sources/orders"),
        parquet(f"{RESULTS}-other/a/0-x"),
        parquet("results/job-1/a/0-x"),
        parquet(),
        parquet(f"{RESULTS}/a/0-x", path="/data/sources/orders"),
        rel.Relation(read=rel.Read(named_table=rel.Read.NamedTable(unparsed_identifier="orders"))),
        rel.Relation(sql=rel.SQL(query="SELECT * FROM orders")),
        rel.Relation(cached_remote_relation=rel.CachedRemoteRelation(relation_id="r1")),
    ],
    ids=["source", "dot-dot", "prefix", "relative", "no-path", "path-option", "table", "sql", "cached-remote"],
)
def test_any_other_source_anywhere_in_the_plan_means_the_server_is_asked(source: rel.Relation) -> None:
    deep = rel.Relation(filter=rel.Filter(input=joined(parquet(f"{RESULTS}/a/0-x"), source)))
    assert not plan_reads_only_under(deep, RESULTS)


def test_sql_text_in_an_expression_means_the_server_is_asked() -> None:
    condition = ex.Expression(expression_string=ex.Expression.ExpressionString(expression="id IN (SELECT id FROM t)"))
    plan = rel.Relation(filter=rel.Filter(input=parquet(f"{RESULTS}/a/0-x"), condition=condition))
    assert not plan_reads_only_under(plan, RESULTS)


def test_a_relative_results_directory_is_never_taken_as_read_only() -> None:
    assert not plan_reads_only_under(parquet("results/a/0-x"), "results")


class FakeFrame:
    """What `_input_datasets` uses of a Connect DataFrame: its plan's protobuf and `inputFiles()`,
    which counts the analyze calls it would make."""

    def __init__(self, root: rel.Relation, files: list[str]) -> None:
        self._plan = SimpleNamespace(to_proto=lambda client: pb.Plan(root=root))
        self._session = SimpleNamespace(client=None)
        self.files = files
        self.analyze_calls = 0

    def inputFiles(self) -> list[str]:
        self.analyze_calls += 1
        return self.files


def test_a_task_reading_only_the_jobs_results_asks_the_server_nothing_for_its_lineage() -> None:
    frame = FakeFrame(parquet(f"{RESULTS}/a/0-x"), [f"file:{RESULTS}/a/0-x/part-0.parquet"])
    assert _input_datasets(cast("DataFrame", frame), f"{RESULTS}/b/0-y") == ()
    assert frame.analyze_calls == 0


def test_a_task_reading_a_source_still_names_it_from_the_servers_answer() -> None:
    root = joined(parquet(f"{RESULTS}/a/0-x"), parquet("/data/sources/orders"))
    files = [f"file:{RESULTS}/a/0-x/part-0.parquet", "file:/data/sources/orders/region=eu/part-0.parquet"]
    frame = FakeFrame(root, files)
    assert _input_datasets(cast("DataFrame", frame), f"{RESULTS}/b/0-y") == ("file:///data/sources/orders",)
    assert frame.analyze_calls == 1
