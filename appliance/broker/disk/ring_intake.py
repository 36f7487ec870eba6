"""The request rings of the network workers: take their requests in rounds, post each
completion on the sender's completion ring, and ring the network workers' doorbells."""

from __future__ import annotations

import logging
import time

from appliance.broker.disk.partitions import Partitions
from appliance.broker.disk.requests import Requests, with_error
from appliance.process.plumbing import Plumbing, ring_doorbell
from appliance.shm.layout import MsgType
from appliance.shm.ring import Channel, RingFormatError

__all__ = ["RingIntake", "ROUND_LIMIT"]

log = logging.getLogger("appliance.disk")

ROUND_LIMIT = 256  # requests taken from one ring per round, so no network worker starves the others
# "new data" wake-ups for long polls: one per ms in the long run, up to DATA_BELL_BURST at once
# after a quieter spell (a token bucket). Measured reason for the burst: at 10,000 records/s a
# request arrives about once per ms, and with a strict one per ms each that came a little early
# waited for the next ms: a consumer on another network worker than its producer saw p99
# 1.33-1.78 ms, against 0.44-0.57 with the burst (a lab loop of perf/run.py's latency_10k cell;
# perf/README.md).
DATA_BELL_INTERVAL_S = 0.001
DATA_BELL_BURST = 4


class RingIntake:
    def __init__(self, index: int, plumbing: Plumbing, requests: Requests,
                 partitions: Partitions) -> None:
        self.plumbing = plumbing
        self.requests = requests
        self.partitions = partitions
        self.channels = [Channel.attach(plumbing.channel_names[(n, index)])
                         for n in range(plumbing.num_ring_clients)]
        for ch in self.channels:
            # requests queued while no disk worker ran were failed by their network workers
            ch.requests.discard_all()
        self.data_bell_pending = 0  # DataWanted bits of what moved since the last data bell
        # network workers owed a bell for held answers released by a handler (acks=all): rung
        # with the round's bells, once per worker, not once per answer
        self.rung_later: set[int] = set()
        # the network workers' completion rings (the cluster worker's serves no long polls)
        self._net_completions = [(n, self.channels[n].completions)
                                 for n in range(plumbing.num_net)]
        # the token bucket as its "theoretical arrival time": a bell may ring once time.monotonic()
        # reaches data_bell_due(), and each one rung moves it one interval on
        self._bell_tat = 0.0

    def drain(self) -> tuple[int, set[int], bool]:
        """One round over every ring: (requests handled, network workers that got completions,
        whether a ring was left with requests at ROUND_LIMIT: no doorbell will say so)."""
        handled = 0
        more = False
        rung: set[int] = set()
        held: list[tuple[int, bytes]] = []  # create completions: sent once the round is durable
        handle = self.requests.handle
        for n, ch in enumerate(self.channels):
            ring = ch.requests
            for _ in range(ROUND_LIMIT):
                try:
                    msg = ring.peek()
                except RingFormatError as e:
                    log.error("request ring of network worker %d is corrupt (%s): discarding it", n, e)
                    ring.discard_all()
                    break
                if msg is None:
                    break
                msg_type, payload = msg
                try:
                    comp = handle(n, msg_type, payload)
                finally:
                    del payload
                    ring.release()
                handled += 1
                if comp is not None and msg_type == MsgType.CREATE_PARTITION:
                    held.append((n, comp))
                elif comp is not None:
                    self.complete(n, comp)
                    rung.add(n)
            else:
                more = True
        if held:
            error = self.partitions.sync_created()
            for n, comp in held:
                self.complete(n, with_error(comp, error) if error else comp)
                rung.add(n)
        return handled, rung, more

    def complete(self, n: int, comp: bytes) -> None:
        ch = self.channels[n]
        while not ch.completions.put(MsgType.COMPLETION, comp):
            # the network worker drains completions constantly; wait for room
            ring_doorbell(self.plumbing.net_bells[n])
            time.sleep(0.0005)

    def complete_held(self, n: int, comp: bytes) -> None:
        """Post a held answer (an acks=all produce the high watermark has passed) now; its
        network worker's bell rings with the next :meth:`ring_bells` (the end of the round), so
        the answers one round releases (the FOLLOWER_FETCHes of a follower's fetch cover every
        partition it follows here) wake their network worker once."""
        self.complete(n, comp)
        self.rung_later.add(n)

    def ring_bells(self, rung: set[int] | tuple = ()) -> None:
        """Ring the network workers in ``rung`` and, when due, every network worker that asked
        for data bells of what moved (its long polls wait; Ring.want_data): appends wake them
        coalesced to one wake-up per DATA_BELL_INTERVAL_S in the long run (measured: ringing
        after every round cost 15 % of the worker under a stream of large batches). Workers with
        no long polls are not woken by appends at all, nor workers whose only long polls are
        followers' fetches by a high watermark move (each wake-up of a process costs both sides;
        under acks=all every follower's fetch moved the high watermark and woke the worker
        holding the other followers' fetches for nothing)."""
        if self.rung_later:
            rung = self.rung_later.union(rung)
            self.rung_later.clear()
        if self.data_bell_pending:
            wanting = self.data_wanted(self.data_bell_pending)
            if not wanting:
                self.data_bell_pending = 0  # nobody waits for it: a later ask re-reads the log
            else:
                now = time.monotonic()
                if now >= self.data_bell_due():
                    bells = self.plumbing.net_bells
                    for n in wanting:
                        ring_doorbell(bells[n])
                    for n in rung:
                        if n not in wanting:
                            ring_doorbell(bells[n])
                    self.data_bell_pending = 0
                    self._bell_tat = max(self._bell_tat, now) + DATA_BELL_INTERVAL_S
                    return
        for n in rung:
            ring_doorbell(self.plumbing.net_bells[n])

    def data_bell_due(self) -> float:
        """When (time.monotonic) the pending data bells may be rung."""
        return self._bell_tat - (DATA_BELL_BURST - 1) * DATA_BELL_INTERVAL_S

    def data_wanted(self, moved: int) -> list[int]:
        """The network workers that asked to be woken by the DataWanted bits in ``moved`` (the
        cluster worker, ring client num_net, serves no long polls)."""
        return [n for n, ring in self._net_completions if ring.data_wanted & moved]

    def close(self) -> None:
        for ch in self.channels:
            ch.close()
