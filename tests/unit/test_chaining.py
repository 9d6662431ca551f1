"""Which vertices chain into their consumer's task, and which JobGraphs asking for it are refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparkdispatch.errors import InvalidJobGraph
from sparkdispatch.model.chaining import NO_CHAINS, ResultKind, ResultsMode, plan_results
from sparkdispatch.model.job_graph import JobGraph


def vertex(vertex_id: str, *inputs: str, parallelism: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "id": vertex_id,
        "entrypoint": f"m:{vertex_id}",
        "inputs": list(inputs),
        "parallelism": parallelism,
        **extra,
    }


def chained(vertex_id: str, *inputs: str, parallelism: int = 1, **extra: Any) -> dict[str, Any]:
    """A vertex that asks to be chained into its consumer."""
    return vertex(vertex_id, *inputs, parallelism=parallelism, result="chained", **extra)


def graph(*vertices: dict[str, Any], **extra: Any) -> JobGraph:
    return JobGraph.from_dict({"name": "g", "vertices": list(vertices), **extra})


def test_a_line_of_vertices_asking_to_be_chained_is_one_chain_headed_by_its_sink() -> None:
    chains = plan_results(graph(chained("a"), chained("b", "a"), vertex("c", "b")))[0]
    assert chains.members == {"c": ("a", "b")}
    assert chains.head_of == {"a": "c", "b": "c"}
    assert not chains.is_chained("c") and chains.chained_into("c") == ("a", "b")


def test_a_parallel_producer_chains_into_a_single_subtask_consumer() -> None:
    chains = plan_results(graph(chained("a", parallelism=3), vertex("b", "a")))[0]
    assert chains.members == {"b": ("a",)}


def test_a_result_read_by_several_vertices_of_one_task_is_kept_for_it_not_chained() -> None:
    # the P7 sales pipeline's shape: generate -> clean (x2) -> {by_region (x2), by_product} -> report;
    # clean is read by two vertices of report's task: kept, and generate, read by clean's two subtasks, with it
    p7 = (
        vertex("generate"),
        vertex("clean", "generate", parallelism=2),
        vertex("by_region", "clean", parallelism=2),
        vertex("by_product", "clean"),
        vertex("report", "by_region", "by_product"),
    )
    chains, kept = plan_results(graph(*p7))
    assert chains.members == {"report": ("by_region", "by_product")}
    assert kept == ("generate", "clean")
    # a diamond whose consumers are a head and a vertex chained into it
    chains, kept = plan_results(graph(vertex("a"), vertex("b", "a"), vertex("c", "a", "b")))
    assert (chains.members, kept) == ({"c": ("b",)}, ("a",))
    # a vertex read by a kept vertex's task and by the task it is kept for shares that TaskExecutor too
    chains, kept = plan_results(graph(vertex("w"), vertex("x", "w"), vertex("y", "x"), vertex("t", "x", "y", "w")))
    assert (chains.members, kept) == ({"t": ("y",)}, ("w", "x"))


def test_a_result_read_by_several_vertices_is_chained_when_it_asks_to_be() -> None:
    chains, kept = plan_results(graph(chained("a"), vertex("b", "a"), vertex("c", "a", "b")))
    assert (chains.members, kept) == ({"c": ("a", "b")}, ())
    # a kept vertex's producer still chains into it when it alone reads it
    chains, kept = plan_results(graph(vertex("a"), vertex("b", "a"), vertex("c", "b"), vertex("d", "b", "c")))
    assert (chains.members, kept) == ({"b": ("a",), "d": ("c",)}, ("b",))


def test_auto_keeps_no_result_whose_readers_could_run_on_other_taskexecutors() -> None:
    # p's one reader k asks to be kept and has parallelism 4: p could not have chained, so it is durable
    # (k's readers' TaskExecutor is no reason to tie p to it), though k's reader r is one subtask
    assert plan_results(graph(vertex("p"), vertex("k", "p", parallelism=4, result="kept"), vertex("r", "k"))) == (
        NO_CHAINS,
        ("k",),
    )
    # a one-subtask task that asks to be kept is a task like any other: the results several
    # vertices of it read are kept for it
    two_readers = (
        vertex("s"),
        vertex("m", "s"),
        vertex("h", "s", "m", result="kept"),
        vertex("x", "h"),
        vertex("y", "h"),
    )
    chains, kept = plan_results(graph(*two_readers))
    assert (chains.members, kept) == ({"h": ("m",)}, ("s", "h"))
    # read by two tasks (their own), or by a parallel task: durable, so they may spread
    assert plan_results(graph(vertex("a"), vertex("b", "a"), vertex("c", "a"))) == (NO_CHAINS, ())
    assert plan_results(graph(vertex("a"), vertex("b", "a", parallelism=2))) == (NO_CHAINS, ())
    # two readers of one task, but the job or the vertex asks for durable results, or another environment
    diamond = (vertex("b", "a"), vertex("c", "a", "b"))
    assert plan_results(graph(vertex("a"), *diamond, results="durable"))[1] == ()
    assert plan_results(graph(vertex("a", result="durable"), *diamond))[1] == ()
    other: dict[str, Any] = {"environment": {"dependencies": ["tabulate==0.9.0"]}}
    assert plan_results(graph(vertex("a", **other), *diamond))[1] == ()


def test_a_result_read_by_vertices_of_different_tasks_is_durable_naming_them() -> None:
    shared = graph(vertex("a"), vertex("b", "a"), vertex("c", "a"), vertex("d", "b"))
    assert plan_results(shared) == (plan_results(shared)[0], ())
    assert plan_results(shared)[0].head_of == {"b": "d"}
    with pytest.raises(InvalidJobGraph) as refused:
        graph(chained("a"), vertex("b", "a"), vertex("c", "a"), vertex("d", "b"))
    assert refused.value.field_errors == {
        "vertices[0].result": [
            "vertex 'a' cannot be chained into its consumer: 2 vertices read its result ('b', 'c') "
            "in 2 different tasks ('d', 'c''s)"
        ]
    }
    # one task, in another Python environment than a's
    with pytest.raises(InvalidJobGraph) as elsewhere:
        graph(chained("a", environment={"dependencies": ["tabulate==0.9.0"]}), vertex("b", "a"), vertex("c", "a", "b"))
    assert "its consumer 'b' runs in another Python environment" in str(elsewhere.value)


def test_the_master_chains_where_the_rules_allow_unless_a_durable_result_is_asked() -> None:
    line = (vertex("a"), vertex("b", "a"), vertex("c", "b"))
    assert plan_results(graph(*line))[0].members == {"c": ("a", "b")}
    assert plan_results(graph(vertex("a", result="durable"), *line[1:]))[0].members == {"c": ("b",)}
    assert plan_results(graph(*line, results="durable"))[0] is NO_CHAINS
    # two consumers in two tasks, or a consumer of parallelism 2: durable
    assert plan_results(graph(vertex("a"), vertex("b", "a"), vertex("c", "a")))[0] is NO_CHAINS
    assert plan_results(graph(vertex("a"), vertex("b", "a", parallelism=2)))[0] is NO_CHAINS


@pytest.mark.parametrize(
    ("producer", "job", "reason"),
    [
        ({}, {"results": "durable"}, "the job asks for durable results"),
        ({"environment": {"dependencies": ["tabulate==0.9.0"]}}, {}, "runs in another Python environment"),
    ],
    ids=["the-job-asks-for-durable-results", "another-environment"],
)
def test_a_vertex_asking_to_be_chained_is_refused_when(
    producer: dict[str, Any], job: dict[str, Any], reason: str
) -> None:
    with pytest.raises(InvalidJobGraph) as refused:
        graph(chained("a", **producer), vertex("b", "a"), **job)
    assert reason in str(refused.value)


def test_a_graph_without_chains_keeps_its_json_form() -> None:
    plain = graph(vertex("a"), vertex("b"))
    assert plan_results(plain)[0] is NO_CHAINS
    assert "result" not in plain.to_dict()["vertices"][0] and "results" not in plain.to_dict()
    asked = graph(vertex("a", result="durable"), vertex("b", "a"), results="durable")
    assert asked.vertices[0].result is ResultKind.DURABLE and asked.results is ResultsMode.DURABLE
    assert JobGraph.from_dict(asked.to_dict()) == asked


def test_a_vertex_asking_to_be_chained_where_it_cannot_is_refused_naming_why() -> None:
    with pytest.raises(InvalidJobGraph) as refused:
        graph(chained("a"), vertex("b", "a", parallelism=3))
    assert refused.value.field_errors == {
        "vertices[0].result": [
            "vertex 'a' cannot be chained into its consumer: its consumer 'b' has parallelism 3: "
            "each subtask would compute its whole result again"
        ]
    }
    with pytest.raises(InvalidJobGraph) as sink:
        graph(chained("a"))
    assert "no vertex reads its result" in str(sink.value)
    with pytest.raises(InvalidJobGraph) as shared:
        graph(chained("a"), vertex("b", "a"), vertex("c", "a"))
    assert "2 vertices read its result ('b', 'c') in 2 different tasks" in str(shared.value)


def test_an_unknown_result_kind_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidJobGraph) as refused:
        graph(vertex("a", result="in-memory"))
    assert "vertices" in refused.value.field_errors or any("result" in k for k in refused.value.field_errors)


def test_the_chaos_audit_knows_how_the_master_chains_a_chaos_job(tmp_path: Path) -> None:
    from sparkdispatch.testing.chaos import chaos_graph
    from sparkdispatch.testing.chaos_audit import CHAINED_INTO
    from sparkdispatch.testing.chaos_model import JobSpec

    spec = JobSpec(index=0, job_id="ab" * 16, rows=10, sleeps={v: 0.0 for v in ("produce", "transform", "summarize")})
    chains = plan_results(
        JobGraph.from_dict(chaos_graph(spec, artifact="a" * 64, markers=tmp_path, restart_attempts=1))
    )[0]
    assert chains.head_of == CHAINED_INTO
