"""Scrape a broker's Prometheus endpoint into {(name, labels): value}."""

from __future__ import annotations

import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["scrape", "value", "wait_for_endpoint"]


def scrape(port: int, path: str = "/metrics") -> dict[tuple[str, frozenset], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain")
        text = r.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: dict, name: str, **labels: str) -> float:
    """One sample's value; 0 when the series is absent (a counter not yet bumped)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def wait_for_endpoint(port: int, timeout: float = 60.0) -> None:
    """A broker accepts Kafka connections once any network worker is up; the endpoint comes
    with network worker 0."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            scrape(port)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
