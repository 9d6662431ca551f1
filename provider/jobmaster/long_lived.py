"""Large graphs kept out of the cyclic garbage collector's way (`gc.freeze`) while they live.

CPython's collector walks every tracked object in a full collection, and starts one whenever
the objects that survived the younger generations grew by a quarter since the last. A
10,000-subtask job keeps about 70,000 such objects alive until it ends, in no reference cycle
(reference counting frees them), so a walk over them finds nothing, yet it stopped the master's
loop for 50-120 ms at a time on a loaded 2-core machine (bench/large_graph.py): longer than
`/overview` may take.

`LongLivedGraphs.build(make, subtasks=n)` builds a graph of `min_subtasks` subtasks or more with
automatic collections paused (all it allocates stays alive), then freezes every object then
alive: later collections walk only what is allocated after it. `keep(make)` does so whatever
the size, for a graph whose size is known only once it is made: the JobGraph parsed from a large
request body, whose parsing alone set off full collections of 60-100 ms on a loaded machine.
Whatever was cyclic garbage or becomes so among the frozen objects waits until the last graph
so built is freed; then the heap is unfrozen and collected as before. So a graph built here must
be in no reference cycle, nor its owner (the JobMaster): frozen, a cycle would never be freed.
Nor can its owner's owners be trusted to be in none (a stopped Dispatcher is, through its cancelled
tasks' tracebacks), so an owner done with its graph says so (`release`): the graph counts as
freed from then on, and once none is left the heap is unfrozen, and whatever cycle still holds the
graph is collected as any other. Smaller graphs are built as they are.

While such a graph lives, what the job allocates as it runs (each finished subtask's progress, its
deployment and slot records: about 7 tracked objects per subtask again) is not frozen, and each
full collection walked all of it: at 100,000 subtasks, 42 of them, the last ones 300-400 ms each.
So the survivors of each full collection are frozen too (a `gc.callbacks` hook): the next one walks
only what was allocated since, and the number of survivors it compares with stays the last full
collection's, so full collections stay as rare as before.
"""

from __future__ import annotations

import gc
import logging
import threading
import weakref
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger(__name__)

G = TypeVar("G")

# About 7 tracked objects per subtask: a smaller graph adds at most an eighth to the ~55,000 of an
# idle master, whose full collections stay short.
MIN_SUBTASKS = 1_000


class LongLivedGraphs:
    """Freezes the heap while large graphs live; thread-safe (gc's state is the process's)."""

    def __init__(self, *, min_subtasks: int = MIN_SUBTASKS) -> None:
        self.min_subtasks = min_subtasks
        self._lock = threading.RLock()  # `_freed` may run wherever a graph's last reference goes
        self._alive = 0  # graphs built here and not freed yet
        self._building = 0  # builds running now, with automatic collection paused
        self._collecting = True  # whether automatic collection was on before them
        self._hooked = False  # `_freeze_survivors` is in gc.callbacks
        self._finalizers: dict[int, weakref.finalize[[int], object]] = {}  # by the id of each graph alive

    @property
    def alive(self) -> int:
        """How many graphs built here are not freed yet (the heap is frozen while there is one)."""
        return self._alive

    def build(self, make: Callable[[], G], *, subtasks: int) -> G:
        """`make()`; for `min_subtasks` subtasks or more, with collection paused, then frozen until it is freed."""
        if subtasks < self.min_subtasks:
            return make()
        return self.keep(make)

    def keep(self, make: Callable[[], G]) -> G:
        """`make()` with collection paused, then frozen until it is freed, whatever its size."""
        with self._lock:
            if self._building == 0:
                self._collecting = gc.isenabled()  # restored when the last build running ends
                gc.disable()
            self._building += 1
        try:
            graph = make()
            with self._lock:
                gc.freeze()  # before collections resume, or the first would walk all the graph
                self._alive += 1
                if not self._hooked:
                    gc.callbacks.append(self._freeze_survivors)
                    self._hooked = True
        finally:
            with self._lock:
                self._building -= 1
                if self._building == 0 and self._collecting:
                    gc.enable()
        finalizer: weakref.finalize[[int], object] = weakref.finalize(graph, self._freed, id(graph))
        finalizer.atexit = False
        with self._lock:
            self._finalizers[id(graph)] = finalizer
        log.info(
            "a large %s is built: the heap is frozen out of the garbage collector's walks until it is freed",
            type(graph).__name__,
        )
        return graph

    def release(self, graph: object) -> None:
        """Its owner is done with `graph`: it counts as freed now, whatever may still refer to it.

        Nothing for a graph not built here, or already released."""
        with self._lock:
            finalizer = self._finalizers.get(id(graph))
        if finalizer is not None and (found := finalizer.peek()) is not None and found[0] is graph:
            finalizer()  # runs `_freed` once: the graph's end, when it comes, changes nothing more

    def _freed(self, key: int) -> None:
        with self._lock:
            del self._finalizers[key]
            self._alive -= 1
            if self._alive == 0:
                if self._hooked:
                    gc.callbacks.remove(self._freeze_survivors)
                    self._hooked = False
                gc.unfreeze()

    def _freeze_survivors(self, phase: str, info: dict[str, int]) -> None:
        """After a full collection while a graph lives, freeze what survived it."""
        if phase != "stop" or info["generation"] != 2:
            return
        # Never wait here: a collection may start in any thread, also one holding the lock. Missed
        # now, the survivors are frozen after the next full collection.
        if not self._lock.acquire(blocking=False):
            return
        try:
            if self._alive > 0:
                gc.freeze()
        finally:
            self._lock.release()


LONG_LIVED_GRAPHS = LongLivedGraphs()
"""The process's: its JobMasters build their ExecutionGraphs through it."""
