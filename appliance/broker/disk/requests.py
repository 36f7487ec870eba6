"""The table of ring message types -> handlers, and the completion each request gets.

A handler is ``handler(n, request_id, slot, body, acks, timeout_ms) -> (base_offset,
log_append_time, log_start_offset, extra)``, or None when its answer comes later (a JoinGroup
held by the coordinator, an acks=all produce held until the ISR has it). ``n`` is the network
worker the request came from (None: a local IPC producer); ``acks`` and ``timeout_ms`` are the
request's own (an acks=all produce and a DeleteRecords wait on them). It raises ``KafkaError``
(its code is the answer), :class:`NotHere`, or ``OSError``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from appliance.errors import ErrorCode, KafkaError
from appliance.shm.layout import COMPLETION, NO_COMPLETION_AT_ACKS_0, REQUEST, MsgType

__all__ = ["Requests", "NotHere", "Handler", "NOTHING", "with_error"]

log = logging.getLogger("appliance.disk")

_REQ = REQUEST.struct  # type: ignore[attr-defined]
_COMP = COMPLETION.struct  # type: ignore[attr-defined]

Handler = Callable[[Any, int, int, memoryview, int, int], "tuple[int, int, int, bytes] | None"]
NOTHING = (-1, -1, -1, b"")  # the answer of a request with no offsets to report


class NotHere(Exception):
    """The slot is not (or no longer) a partition of this disk worker."""


class Requests:
    def __init__(self, handlers: dict[int, Handler], path: str) -> None:
        self.handlers = handlers
        self.path = path  # the log dir, for the log
        # told of every storage error (a dead disk takes the dir offline; see dir_health.py)
        self.on_io_error: Callable[[BaseException], None] | None = None
        self.metrics: Any = None  # a metrics Recorder when metrics are on

    def _timed(self, handler: Handler, n: int | None, request_id: int, slot: int,
               payload: memoryview, acks: int, timeout_ms: int, stamp: int) -> Any:
        """A message the network worker timed (Produce, one request in SAMPLE): its wait on
        the ring (RequestQueueTime; CLOCK_MONOTONIC is one clock for every process) and the
        handler's own time (LocalTime). Two clock reads, on timed messages only."""
        taken = time.monotonic()
        m = self.metrics
        m.queued_us(0, (int(taken * 1e6) - stamp) & 0xFFFFFFFF)  # 0: Produce's API key
        try:
            return handler(n, request_id, slot, payload[REQUEST.size:], acks, timeout_ms)
        finally:
            m.local(0, time.monotonic() - taken)

    def handle(self, n: int | None, msg_type: int, payload: memoryview) -> bytes | None:
        """The completion for one ring message, or None when it gets none (acks=0 produce,
        or answered later)."""
        request_id, slot, acks, _flags, timeout_ms, stamp = _REQ.unpack_from(payload, 0)
        error = ErrorCode.NONE
        answer: tuple[int, int, int, bytes] | None = NOTHING
        handler = self.handlers.get(msg_type)
        try:
            if handler is None:
                error = ErrorCode.INVALID_REQUEST
            elif stamp and self.metrics is not None:
                answer = self._timed(handler, n, request_id, slot, payload, acks, timeout_ms, stamp)
                if answer is None:
                    return None
            else:
                answer = handler(n, request_id, slot, payload[REQUEST.size:], acks, timeout_ms)
                if answer is None:
                    return None
        except NotHere:
            error = ErrorCode.NOT_LEADER_OR_FOLLOWER
        except KafkaError as e:
            error = e.code
            if error == ErrorCode.KAFKA_STORAGE_ERROR and self.on_io_error is not None:
                self.on_io_error(e)
        except OSError as e:
            if self.on_io_error is not None:
                self.on_io_error(e)
            else:
                log.error("I/O error on %s: %s", self.path, e)
            error = ErrorCode.KAFKA_STORAGE_ERROR
        except Exception:
            log.exception("request type %d for slot %d failed", msg_type, slot)
            error = ErrorCode.UNKNOWN_SERVER_ERROR
        if acks == 0 and msg_type in NO_COMPLETION_AT_ACKS_0 and not (error and msg_type == MsgType.PRODUCE):
            # an acks=0 produce is answered only when it failed: its connection then closes
            # (0.8.2's rule; the network worker keeps the recent acks=0 request ids for it)
            return None
        if error:
            answer = NOTHING
        base_offset, log_append_time, log_start, extra = answer
        return _COMP.pack(request_id, base_offset, log_append_time, log_start, slot, int(error)) + extra


def with_error(comp: bytes, error: int) -> bytes:
    """``comp`` with its error code replaced (the body after the fixed part is kept)."""
    fields = list(_COMP.unpack_from(comp, 0))
    fields[-1] = int(error)
    return _COMP.pack(*fields) + comp[_COMP.size:]
