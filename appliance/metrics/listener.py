"""``metrics.listener``: where the Prometheus endpoint listens, parsed once."""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["MetricsListener", "parse_listener"]

_FORM = re.compile(r"(?:http://)?(?P<host>\[[0-9a-fA-F:]+\]|[^:/\s]*):(?P<port>\d{1,5})(?P<path>/\S*)?")


class MetricsListener(NamedTuple):
    host: str
    port: int
    path: str

    def __str__(self) -> str:
        return f"http://{self.host or '0.0.0.0'}:{self.port}{self.path}"


def parse_listener(value: str) -> MetricsListener | None:
    """``http://HOST:PORT/PATH`` or ``HOST:PORT`` (path /metrics); None when empty (off).

    Raises ValueError naming the key and the value."""
    value = (value or "").strip()
    if not value:
        return None
    match = _FORM.fullmatch(value)
    port = int(match["port"]) if match else 0
    if match is None or not 0 < port < 65536:
        raise ValueError(f"metrics.listener={value!r}: expected http://HOST:PORT/PATH, "
                         f"e.g. http://127.0.0.1:9308/metrics")
    return MetricsListener(match["host"].strip("[]"), port, match["path"] or "/metrics")
