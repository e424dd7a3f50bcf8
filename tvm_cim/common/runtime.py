"""Runtime plumbing both simulators share: statistics collectors and one simulator per device."""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from concurrent.futures import ThreadPoolExecutor

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


@contextlib.contextmanager
def compiled_heap():
    """Inside the block, what exists when :func:`settle` is called is left out of garbage collections.

    Compilation runs with the collector paused (:func:`gc_paused`) and leaves millions of long-lived objects (the
    programs' operations); the first collection after it scanned all of them -- on VGG-19 about 1.7 s, charged
    to whatever ran next (the simulation).  :func:`settle` collects once and freezes the survivors
    (:func:`gc.freeze`); leaving the block unfreezes them, so a process that runs many models keeps
    collecting what it no longer holds.
    """
    try:
        yield
    finally:
        gc.unfreeze()


def settle() -> None:
    """Collect garbage once and leave what survives out of later collections (:func:`compiled_heap`)."""
    gc.collect()
    gc.freeze()


def workers_default() -> int:
    """Parallel workers by default: ``$TVM_CIM_WORKERS``, else every CPU of the machine.

    The MIREDO layer solves use this many processes, and the numerics of the
    simulator and of the compiler's error measurement this many threads.

    Raises
    ------
    ValueError
        ``$TVM_CIM_WORKERS`` is not a positive integer.
    """
    env = os.environ.get("TVM_CIM_WORKERS")
    if env is None:
        return os.cpu_count() or 1
    if not env.strip().isdigit() or int(env) < 1:
        raise ValueError(f"TVM_CIM_WORKERS={env!r}: expected a positive integer (1: no worker processes)")
    return int(env)


_POOL: dict[int, ThreadPoolExecutor] = {}  # threads -> the pool, made on first use
_POOL_LOCK = threading.Lock()
_INSIDE = threading.local()  # set in a pool thread: a nested map runs in that thread
os.register_at_fork(after_in_child=_POOL.clear)  # (a forked child has none of the parent's threads: new pools)


def thread_map(fn, items, workers: int | None = None) -> list:
    """``[fn(x) for x in items]``, the calls spread over a pool of threads.

    For work that spends its time in numpy (which releases the interpreter
    lock in its loops and in BLAS): independent calls whose results do not
    depend on the order they run in, so the list is the one the loop gives.
    A call made from inside a pool thread runs its items in that thread (no
    nested pools, no deadlock), as does a single item or a single worker.

    Parameters
    ----------
    fn : callable
    items : iterable
    workers : int, optional
        Threads (default :func:`workers_default`).
    """
    items = list(items)
    n = min(len(items), workers_default() if workers is None else int(workers))
    if n <= 1 or getattr(_INSIDE, "on", False):
        return [fn(x) for x in items]
    with _POOL_LOCK:
        pool = _POOL.get(n)
        if pool is None:
            pool = _POOL[n] = ThreadPoolExecutor(n, thread_name_prefix="tvm-cim", initializer=_mark_inside)
    return list(pool.map(fn, items))


def _mark_inside() -> None:
    _INSIDE.on = True
