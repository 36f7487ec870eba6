"""End-to-end latency at a fixed rate: a paced producer in this process, the consumer in a spawned
process, each value stamped with CLOCK_MONOTONIC (one clock for all processes on the host).

Each value carries (send time ns, sequence) in its first 16 bytes (perf.peers.base.STAMP); the
stamp is taken right before the client call that sends it, so the figure is client call ->
consumer sees it, including both clients' own queues, not the pacer's sleep jitter. The first
second (or first 10 % of a short run) is dropped as warm-up. A receiver is a module-level
function ``receiver(args, ready, out, total, timeout_s)`` that sets ``ready`` once subscribed and
puts an int64 array of [seq, latency_ns] rows on ``out``.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import time
from collections.abc import Awaitable, Callable

import numpy as np

from perf.peers.base import STAMP, stamped_value
from perf.workloads.spec import Workload

__all__ = ["run_latency", "run_latency_async", "summarize", "Collector"]

# The pacer sleeps at least this long and then sends every record that fell due meanwhile (one
# sleep per record at 10,000/s cost the sending process half a core of wake-ups on a 2-core
# machine). Kafka's own ProducerPerformance throttle does the same with 2 ms. Each record is
# still stamped right before its own send, so a record's figure never includes the pacer's wait.
PACER_MIN_SLEEP_S = 0.001
# A workload with extra={"pacer": "per_record"} sleeps until each record's own due time instead
# (issue 15: one record per produce call and per request, as an application that sends as
# events happen; linger.ms=0 then gives the client nothing to batch unless it falls behind).


def _min_sleep(wl: Workload) -> float:
    return 0.0 if wl.extra.get("pacer") == "per_record" else PACER_MIN_SLEEP_S


class Collector:
    """For receivers: collects (seq, latency) pairs until ``total`` arrived."""

    def __init__(self, total: int) -> None:
        self.rows = np.zeros((total, 2), np.int64)
        self.n = 0
        self.total = total

    def add(self, value: bytes, now_ns: int) -> None:
        sent, seq = STAMP.unpack_from(value, 0)
        if self.n < self.total:
            self.rows[self.n] = (seq, now_ns - sent)
            self.n += 1

    @property
    def done(self) -> bool:
        return self.n >= self.total

    def result(self) -> np.ndarray:
        return self.rows[: self.n]


def summarize(rows: np.ndarray, wl: Workload, sent: int) -> dict:
    total = int(wl.rate * wl.seconds)
    warm = wl.rate if wl.seconds > 2 else total // 10
    kept = rows[rows[:, 0] >= warm, 1] / 1e6
    if len(kept) == 0:
        raise RuntimeError(f"no records received after warm-up (received {len(rows)} of {sent})")
    p50, p99, p999 = np.percentile(kept, [50, 99, 99.9])
    return {"p50_ms": float(p50), "p99_ms": float(p99), "p999_ms": float(p999),
            "max_ms": float(kept.max()), "count": int(len(kept)), "received": int(len(rows)),
            "sent": sent}


def _start(receiver: Callable, rargs: dict, wl: Workload):
    ctx = mp.get_context("spawn")  # this process holds client threads; fork would copy them
    ready, out = ctx.Event(), ctx.Queue()
    total = int(wl.rate * wl.seconds)
    # The receiver gives up 5 s after the producer should have finished: records not seen by then
    # are reported as lost (received < sent), not waited for.
    proc = ctx.Process(target=receiver, args=(rargs, ready, out, total, wl.seconds + 5), daemon=True)
    proc.start()
    if not ready.wait(90):
        proc.kill()
        raise RuntimeError("latency receiver did not subscribe in 90 s")
    return proc, out, total


def _finish(proc, out, wl: Workload, sent: int) -> dict:
    try:
        rows = out.get(timeout=wl.seconds + 60)
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
    return summarize(rows, wl, sent)


def run_latency(receiver: Callable, rargs: dict, send: Callable[[bytes], None],
                idle: Callable[[], None], flush: Callable[[], None], wl: Workload) -> dict:
    """Send ``wl.rate`` records/s for ``wl.seconds`` with ``send(value)``; ``idle()`` is called
    between sends (serve client callbacks); ``flush()`` at the end. Returns percentiles in ms."""
    proc, out, total = _start(receiver, rargs, wl)
    buf = stamped_value(wl.value_size)
    period = 1e9 / wl.rate
    min_sleep = _min_sleep(wl)
    sent = 0
    try:
        t0 = time.monotonic_ns()
        while sent < total:
            due = min(total, int((time.monotonic_ns() - t0) / period) + 1)
            while sent < due:
                STAMP.pack_into(buf, 0, time.monotonic_ns(), sent)
                send(bytes(buf))
                sent += 1
            idle()
            wait = (t0 + sent * period - time.monotonic_ns()) / 1e9
            if wait > 0:
                time.sleep(max(wait, min_sleep))
        flush()
    except BaseException:
        proc.kill()
        raise
    return _finish(proc, out, wl, sent)


async def run_latency_async(receiver: Callable, rargs: dict, send: Callable[[bytes], Awaitable],
                            flush: Callable[[], Awaitable], wl: Workload) -> dict:
    """As :func:`run_latency` for asyncio clients (``send`` and ``flush`` are coroutines)."""
    loop = asyncio.get_running_loop()
    proc, out, total = await loop.run_in_executor(None, _start, receiver, rargs, wl)
    buf = stamped_value(wl.value_size)
    period = 1e9 / wl.rate
    min_sleep = _min_sleep(wl)
    sent = 0
    try:
        t0 = time.monotonic_ns()
        while sent < total:
            due = min(total, int((time.monotonic_ns() - t0) / period) + 1)
            while sent < due:
                STAMP.pack_into(buf, 0, time.monotonic_ns(), sent)
                await send(bytes(buf))
                sent += 1
            wait = (t0 + sent * period - time.monotonic_ns()) / 1e9
            await asyncio.sleep(max(wait, min_sleep) if wait > 0 else 0)
        await flush()
    except BaseException:
        proc.kill()
        raise
    return await loop.run_in_executor(None, _finish, proc, out, wl, sent)
