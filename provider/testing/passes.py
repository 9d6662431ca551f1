"""`CountingVertices`: a JobGraph's vertices that count what iterating over them yields, for tests
that check a graph is built or looked up in a few passes, not one per vertex."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


class CountingVertices(tuple):  # type: ignore[type-arg]
    """The vertices of a graph, counting (class-wide, in `yielded`) every one an iteration yields."""

    yielded = 0

    def __iter__(self) -> Iterator[Any]:
        for vertex in tuple.__iter__(self):
            CountingVertices.yielded += 1
            yield vertex
