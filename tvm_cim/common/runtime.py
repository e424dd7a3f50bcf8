"""Runtime plumbing both simulators share: statistics collectors and one simulator per device."""

from __future__ import annotations

import contextlib
import gc
import threading

from . import hardware


class Collectors:
    """The lists that receive the statistics of every run inside a ``with collect()`` block."""

    def __init__(self):
        self._lists: list[list] = []

    @contextlib.contextmanager
    def collect(self):
        stats: list = []
        self._lists.append(stats)
        try:
            yield stats
        finally:
            self._lists.remove(stats)

    def publish(self, item) -> None:
        for c in self._lists:
            c.append(item)

    def __bool__(self) -> bool:
        return bool(self._lists)


class PerDevice:
    """One simulator object per hardware description (its JSON text), created on first use."""

    def __init__(self, factory):
        self._make = factory
        self._objs: dict = {}
        self._lock = threading.Lock()

    def get(self, hw_json: str):
        with self._lock:
            obj = self._objs.get(hw_json)
            if obj is None:
                obj = self._objs[hw_json] = self._make(hardware.from_json(hw_json))
            return obj

    def clear(self) -> None:
        with self._lock:
            self._objs.clear()


@contextlib.contextmanager
def gc_paused():
    """Pause Python's cyclic garbage collector inside the block (reference counting still frees everything else).

    Compiler passes and simulations allocate millions of small acyclic objects
    (meta-operators, their argument tuples, events); each allocation burst
    triggers collections that scan every live object, which on a large model
    cost more than the work itself (VGG-19: code generation 9.9 s CPU with the
    collector, 3.4 s without).  Cycles made inside the block are collected
    after it, at the collector's next turn.  Nesting is safe; the collector's
    state before the block is restored.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
