"""LongLivedGraphs: a large graph is built with collection paused, frozen while it lives, unfrozen once freed."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Iterator

import pytest

from sparkdispatch.jobmaster.long_lived import LongLivedGraphs


class Graph:
    """Stands for an ExecutionGraph: some tracked objects, freed by reference counting."""

    def __init__(self) -> None:
        self.parts = [[index] for index in range(100)]


def tracked(thing: object) -> bool:
    """Whether the collector walks `thing` (frozen objects are in no generation)."""
    return any(candidate is thing for candidate in gc.get_objects())


@pytest.fixture(autouse=True)
def nothing_frozen_after() -> Iterator[None]:
    collecting = gc.isenabled()
    yield
    gc.unfreeze()  # a failed test must not leave the rest of the session frozen
    if collecting:
        gc.enable()


def test_a_small_graph_is_built_as_it_is() -> None:
    graphs = LongLivedGraphs(min_subtasks=1_000)
    graph = graphs.build(Graph, subtasks=999)
    assert tracked(graph) and graphs.alive == 0 and gc.get_freeze_count() == 0


# a graph of `min_subtasks` or more, and one of a size known only once it is made (`keep`): any size
KEPT: dict[str, Callable[[LongLivedGraphs, Callable[[], Graph]], Graph]] = {
    "large": lambda graphs, make: graphs.build(make, subtasks=1_000),
    "kept whatever its size": lambda graphs, make: graphs.keep(make),
}


@pytest.mark.parametrize("keep", KEPT.values(), ids=KEPT.keys())
def test_a_large_graph_is_built_without_collections_and_frozen_until_freed(
    keep: Callable[[LongLivedGraphs, Callable[[], Graph]], Graph],
) -> None:
    graphs = LongLivedGraphs(min_subtasks=1_000)
    collecting_during_build: list[bool] = []

    def make() -> Graph:
        collecting_during_build.append(gc.isenabled())
        return Graph()

    graph = keep(graphs, make)
    assert collecting_during_build == [False] and gc.isenabled()
    assert not tracked(graph) and not tracked(graph.parts) and graphs.alive == 1
    assert gc.get_freeze_count() > 0
    later = [object()]
    assert tracked(later)  # what is allocated afterwards is collected as usual
    del graph
    assert graphs.alive == 0 and gc.get_freeze_count() == 0


def test_the_heap_stays_frozen_until_the_last_large_graph_is_freed() -> None:
    graphs = LongLivedGraphs(min_subtasks=1)
    first = graphs.build(Graph, subtasks=1)
    second = graphs.build(Graph, subtasks=1)
    del first
    assert graphs.alive == 1 and not tracked(second)
    del second
    assert graphs.alive == 0 and gc.get_freeze_count() == 0


def test_a_failed_build_freezes_nothing_and_collection_resumes() -> None:
    graphs = LongLivedGraphs(min_subtasks=1)

    def make() -> Graph:
        raise ValueError("bad graph")

    with pytest.raises(ValueError, match="bad graph"):
        graphs.build(make, subtasks=10)
    assert gc.isenabled() and graphs.alive == 0 and gc.get_freeze_count() == 0


def test_collection_left_off_by_the_caller_stays_off() -> None:
    graphs = LongLivedGraphs(min_subtasks=1)
    gc.disable()
    graph = graphs.build(Graph, subtasks=10)
    assert not gc.isenabled()
    del graph
    assert gc.get_freeze_count() == 0


def test_what_survives_a_full_collection_while_a_graph_lives_is_frozen_too() -> None:
    graphs = LongLivedGraphs(min_subtasks=1)
    graph = graphs.build(Graph, subtasks=1)
    progress = [[index] for index in range(100)]  # allocated as the job runs
    assert tracked(progress)
    gc.collect(1)  # a younger generation's collection leaves it to the collector
    assert tracked(progress)
    gc.collect()
    assert not tracked(progress) and not tracked(graph)
    del graph
    assert graphs.alive == 0 and gc.get_freeze_count() == 0 and tracked(progress)
    gc.collect()
    assert tracked(progress)  # no graph lives: a full collection freezes nothing


class Owner:
    """Stands for a Dispatcher that holds its jobs' graphs, in a reference cycle of its own."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.me = self


def test_a_released_graph_counts_as_freed_and_a_cycle_frozen_with_it_is_collected_once_unfrozen() -> None:
    graphs = LongLivedGraphs(min_subtasks=1)
    graph = graphs.build(Graph, subtasks=1)
    owner = Owner(graph)
    gc.collect()  # the owner survives a full collection while the graph lives: frozen with it
    assert not tracked(owner)
    freed = weakref.ref(graph)
    del graph, owner
    gc.collect()
    assert freed() is not None and graphs.alive == 1  # frozen, its cycle is never walked
    graphs.release(freed())
    assert graphs.alive == 0 and gc.get_freeze_count() == 0
    gc.collect()
    assert freed() is None and graphs.alive == 0  # its end changes nothing more


def test_releasing_twice_or_what_was_not_built_here_changes_nothing() -> None:
    graphs = LongLivedGraphs(min_subtasks=1)
    first = graphs.build(Graph, subtasks=1)
    second = graphs.build(Graph, subtasks=1)
    graphs.release(first)
    graphs.release(first)
    graphs.release(Graph())
    assert graphs.alive == 1 and not tracked(second)
    del first
    assert graphs.alive == 1
    del second
    assert graphs.alive == 0 and gc.get_freeze_count() == 0
