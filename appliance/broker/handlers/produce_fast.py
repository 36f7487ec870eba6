"""Produce's fast path: the common request shape from its bytes to the disk ring, and the
completion straight to the encoded answer.

A whole Produce v3-9 of one topic and one partition at the start of a socket read (or after
others the fast path took), acks 1 or -1, with v2 batches (``protocol/produce_shape.py``), skips the generic decoder, the Request object,
``PendingProduce``, the response body's objects and the generic encoder. The checks are the
generic path's, in the same order (``produce._check``): the partition exists here, its slot is
ONLINE, this broker leads it (cluster mode), the records are a non-empty v2 message set no
larger than a ring message. The disk worker validates and appends them exactly as for the
generic path (CRC, sizes, idempotence, min.insync.replicas for acks=all): the ring message is
the same. Anything this path does not recognise, or any check that fails, is declined before it
has done anything, and the generic path answers it (its error codes, its metrics).

Measured (issue 15): driven in-process against the unit tests' fakes, the network worker's
handler work for a one-record produce is ~7 us here and ~25 us on the generic path; the broker's
CPU per request (perf/bench_request_cost.py) fell by about a third (perf/README.md).

Metrics: the request count is kept as the generic path keeps it; the requests the metrics time
(one in SAMPLE) are declined, so the generic path times them; a failed partition's answer is
built and counted by the generic code (``produce.fail_answer``).

Runs in the network worker's event loop; not thread-safe.
"""

from __future__ import annotations

import asyncio
import struct
from typing import TYPE_CHECKING, Any, NamedTuple

from appliance.broker.door import Refusal
from appliance.broker.handlers.produce import fail_answer
from appliance.metrics.recorder import SAMPLE_MASK
from appliance.protocol.produce_shape import ProduceAnswer, parse_produce
from appliance.records.batch_layout import MAGIC_OFFSET
from appliance.security.acl import TOPIC, WRITE
from appliance.shm.layout import MsgType, Role, SlotState

if TYPE_CHECKING:
    from appliance.broker.broker_context import BrokerContext
    from appliance.process.disk_client import Completion

__all__ = ["FastProduce"]

_MAGIC_POS = MAGIC_OFFSET  # byte of the magic in a v2 batch (after base offset, length, leader epoch)
_CLIENT_LEN = struct.Struct(">h")  # the header's client id length, after key, version, correlation id
_CACHE_LIMIT = 4096  # topic names and answer templates kept; emptied when full (cheap to rebuild)


class _Header(NamedTuple):
    """What the generic encoder needs of a request (a failed partition's answer)."""

    api_key: int
    api_version: int
    correlation_id: int


class FastProduce:
    """One network worker's fast path (its caches of topic names and answer templates)."""

    __slots__ = ("ctx", "_names", "_answers", "_online", "_leader", "_max_payload", "_client_ids")

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self._max_payload = ctx.disks.max_payload()  # fixed by the rings' size
        self._names: dict[bytes, str] = {}
        self._client_ids: dict[bytes, str] = {}
        self._answers: dict[tuple[int, bytes, int], ProduceAnswer] = {}
        self._online = SlotState.ONLINE
        self._leader = Role.LEADER

    def start(self, conn: Any, frame: memoryview, answer: asyncio.Future) -> bool:
        """Send ``frame`` (one whole request, size prefix excluded) to its disk worker if it is
        the common Produce shape and passes the routing checks; its answer is set on ``answer``
        from the doorbell of its completion, then ``ctx.wakeups.answer_ready(conn)``. False,
        having done nothing, when the generic path must take it."""
        shape = parse_produce(frame)
        if shape is None:
            return False
        version, correlation_id, acks, timeout_ms, topic, index, records = shape
        if acks != 1 and acks != -1:
            return False
        name = self._names.get(topic)
        if name is None:
            try:
                name = topic.decode()
            except UnicodeDecodeError:
                return False  # the generic decoder refuses it (and closes the connection)
            if len(self._names) >= _CACHE_LIMIT:
                self._names.clear()
            self._names[topic] = name
        ctx = self.ctx
        info = ctx.index.lookup(name, index)
        if info is None or ctx.table.state(info.slot) != self._online:
            return False
        if ctx.leaders is not None and ctx.leaders.role(info.slot) != self._leader:
            return False
        size = len(records)
        if size <= _MAGIC_POS or records[_MAGIC_POS] != 2 or size > self._max_payload:
            return False  # legacy message sets are converted, the rest refused, by the generic path
        auth = ctx.authorizer
        if auth is not None:  # ACLs on: a cached decision; a refusal is the generic path's answer
            c = conn.context
            if not auth.allowed(c.principal, c.client_address, WRITE, TOPIC, name):
                return False
        m = ctx.metrics
        if m is not None:
            count = m.produce_count + 1
            if not count & SAMPLE_MASK:
                return False  # a timed request: the generic path times it
        # the door, once: this path takes the request from here on (declined ones meet it on
        # the generic path); an open door lets an untimed request in without looking
        door = conn.door
        if not door.open:
            entry = door.enter(conn.request_context(0, version, correlation_id, self._client_id(frame)), False)
            if type(entry) is Refusal:
                conn.refuse(entry, answer)
                return True
        if m is not None:
            m.produce_count = count
        key = (version, topic, index)
        template = self._answers.get(key)
        if template is None:
            if len(self._answers) >= _CACHE_LIMIT:
                self._answers.clear()
            template = self._answers[key] = ProduceAnswer(version, topic, index)
        ctx.disks.submit(info.disk, MsgType.PRODUCE, info.slot, records, acks=acks, timeout_ms=timeout_ms,
                         on_done=_done, token=(ctx, conn, answer, template, correlation_id, version, name, index),
                         ring_now=True, slot_online=True)
        return True

    def _client_id(self, frame: memoryview) -> str | None:
        """The request header's client id (parse_produce has checked it lies in the frame)."""
        n = _CLIENT_LEN.unpack_from(frame, 8)[0]
        if n < 0:
            return None
        raw = bytes(frame[10:10 + n])
        name = self._client_ids.get(raw)
        if name is None:
            name = raw.decode(errors="replace")
            if len(self._client_ids) >= _CACHE_LIMIT:
                self._client_ids.clear()
            self._client_ids[raw] = name
        return name


def _done(token: tuple, comp: Completion) -> None:
    """The disk's completion: the answer, then the connection is told (DiskClient's on_done)."""
    ctx, conn, answer, template, correlation_id, version, name, index = token
    if answer.done():
        return
    if comp.error_code:
        try:
            answer.set_result(fail_answer(ctx, _Header(0, version, correlation_id), name, index,
                                          comp))
        except Exception as e:  # an encoding bug: the connection closes, the worker lives
            answer.set_exception(e)
    else:
        answer.set_result(template.encode(correlation_id, comp.base_offset, comp.log_append_time,
                                          comp.log_start_offset))
    ctx.wakeups.answer_ready(conn)
