"""One queue, one thread (Kafka's ControllerEventManager).

Producers of events (kazoo watch callbacks, timers, request handlers) call :meth:`put` and
return at once; the thread takes events in order and hands each to ``process(event)``. An event
that raises is logged and dropped; the loop goes on (Kafka does the same: one bad event must not
stop the controller). :meth:`close` ends the loop after the events already queued.

Thread-safety: :meth:`put` from any thread; ``process`` runs only on the manager's thread.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from appliance.cluster.events import Barrier, ControllerEvent

__all__ = ["EventManager"]

log = logging.getLogger(__name__)

_STOP = object()


class EventManager:
    def __init__(self, process: Callable[[ControllerEvent], None], name: str = "controller-events") -> None:
        self._process = process
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def put(self, event: ControllerEvent) -> None:
        self._queue.put(event)

    def barrier(self, timeout: float = 60.0) -> bool:
        """Wait until every event queued so far has been processed; False on timeout."""
        done = threading.Event()
        self.put(Barrier(done))
        return done.wait(timeout)

    def close(self, timeout: float = 30.0) -> None:
        self._queue.put(_STOP)
        if timeout > 0 and self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            event = self._queue.get()
            if event is _STOP:
                return
            if isinstance(event, Barrier):
                event.done.set()
                continue
            try:
                self._process(event)
            except Exception:
                log.exception("controller event %r failed", event)
