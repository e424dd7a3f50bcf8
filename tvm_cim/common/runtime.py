"""Runtime plumbing both simulators share: statistics collectors and one simulator per device."""

from __future__ import annotations

import contextlib
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
