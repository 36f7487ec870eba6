"""Controlled shutdown (ControlledShutdown, API 7; ``controlled.shutdown.enable``).

The stopping broker's side (:func:`request_shutdown`): before leaving the cluster, ask the
controller to move every partition this broker leads to another ISR member, and retry
(``controlled.shutdown.max.retries`` times, ``controlled.shutdown.retry.backoff.ms`` apart; our
defaults 5 and 1 s, Kafka's 3 and 5 s) until none remains, for at most DEADLINE_S in all (a
ZooKeeper that does not answer fails an attempt like a controller that does not). If this broker
is the controller, the request is its own controller's event.

The controller's side (:func:`answer_shutdown`): the forwarded request becomes a
``ControlledShutdown`` event on the controller's queue; its reply is the response.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

from kazoo.exceptions import KazooException

from appliance.cluster import events as ev
from appliance.cluster.broker_connection import BrokerConnector
from appliance.cluster.wire_channel import encode_request
from appliance.cluster.zk_paths import BrokerInfo
from appliance.cluster.zk_store import ZkStore
from appliance.errors import ErrorCode
from appliance.process.stop_deadlines import CONTROLLED_SHUTDOWN_S
from appliance.protocol.frames import RESPONSE_HEADER, SIZE
from appliance.protocol.messages.cluster import ControlledShutdown

__all__ = ["request_shutdown", "answer_shutdown"]

log = logging.getLogger("appliance.cluster")

VERSION = 1
ATTEMPTS = 5  # controlled.shutdown.max.retries' default here
BACKOFF_S = 1.0  # controlled.shutdown.retry.backoff.ms' default here
TIMEOUT_S = 20.0
#: The whole attempt's bound: a hung controller must not hold a stop past systemd's
#: TimeoutStopSec (60 s in systemd/), whose SIGKILL would make the next start an unclean one;
#: leaving ZooKeeper afterwards needs its share of the cluster worker's stop too
#: (:mod:`appliance.process.stop_deadlines`).
DEADLINE_S = CONTROLLED_SHUTDOWN_S


def _ask_own_controller(member: Any, broker_id: int, timeout: float) -> dict:
    done = threading.Event()
    box: dict[str, Any] = {}

    def reply(body: dict) -> None:
        box.update(body)
        done.set()

    member.controller.put(ev.ControlledShutdown(broker_id, reply))
    if not done.wait(timeout):
        return {"error_code": int(ErrorCode.REQUEST_TIMED_OUT), "remaining_partitions": []}
    return box


def _ask_remote(connector: BrokerConnector, controller: BrokerInfo, broker_id: int,
                timeout: float) -> dict:
    with connector.connect(controller, timeout) as s:
        s.sendall(encode_request(ControlledShutdown.API_KEY, VERSION, 1, f"shutdown-{broker_id}",
                                 {"broker_id": broker_id}))
        buf = b""
        while len(buf) < SIZE.size:
            chunk = s.recv(SIZE.size - len(buf))
            if not chunk:
                raise ConnectionError("controller closed the connection")
            buf += chunk
        (size,) = SIZE.unpack(buf)
        frame = b""
        while len(frame) < size:
            chunk = s.recv(size - len(frame))
            if not chunk:
                raise ConnectionError("controller closed the connection")
            frame += chunk
    return ControlledShutdown.decode_response(VERSION, frame, RESPONSE_HEADER.size).to_dict()


def request_shutdown(member: Any, store: ZkStore, broker_id: int,
                     connector: BrokerConnector | None = None, attempts: int = ATTEMPTS,
                     backoff_s: float = BACKOFF_S) -> bool:
    """Blocking (run it in an executor). True once the controller reports nothing left here.
    ``connector``: how to reach the controller (its inter-broker listener)."""
    connector = connector or BrokerConnector()
    end = time.monotonic() + DEADLINE_S
    for attempt in range(attempts):
        left = end - time.monotonic()
        if left <= 0:
            break
        try:
            controller = store.controller_id()
            if controller == broker_id and member.controller is not None:
                body = _ask_own_controller(member, broker_id, _timeout(end))
            elif controller >= 0:
                b = store.brokers().get(controller)
                if b is None:
                    raise ConnectionError(f"controller {controller} is not registered")
                body = _ask_remote(connector, b, broker_id, _timeout(end))
            else:
                raise ConnectionError("no controller")
            remaining = body.get("remaining_partitions") or []
            if body.get("error_code") == 0 and not remaining:
                log.info("controlled shutdown: leadership moved away")
                return True
            log.info("controlled shutdown attempt %d: error %s, %d partitions still led here",
                     attempt + 1, body.get("error_code"), len(remaining))
        except (OSError, ValueError, KazooException) as e:
            # ZooKeeper out of reach (a lookup's retries ran out) is one failed attempt too, not
            # a crash of the cluster worker that would skip leaving the cluster
            log.info("controlled shutdown attempt %d failed: %s", attempt + 1, str(e) or type(e).__name__)
        if attempt + 1 < attempts:
            threading.Event().wait(min(backoff_s, max(0.0, end - time.monotonic())))
    log.warning("controlled shutdown did not complete; stopping anyway")
    return False


def _timeout(end: float) -> float:
    """A try's timeout: TIMEOUT_S, or what is left of the deadline after the ZooKeeper lookups
    before it (at least 0.1 s: a socket timeout of 0 would mean non-blocking)."""
    return max(0.1, min(TIMEOUT_S, end - time.monotonic()))


async def answer_shutdown(member: Any, request: Any) -> dict:
    """The controller's answer to a forwarded ControlledShutdown request."""
    if member.controller is None:
        return {"error_code": int(ErrorCode.NOT_CONTROLLER), "remaining_partitions": []}
    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    def reply(body: dict) -> None:
        loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(body))

    member.controller.put(ev.ControlledShutdown(request.broker_id, reply))
    try:
        return await asyncio.wait_for(fut, TIMEOUT_S)
    except TimeoutError:
        return {"error_code": int(ErrorCode.REQUEST_TIMED_OUT), "remaining_partitions": []}
