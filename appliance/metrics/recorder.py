"""What a worker bumps on its hot paths: plain adds to its own slab of the shared counters.

One :class:`Recorder` per worker process, or ``None`` when metrics are off (``metrics.listener``
empty): callers test ``if m is not None`` so a broker without metrics pays one branch.

The produce path bumps the words inline (``w[m.bytes_in + slot] += n``: a method call costs more
than the add) and times only one request in :data:`SAMPLE` (a clock read costs 50-140 ns here,
more than all the counting of a request; perf/bench_metrics.py measured 3.6 us per one-record
request when every request was timed, 9 % of its broker CPU). Kafka's own request histograms
sample too (a reservoir). Other APIs are counted and timed on every request. Nothing here
allocates.
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

__all__ = ["Recorder", "AnswerTiming", "attach_recorder", "SAMPLE_MASK"]

_O = {name: COUNTER_SLAB.offset(name) // 8 for name, _ in COUNTER_SLAB.fields}
_LAST = HIST_BUCKETS - 1
# produce requests: one in SAMPLE is timed (the request count itself is exact). 32, not 16:
# a timed request costs ~17,000 instructions of clocks and histogram adds (callgrind; 4
# clocks and 3 histograms in the network worker, 2 and 2 in the disk worker), which at 1 in 16
# was ~1,100 per request of the ~3,800 the metrics cost; 1 in 32 still times thousands of
# requests a second under load
SAMPLE = 32
SAMPLE_MASK = SAMPLE - 1


class AnswerTiming:
    """A timed request on its way out: when it was received (decoded), when its answer was
    ready; the connection adds when the write began and when its last byte reached the socket."""

    __slots__ = ("api_key", "received", "ready", "writing")

    def __init__(self, api_key: int, received: float) -> None:
        self.api_key = api_key
        self.received = received
        self.ready = 0.0  # 0: the answer is not ready yet
        self.writing = 0.0


class Recorder:
    """Adds to one worker's slab. Not thread-safe (one writer per slab, by design)."""

    __slots__ = ("w", "counters", "leo_base", "bytes_in", "bytes_in_words", "produce_count",
                 "_bytes_out", "_total", "_local", "_errors", "_queue", "_remote", "_resp_queue",
                 "_resp_send")

    def __init__(self, counters: SharedCounters, worker_slot: int) -> None:
        self.counters = counters
        self.w = counters.slab(worker_slot)
        # word offsets the produce path adds to inline; partition slots index them unchecked
        # (the partition table has COUNTER_PARTITIONS slots; tests/metrics/test_recorder.py)
        self.leo_base = _O["leo_base"]
        self.bytes_in = _O["bytes_in"]
        # the disk worker's per-partition byte counts as their own view: one index per append
        # (measured ~2x cheaper than w[bytes_in + slot] in CPython 3.11)
        self.bytes_in_words = self.w[self.bytes_in:self.bytes_in + COUNTER_PARTITIONS]
        # Produce requests of this network worker: a Python int bumped per request, written to
        # the slab (word 0) on every timed request and by publish() (the heartbeat, 4 times a
        # second), so a scrape lags by at most 15 requests or 0.25 s. A shared-memory read and
        # write per request cost ~1.6x the add of a slot attribute. A respawned worker goes on
        # from its predecessor's count.
        self.produce_count = int(self.w[0])
        self._bytes_out = _O["bytes_out"]
        self._total = _O["total_time"]
        self._local = _O["local_time"]
        self._queue = _O["queue_time"]
        self._remote = _O["remote_time"]
        self._resp_queue = _O["response_queue_time"]
        self._resp_send = _O["response_send_time"]
        self._errors = _O["errors"]

    # -- network worker ------------------------------------------------------------------
    def publish(self) -> None:
        """Write the Produce request count to the slab (the heartbeat calls it)."""
        self.w[0] = self.produce_count

    def count(self, api_key: int) -> None:
        """One request of ``api_key`` answered (Produce counts inline, at its start)."""
        if 0 <= api_key < COUNTER_API_KEYS:
            self.w[api_key] += 1

    def sent(self, t: AnswerTiming, done: float) -> None:
        """A timed answer's last byte went to the socket at ``done``: its total time and its
        response queue (ready -> write began: behind earlier answers of the connection) and
        send (write began -> last byte handed to the kernel: a slow reader makes it grow)."""
        if 0 <= t.api_key < COUNTER_API_KEYS:
            base = t.api_key * HIST_WORDS
            self._observe(self._total + base, done - t.received)
            self._observe(self._resp_queue + base, t.writing - t.ready)
            self._observe(self._resp_send + base, done - t.writing)

    def phases(self, api_key: int, queue: float, local: float, remote: float) -> None:
        """A task API's time split: waiting for the loop to start its handler, its own work,
        and its wait for data (Fetch's long poll; Kafka's purgatory)."""
        if 0 <= api_key < COUNTER_API_KEYS:
            self._observe(self._queue + api_key * HIST_WORDS, queue)
            self._observe(self._local + api_key * HIST_WORDS, local)
            if remote:
                self._observe(self._remote + api_key * HIST_WORDS, remote)

    def rejected_connection(self) -> None:
        """A connection closed at once: its address was at max.connections.per.ip."""
        self.w[_O["rejected_connections"]] += 1

    def failed_authentication(self) -> None:
        """A SASL exchange failed (a wrong password, an unknown mechanism, a bad state)."""
        self.w[_O["failed_authentications"]] += 1

    def authorization_denied(self) -> None:
        """A request (or a produce's topic) refused by the ACLs."""
        self.w[_O["authorization_denials"]] += 1

    def failed_handshake(self) -> None:
        """A TLS handshake failed or timed out."""
        self.w[_O["failed_handshakes"]] += 1

    def delayed_accept(self) -> None:
        """Accepting paused: the broker held max.connections."""
        self.w[_O["delayed_accepts"]] += 1

    def muted(self) -> None:
        """A connection muted: queued.max.request.bytes of requests were held unanswered."""
        self.w[_O["muted_reads"]] += 1

    def request_memory(self, held: int) -> None:
        """The bytes of requests this network worker holds read but unanswered (a gauge)."""
        self.w[_O["request_memory"]] = held

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

    # -- cluster worker ------------------------------------------------------------------
    def isr_changed(self, shrunk: bool, expanded: bool) -> None:
        """A leader here wrote a new ISR: Kafka's IsrShrinksPerSec / IsrExpandsPerSec."""
        if shrunk:
            self.w[_O["isr_shrinks"]] += 1
        if expanded:
            self.w[_O["isr_expands"]] += 1

    def active_controller(self, active: bool) -> None:
        self.w[_O["active_controller"]] = int(active)

    # -- disk worker ---------------------------------------------------------------------
    def opened(self, slot: int, log_end_offset: int) -> None:
        """A partition this disk worker opened or created: messages in count from its log-end
        offset now, unless an earlier worker of this broker already set where they count from."""
        if 0 <= slot < COUNTER_PARTITIONS and not self.w[self.leo_base + slot]:
            self.w[self.leo_base + slot] = log_end_offset + 1

    def local(self, api_key: int, seconds: float) -> None:
        """Time the disk worker spent on one ring message of ``api_key``."""
        if 0 <= api_key < COUNTER_API_KEYS:
            self._observe(self._local + api_key * HIST_WORDS, seconds)

    def queued_us(self, api_key: int, us: int) -> None:
        """A request's wait on a disk worker's ring, in microseconds."""
        if 0 <= api_key < COUNTER_API_KEYS:
            self._observe_us(self._queue + api_key * HIST_WORDS, us)

    def flushed(self, seconds: float) -> None:
        self._observe(_O["flush_time"], seconds)

    def _observe(self, base: int, seconds: float) -> None:
        self._observe_us(base, int(seconds * 1e6) if seconds > 0 else 0)

    def _observe_us(self, base: int, us: int) -> None:
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
