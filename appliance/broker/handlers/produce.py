"""Produce: validate the request, route each partition's batches to its disk worker's ring,
answer when the requested acks are met (acks=-1 on one broker: the leader is the whole ISR)."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from appliance.broker.authorization import note_denial
from appliance.broker.handlers.answer import NO_RESPONSE, CloseConnection, encode, led_here
from appliance.errors import ErrorCode, KafkaError
from appliance.metrics.recorder import SAMPLE_MASK, AnswerTiming
from appliance.metrics.responses import field
from appliance.protocol.messages import Produce
from appliance.records.batch_layout import MAGIC_OFFSET
from appliance.records.convert import legacy_to_v2
from appliance.security.acl import TOPIC, WRITE
from appliance.shm.layout import MsgType

if TYPE_CHECKING:
    from appliance.broker.broker_context import BrokerContext
    from appliance.process.disk_client import Completion
    from appliance.protocol.connection import Request

__all__ = ["start", "PendingProduce", "fail_answer"]

_MAGIC_POS = MAGIC_OFFSET  # byte of the magic in both v2 batches and legacy messages (after offset+size+crc)
# generated data classes, not dicts: the encoder's fast path, and a misspelled field fails here
_Response = Produce.Response
_Topic = _Response.Responses
_Partition = _Topic.PartitionResponses


def _check(ctx: BrokerContext, topic: str, index: int, records: Any) -> tuple[Any, Any, Any]:
    """The partition's answer so far, and (where it goes, the records to append) when it is to
    be appended; (answer, None, None) when it is refused here."""
    out = _Partition(index=index, base_offset=-1)
    info, out.error_code = led_here(ctx, topic, index)
    if info is None:
        return out, None, None
    if records is None or len(records) == 0:
        out.error_code = ErrorCode.INVALID_RECORD
        return out, None, None
    if len(records) > _MAGIC_POS and records[_MAGIC_POS] in (0, 1):
        try:  # an old-format message set: store it as v2 batches like every other
            records = legacy_to_v2(bytes(records))
        except KafkaError as e:
            out.error_code = e.code
            return out, None, None
    if len(records) > ctx.disks.max_payload():
        out.error_code = ErrorCode.RECORD_LIST_TOO_LARGE
        return out, None, None
    return out, info, records


def _refused(topics: Any, results: list) -> str:
    """'topic-partition: ERROR, ...' of the partitions refused (for the log)."""
    it = iter(results)
    names = ErrorCode._value2member_map_
    return ", ".join(f"{t.name}-{out.index}: {names[c].name if (c := out.error_code) in names else c}"
                     for t in topics for out in (next(it) for _ in t.partition_data) if out.error_code)


def _fill(out: Any, comp: Completion) -> None:
    out.error_code = comp.error_code
    out.base_offset = comp.base_offset
    out.log_append_time_ms = comp.log_append_time
    out.log_start_offset = comp.log_start_offset


def _invalid_acks(topics: Any) -> Any:
    return _Response(throttle_time_ms=0, responses=[
        _Topic(name=t.name, partition_responses=[
            _Partition(index=p.index, error_code=ErrorCode.INVALID_REQUIRED_ACKS, base_offset=-1)
            for p in t.partition_data]) for t in topics])


def _body(topics: Any, results: list) -> Any:
    it = iter(results)
    return _Response(throttle_time_ms=0, responses=[
        _Topic(name=t.name, partition_responses=[next(it) for _ in t.partition_data])
        for t in topics])


class PendingProduce:
    """One produce request from its submission to its answer: the disk client calls
    :meth:`partition_done` once per partition put on a ring, and the last one answers. One
    object per request, in place of a closure per partition and two around the answer."""

    __slots__ = ("ctx", "request", "answer", "conn", "topics", "results", "waiting", "timing")

    def __init__(self, ctx: BrokerContext, request: Request, answer: asyncio.Future, conn: Any) -> None:
        self.ctx = ctx
        self.request = request
        self.answer = answer  # the connection's slot for this request's encoded answer
        self.conn = conn
        self.topics = request.body.topic_data
        self.results: list = []  # one per partition, in request order
        self.waiting = 0
        self.timing: AnswerTiming | None = None  # on the requests the metrics time (1 in SAMPLE)

    def partition_done(self, out: Any, comp: Completion) -> None:
        _fill(out, comp)
        if comp.error_code and self.ctx.metrics is not None:
            _failed(self.ctx.metrics, (out,))
        self.waiting -= 1
        if self.waiting == 0:
            self.finish(_body(self.topics, self.results))

    def finish(self, body: Any) -> None:
        """Encode ``body`` into the answer slot and tell the connection (maybe before
        :func:`start` returns; from a doorbell callback otherwise)."""
        answer = self.answer
        if answer.done():
            return
        if self.timing is not None:
            self.timing.ready = time.monotonic()
        try:
            answer.set_result(encode(self.request, body))
        except Exception as e:  # an encoding bug: the connection closes, the worker lives
            answer.set_exception(e)
        self.ctx.wakeups.answer_ready(self.conn)


def fail_answer(ctx: BrokerContext, request: Request, topic: str, index: int, comp: Completion) -> Any:
    """The encoded answer to a one-partition request whose append failed with ``comp``'s error,
    counted in the metrics as :meth:`PendingProduce.partition_done` counts it (the fast path's
    failures, ``produce_fast.py``). ``request``: its api_key, api_version, correlation_id."""
    out = _Partition(index=index, base_offset=-1)
    _fill(out, comp)
    if ctx.metrics is not None:
        _failed(ctx.metrics, (out,))
    return encode(request, _Response(throttle_time_ms=0, responses=[
        _Topic(name=topic, partition_responses=[out])]))


def _failed(m: Any, outs: Any) -> None:
    """Partitions refused, in the metrics (per error code; never on the path of a success)."""
    for out in outs:
        code = field(out, "error_code")
        if code:
            m.error(0, code)  # 0: Produce's API key
            m.failed_produce()


def _acks0_failed(conn: Any, comp: Completion) -> None:
    """The disk worker refused an acks=0 produce: as 0.8.2's broker, close the connection once
    the answers already owed are written."""
    if comp.error_code:
        conn.abort(f"acks=0 produce failed: {ErrorCode(comp.error_code).name}")


def start(ctx: BrokerContext, request: Request, answer: asyncio.Future, conn: Any) -> None:
    """Produce without a task: every partition goes on its disk ring now; the answer is set
    from the doorbell that brings the last completion (acks=0: at once, with no response).
    Measured: a task, its futures and the scheduling between them were 4 of the 6 event-loop
    passes a single-record produce took, and most of its cost."""
    pending = PendingProduce(ctx, request, answer, conn)
    m = ctx.metrics
    stamp = 0
    if m is not None:  # the request count (Recorder.produce_count); one in SAMPLE is timed
        m.produce_count = n = m.produce_count + 1
        if not n & SAMPLE_MASK:
            m.w[0] = n  # word 0: Produce's API key
            received = time.monotonic()
            pending.timing = conn.timed[answer] = AnswerTiming(0, received)
            stamp = int(received * 1e6) & 0xFFFFFFFF or 1  # REQUEST.stamp_us: the ring wait
    body = request.body
    acks = body.acks
    topics = pending.topics
    if acks not in (-1, 0, 1):
        refused = _invalid_acks(topics)
        if m is not None:
            _failed(m, [p for t in field(refused, "responses")
                        for p in field(t, "partition_responses")])
        pending.finish(refused)
        return
    results = pending.results
    submits = []
    auth = ctx.authorizer
    for t in topics:
        # ACLs on: Write on the topic (Kafka's per-topic answer: the others are still appended)
        denied = auth is not None and not auth.allowed(conn.context.principal, conn.context.client_address,
                                                       WRITE, TOPIC, t.name)
        if denied:
            note_denial(ctx, conn.context.principal, conn.context.client_address, f"Write on topic {t.name}")
        for p in t.partition_data:
            if denied:
                out, info, records = _Partition(index=p.index, base_offset=-1,
                                                error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED), None, None
            else:
                out, info, records = _check(ctx, t.name, p.index, p.records)
            results.append(out)
            if info is not None:
                submits.append((info, records, out))
    if m is not None and len(submits) < len(results):
        _failed(m, results)
    pending.waiting = len(submits) if acks != 0 else 0
    submit = ctx.disks.submit
    done, timeout_ms = pending.partition_done, body.timeout_ms
    if acks == 0:  # answered only on a failure the disk worker found: the connection closes
        done, out_token = _acks0_failed, conn
    for info, records, out in submits:
        submit(info.disk, MsgType.PRODUCE, info.slot, records, acks=acks, timeout_ms=timeout_ms,
               on_done=done, token=out if acks else out_token, stamp_us=stamp)
    if acks == 0:
        if len(submits) < len(results):
            # 0.8.2's KafkaApis: an acks=0 producer hears of a failure only as its connection
            # closing (after the answers before this request; the good partitions are appended).
            # A failure the disk worker finds (a bad CRC, a record too large) closes it later,
            # from its completion (_acks0_failed).
            pending.answer.set_exception(CloseConnection("acks=0 produce failed: " + _refused(topics, results)))
            ctx.wakeups.answer_ready(conn)
        else:
            pending.finish(NO_RESPONSE)
    elif not submits:
        pending.finish(_body(topics, results))
