"""What a worker bumps on its hot paths: plain adds to its own slab of the shared counters.

One :class:`Recorder` per worker process, or ``None`` when metrics are off (``metrics.listener``
empty): callers test ``if m is not None`` so a broker without metrics pays one branch.

Costs (perf/bench_metrics.py): a memoryview item add is ~40 ns; a histogram observation (bucket
= bit length of the microseconds) ~150 ns. Nothing here allocates.
"""

from __future__ import annotations

from appliance.shm.counters import SharedCounters
from appliance.shm.layout import (
    COUNTER_API_KEYS,
    COUNTER_ERROR_CODES,
    COUNTER_PARTITIONS,
    COUNTER_SLAB,
    HIST_BUCKETS,
    HIST_WORDS,
    counters_name,
)

__all__ = ["Recorder", "attach_recorder"]

_O = {name: COUNTER_SLAB.offset(name) // 8 for name, _ in COUNTER_SLAB.fields}
_LAST = HIST_BUCKETS - 1


class Recorder:
    """Adds to one worker's slab. Not thread-safe (one writer per slab, by design)."""

    __slots__ = ("w", "counters", "_messages_in", "_bytes_in", "_bytes_out", "_total", "_local",
                 "_errors")

    def __init__(self, counters: SharedCounters, worker_slot: int) -> None:
        self.counters = counters
        self.w = counters.slab(worker_slot)
        self._messages_in = _O["messages_in"]
        self._bytes_in = _O["bytes_in"]
        self._bytes_out = _O["bytes_out"]
        self._total = _O["total_time"]
        self._local = _O["local_time"]
        self._errors = _O["errors"]

    # -- network worker ------------------------------------------------------------------
    def request(self, api_key: int, seconds: float) -> None:
        """One request of ``api_key`` answered after ``seconds`` (its total time)."""
        if 0 <= api_key < COUNTER_API_KEYS:
            w = self.w
            w[api_key] += 1
            self._observe(self._total + api_key * HIST_WORDS, seconds)

    def error(self, api_key: int, code: int) -> None:
        """A response (or one of its partitions) of ``api_key`` carried error ``code``."""
        if 0 <= api_key < COUNTER_API_KEYS and -1 <= code < COUNTER_ERROR_CODES - 1:
            self.w[self._errors + api_key * COUNTER_ERROR_CODES + code + 1] += 1

    def failed_produce(self) -> None:
        self.w[_O["failed_produce"]] += 1

    def failed_fetch(self) -> None:
        self.w[_O["failed_fetch"]] += 1

    def bytes_out(self, slot: int, n: int) -> None:
        if 0 <= slot < COUNTER_PARTITIONS:
            self.w[self._bytes_out + slot] += n

    # -- disk worker ---------------------------------------------------------------------
    def appended(self, slot: int, messages: int, nbytes: int) -> None:
        if 0 <= slot < COUNTER_PARTITIONS:
            w = self.w
            w[self._messages_in + slot] += messages
            w[self._bytes_in + slot] += nbytes

    def local(self, api_key: int, seconds: float) -> None:
        """Time the disk worker spent on one ring message of ``api_key``."""
        if 0 <= api_key < COUNTER_API_KEYS:
            self._observe(self._local + api_key * HIST_WORDS, seconds)

    def flushed(self, seconds: float) -> None:
        self._observe(_O["flush_time"], seconds)

    def _observe(self, base: int, seconds: float) -> None:
        us = int(seconds * 1e6) if seconds > 0 else 0
        k = us.bit_length()
        w = self.w
        w[base + (k if k < _LAST else _LAST)] += 1
        w[base + HIST_BUCKETS] += us

    def reset_partition(self, slot: int) -> None:
        if 0 <= slot < COUNTER_PARTITIONS:
            self.counters.reset_partition(slot)


def attach_recorder(config: object, base: str, worker_slot: int) -> Recorder | None:
    """This worker's recorder, or None when ``metrics.listener`` is empty (metrics off)."""
    if not config["metrics.listener"]:  # type: ignore[index]
        return None
    return Recorder(SharedCounters.attach(counters_name(base)), worker_slot)
