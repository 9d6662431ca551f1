"""The job model: validation that names the field, exact JSON round trips, lifecycles."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkdispatch.config import Configuration
from sparkdispatch.jobmaster.settings import restart_strategy_from_config
from sparkdispatch.errors import IllegalStateTransition, InvalidJobGraph
from sparkdispatch.model.states import ExecutionState, JobStatus
from sparkdispatch.model.restart import ExponentialDelayRestart, FailureRateRestart, FixedDelayRestart, NoRestart
from sparkdispatch.model.job_graph import JobGraph, JobVertex
from sparkdispatch.model.job_result import Failure, JobResult
from sparkdispatch.testing.passes import CountingVertices


def graph(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "nightly-sales",
        "vertices": [
            {"id": "extract", "entrypoint": "pipelines.sales:extract"},
            {"id": "clean", "entrypoint": "pipelines.sales:clean", "parallelism": 2, "inputs": ["extract"]},
        ],
    }
    body.update(overrides)
    return body


def refusal(body: Any) -> dict[str, list[str]]:
    with pytest.raises(InvalidJobGraph) as info:
        JobGraph.from_dict(body)
    return info.value.field_errors


def test_defaults_of_a_vertex() -> None:
    job = JobGraph.from_dict(graph())
    assert job.vertex("extract").parallelism == 1
    assert job.vertex("extract").inputs == ()
    assert job.vertex("extract").params == {}
    assert job.job_id is None and job.restart_strategy is None
    assert job.topological_order() == ["extract", "clean"]
    assert job.consumers("extract") == ["clean"]


def test_a_cycle_is_refused_naming_its_vertices() -> None:
    errors = refusal(
        graph(
            vertices=[
                {"id": "a", "entrypoint": "m:f", "inputs": ["c"]},
                {"id": "b", "entrypoint": "m:f", "inputs": ["a"]},
                {"id": "c", "entrypoint": "m:f", "inputs": ["b"]},
                {"id": "d", "entrypoint": "m:f"},
            ]
        )
    )
    message = errors["vertices"][0]
    assert "cycle" in message
    for name in ("a", "b", "c"):
        assert name in message
    assert "d" not in message.replace("graph has", "")


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        (graph(colour="red"), "colour", "unknown field"),
        ({"vertices": graph()["vertices"]}, "name", "missing"),
        (graph(vertices=[]), "vertices", "1 to"),
        (
            graph(vertices=[{"id": "a", "entrypoint": "m:f"}, {"id": "a", "entrypoint": "m:g"}]),
            "vertices[1].id",
            "duplicate",
        ),
        (graph(vertices=[{"id": "a", "entrypoint": "m:f", "inputs": ["ghost"]}]), "vertices[0].inputs", "ghost"),
        (graph(vertices=[{"id": "a", "entrypoint": "m:f", "inputs": ["a"]}]), "vertices[0].inputs", "itself"),
        (graph(vertices=[{"id": "a", "entrypoint": "m:f", "parallelism": 0}]), "vertices[0].parallelism", "between"),
        (graph(vertices=[{"id": "a", "entrypoint": "m:f", "parallelism": "2"}]), "vertices[0].parallelism", "integer"),
        (graph(vertices=[{"id": "a", "entrypoint": "not an entrypoint"}]), "vertices[0].entrypoint", "module.path"),
        (graph(vertices=[{"id": "a", "entrypoint": "m.f"}]), "vertices[0].entrypoint", "module.path"),
        (graph(vertices=[{"id": "../etc", "entrypoint": "m:f"}]), "vertices[0].id", "letters"),
        (graph(vertices=[{"id": "a"}]), "vertices[0].entrypoint", "missing"),
        (graph(job_id="xyz"), "job_id", "32"),
        (graph(job_id="A" * 31), "job_id", "32"),
        (graph(artifacts=["not-a-key"]), "artifacts[0]", "blob key"),
        (graph(restart_strategy={"type": "sometimes"}), "restart_strategy.type", "fixed-delay"),
        (graph(restart_strategy={"type": "fixed-delay", "attempts": -1}), "restart_strategy.attempts", ">= 0"),
        (graph(restart_strategy={"type": "fixed-delay", "tries": 3}), "restart_strategy.tries", "unknown"),
        (graph(restart_strategy={"type": {}}), "restart_strategy.type", "got a JSON object"),
        (graph(restart_strategy={"type": ["none"]}), "restart_strategy.type", "got a JSON array"),
        (graph(restart_strategy={"type": None}), "restart_strategy.type", "got None"),
        (graph(restart_strategy={"type": "fixed-delay", "delay_s": "1"}), "restart_strategy.delay_s", "number"),
        (graph(restart_strategy={"type": "failure-rate", "delay_s": True}), "restart_strategy.delay_s", "number"),
        (
            graph(restart_strategy={"type": "exponential-delay", "jitter_factor": {}}),
            "restart_strategy.jitter_factor",
            "number",
        ),
        (graph(config={"spark.sql.x": {"nested": 1}}), "config.spark.sql.x", "string"),
        (
            graph(vertices=[{"id": "a", "entrypoint": "m:f", "params": {"p": json.loads("[" * 64 + "]" * 64)}}]),
            "vertices[0].params",
            "deeper than 64",
        ),
        (graph(config={"spark.executor.memory": "2g"}), "config.spark.executor.memory", "static Spark setting"),
        (graph(config={"spark.sql.warehouse.dir": "/w"}), "config.spark.sql.warehouse.dir", "static Spark setting"),
    ],
)
def test_malformed_graphs_are_refused_naming_the_field(body: Any, field: str, words: str) -> None:
    errors = refusal(body)
    assert field in errors, errors
    assert any(words in reason for reason in errors[field]), errors


def test_not_an_object_and_not_json() -> None:
    assert "body" in refusal([1, 2])
    with pytest.raises(InvalidJobGraph, match="not valid JSON"):
        JobGraph.from_json(b"{nope")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (b'{"name": "x", "vertices": [{"id": "a", "entrypoint": "m:f", "params": {"p": NaN}}]}', "NaN is not"),
        (
            b'{"name": "x", "vertices": [], "restart_strategy": {"type": "fixed-delay", "delay_s": Infinity}}',
            "Infinity is not",
        ),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        ('{"name": "\udc00"}'.encode("utf-8", "surrogatepass"), "not valid JSON"),
    ],
)
def test_what_is_not_strict_json_is_refused_as_the_body(text: bytes, words: str) -> None:
    with pytest.raises(InvalidJobGraph) as info:
        JobGraph.from_json(text)
    assert list(info.value.field_errors) == ["body"]
    assert words in info.value.field_errors["body"][0]


def test_too_many_vertices_are_refused_before_any_vertex_is_read() -> None:
    errors = refusal(graph(vertices=[{"no": "vertex"}] * 10_001))
    assert errors == {"vertices": ["a job needs 1 to 10000 vertices, got 10001"]}


def test_the_canonical_json_and_fingerprint_are_those_of_the_whole_dict() -> None:
    job = JobGraph.from_dict(
        graph(restart_strategy={"type": "fixed-delay"}, config={"spark.sql.x": 1}, artifacts=["a" * 64])
    )
    for graph_ in (job, job.with_job_id("ab" * 16), job.with_job_id("ab" * 16).prepare()):
        whole = graph_.to_dict()
        assert graph_.to_json() == json.dumps(whole, sort_keys=True, separators=(",", ":"))
        whole.pop("job_id")
        canonical = json.dumps(whole, sort_keys=True, separators=(",", ":")).encode()
        assert graph_.fingerprint() == hashlib.sha256(canonical).hexdigest()
    assert job.with_job_id("ab" * 16).fingerprint() == job.fingerprint()


def test_lookups_by_vertex_id_take_one_pass_over_the_vertices() -> None:
    count = 3_000
    vertices = CountingVertices(JobVertex(f"v{i}", "m:f", 1, (f"v{i - 1}",) if i else ()) for i in range(count))
    job = JobGraph(name="long", vertices=vertices, job_id="ab" * 16)
    CountingVertices.yielded = 0
    assert [job.vertex(f"v{i}").id for i in range(count)] == [f"v{i}" for i in range(count)]
    assert [job.consumers(f"v{i}") for i in range(count - 1)] == [[f"v{i + 1}"] for i in range(count - 1)]
    assert job.topological_order() == [f"v{i}" for i in range(count)]
    # once per index and once for the order; a scan per lookup would be ~1.5 * count**2 = 13.5 million
    assert CountingVertices.yielded <= 3 * count


def test_restart_strategies_parse_with_flink_defaults() -> None:
    cases = {
        "none": NoRestart(),
        "fixed-delay": FixedDelayRestart(attempts=3, delay_s=1.0),
        "exponential-delay": ExponentialDelayRestart(),
        "failure-rate": FailureRateRestart(),
    }
    for kind, expected in cases.items():
        assert JobGraph.from_dict(graph(restart_strategy={"type": kind})).restart_strategy == expected


def test_restart_strategy_from_configuration() -> None:
    config = Configuration.from_mapping(
        {
            "restart-strategy.type": "failure-rate",
            "restart-strategy.failure-rate.max-failures-per-interval": 3,
            "restart-strategy.failure-rate.failure-rate-interval": "2min",
        }
    )
    assert restart_strategy_from_config(config) == FailureRateRestart(3, 120.0, 1.0)
    assert restart_strategy_from_config(Configuration.from_mapping({})) == FixedDelayRestart(3, 1.0)


def test_spark_config_values_are_kept_as_strings() -> None:
    job = JobGraph.from_dict(graph(config={"spark.sql.shuffle.partitions": 8, "spark.sql.x.enabled": True}))
    assert job.config == {"spark.sql.shuffle.partitions": "8", "spark.sql.x.enabled": "true"}


def test_settings_spark_will_not_change_at_run_time_are_refused_each_by_name() -> None:
    errors = refusal(
        graph(
            config={
                "spark.executor.memory": "2g",  # core: CANNOT_MODIFY_CONFIG
                "spark.master": "yarn",  # accepted by Spark, without effect on a running driver
                "spark.sql.catalogImplementation": "hive",  # static SQL: CANNOT_MODIFY_STATIC_CONFIG
                "spark.sql.hive.metastore.version": "2.3.10",  # static, from HiveUtils
                "spark.sql.shuffle.partitions": "4",
                "spark.hadoop.fs.s3a.endpoint": "http://s3",
                "my.key": "v",
            }
        )
    )
    assert set(errors) == {
        "config.spark.executor.memory",
        "config.spark.master",
        "config.spark.sql.catalogImplementation",
        "config.spark.sql.hive.metastore.version",
    }
    assert errors["config.spark.master"] == [
        "spark.master is a static Spark setting: set it on the TaskExecutor's Spark (spark.* in its configuration), "
        "not per job"
    ]
    accepted = {
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.hive.convertMetastoreParquet": "false",
        "spark.hadoop.fs.s3a.endpoint": "http://s3",
        "my.key": "v",
    }
    assert JobGraph.from_dict(graph(config=accepted)).config == accepted


def test_fingerprint_ignores_the_job_id_only() -> None:
    a = JobGraph.from_dict(graph())
    assert a.fingerprint() == a.with_job_id("0" * 32).fingerprint()
    assert a.fingerprint() != JobGraph.from_dict(graph(name="other")).fingerprint()


# -- property-based: round trips and refusals -----------------------------------------------

identifiers = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)
json_scalars = st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=10)


@st.composite
def job_graphs(draw: st.DrawFn) -> dict[str, Any]:
    ids = draw(st.lists(identifiers, min_size=1, max_size=8, unique=True))
    vertices = []
    for index, vertex_id in enumerate(ids):
        inputs = draw(st.lists(st.sampled_from(ids[:index]), unique=True, max_size=3)) if index else []
        vertex: dict[str, Any] = {
            "id": vertex_id,
            "entrypoint": f"{draw(identifiers)}.{draw(identifiers)}:{draw(identifiers)}",
            "parallelism": draw(st.integers(1, 16)),
            "inputs": inputs,
            "params": draw(st.dictionaries(identifiers, json_scalars, max_size=3)),
        }
        vertices.append(vertex)
    body: dict[str, Any] = {
        "job_id": draw(st.none() | st.from_regex(r"[0-9a-f]{32}", fullmatch=True)),
        "name": draw(st.text(min_size=1, max_size=20)),
        "vertices": draw(st.permutations(vertices)),
        "artifacts": draw(st.lists(st.from_regex(r"[0-9a-f]{64}", fullmatch=True), max_size=2)),
        "restart_strategy": draw(
            st.sampled_from(
                [
                    None,
                    {"type": "none"},
                    {"type": "fixed-delay", "attempts": 2, "delay_s": 0.5},
                    {
                        "type": "exponential-delay",
                        "initial_backoff_s": 1.0,
                        "max_backoff_s": 60.0,
                        "backoff_multiplier": 2.0,
                        "reset_backoff_threshold_s": 3600.0,
                        "jitter_factor": 0.1,
                        "attempts": 5,
                    },
                    {
                        "type": "failure-rate",
                        "max_failures_per_interval": 2,
                        "failure_rate_interval_s": 60.0,
                        "delay_s": 1.0,
                    },
                ]
            )
        ),
        "config": draw(
            st.dictionaries(st.from_regex(r"spark\.sql\.x[a-z.]{0,9}", fullmatch=True), st.text(max_size=5), max_size=3)
        ),
    }
    return body


@settings(max_examples=150, deadline=None)
@given(job_graphs())
def test_json_round_trip_is_exact(body: dict[str, Any]) -> None:
    job = JobGraph.from_dict(body)
    assert job.to_dict() == body
    assert JobGraph.from_json(job.to_json()) == job
    assert json.loads(job.to_json()) == body


@settings(max_examples=100, deadline=None)
@given(job_graphs(), st.data())
def test_a_back_edge_always_makes_a_refused_cycle(body: dict[str, Any], data: st.DataObject) -> None:
    edges = [(v["id"], i) for v in body["vertices"] for i in v["inputs"]]
    if not edges:
        return
    consumer, producer = data.draw(st.sampled_from(edges))
    for vertex in body["vertices"]:
        if vertex["id"] == producer:
            vertex["inputs"] = [*vertex["inputs"], consumer]
    errors = refusal(body)
    assert "cycle" in " ".join(errors.get("vertices", [])), errors


@settings(max_examples=100, deadline=None)
@given(job_graphs(), st.sampled_from(["parallelism", "entrypoint", "id", "inputs", "extra"]), st.data())
def test_any_single_corruption_is_refused(body: dict[str, Any], what: str, data: st.DataObject) -> None:
    vertex = data.draw(st.sampled_from(body["vertices"]))
    if what == "parallelism":
        vertex["parallelism"] = data.draw(st.integers(-5, 0))
    elif what == "entrypoint":
        vertex["entrypoint"] = data.draw(st.sampled_from(["", "mod", "mod:", ":f", "a b:c", "1mod:f", "m:f:g"]))
    elif what == "id":
        vertex["id"] = data.draw(st.sampled_from(["", "-x", ".x", "a/b", "x" * 200]))
    elif what == "inputs":
        vertex["inputs"] = [*vertex["inputs"], "no-such-vertex"]
    else:
        vertex["colour"] = "red"
    refusal(body)


# -- lifecycles -------------------------------------------------------------------------------


def test_execution_lifecycle_follows_flink() -> None:
    state = ExecutionState.CREATED
    for target in (
        ExecutionState.SCHEDULED,
        ExecutionState.DEPLOYING,
        ExecutionState.INITIALIZING,
        ExecutionState.RUNNING,
        ExecutionState.FINISHED,
    ):
        state = state.transition(target)
    assert state.is_terminal
    with pytest.raises(IllegalStateTransition, match="FINISHED to RUNNING"):
        state.transition(ExecutionState.RUNNING)
    for state in ExecutionState:
        if not state.is_terminal:
            assert state.can_become(ExecutionState.FAILED)
    assert not ExecutionState.CREATED.can_become(ExecutionState.RUNNING)


def test_job_lifecycle_follows_flink() -> None:
    status = JobStatus.INITIALIZING.transition(JobStatus.CREATED).transition(JobStatus.RUNNING)
    status = status.transition(JobStatus.RESTARTING).transition(JobStatus.RUNNING).transition(JobStatus.FINISHED)
    assert status.is_globally_terminal
    with pytest.raises(IllegalStateTransition):
        JobStatus.CANCELED.transition(JobStatus.RUNNING)
    assert JobStatus.SUSPENDED.is_terminal and not JobStatus.SUSPENDED.is_globally_terminal
    assert not JobStatus.FINISHED.can_become(JobStatus.SUSPENDED)


# -- JobResult -------------------------------------------------------------------------------


def test_job_result_round_trip_and_shape() -> None:
    try:
        raise ValueError("bad row")
    except ValueError as exc:
        failure = Failure.from_exception(exc)
    body = {
        "job_id": "ab" * 16,
        "name": "n",
        "status": "FAILED",
        "start_time": 1000,
        "end_time": 5200,
        "duration_ms": 4200,
        "vertices": {
            "extract": {"state": "FINISHED", "attempts": 1, "rows": 1000, "result_path": "/r/extract"},
            "clean": {"state": "FAILED", "attempts": 3, "failure": failure.to_dict()},
        },
        "failure": failure.to_dict(),
    }
    result = JobResult.from_dict(body)
    assert result.duration_ms == 4200
    assert result.to_dict() == body
    assert failure.to_dict()["class"] == "ValueError" and "bad row" in failure.to_dict()["traceback"]


def test_job_result_refuses_a_wrong_duration_and_a_running_status() -> None:
    body = {"job_id": "ab" * 16, "name": "n", "status": "FINISHED", "start_time": 0, "end_time": 10}
    with pytest.raises(InvalidJobGraph, match="duration_ms"):
        JobResult.from_dict({**body, "duration_ms": 3})
    with pytest.raises(InvalidJobGraph, match="status"):
        JobResult.from_dict({**body, "status": "RUNNING"})
