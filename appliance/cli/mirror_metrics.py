"""The mirror maker's Prometheus metrics (``--metrics.listener``), named as Kafka's JMX exporter
names MirrorMaker 2's and the Java consumer's where those exist.

- ``kafka_connect_mirror_source_connector_record_count{topic}`` and ``..._byte_count{topic}``:
  records and bytes (key + value) handed to the target producer; MM2 exports them as
  cumulative gauges (JMX ``record-count``/``byte-count``), so rate() gives the throughput.
- ``appliance_mirror_maker_offset_commits_total`` / ``..._offset_commit_failures_total``: offset
  commits to the source group, made only after the target acknowledged (no Kafka twin).
- ``kafka_consumer_consumer_fetch_manager_metrics_records_lag{client_id,topic,partition}``:
  records not consumed yet per assigned partition, from the last fetch responses; read at scrape
  time from what each stream last published, so a revoked partition disappears.

One registry per process (not the global one): the endpoint shows only these. The HTTP server
is prometheus_client's thread (``start_http_server``): this process never forks.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from appliance.metrics.listener import MetricsListener

__all__ = ["MirrorMetrics"]

MM2 = "kafka_connect_mirror_source_connector_"
LAG = "kafka_consumer_consumer_fetch_manager_metrics_records_lag"


class _LagCollector(Collector):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_client: dict[str, dict[tuple[str, int], int]] = {}

    def collect(self) -> Iterator[GaugeMetricFamily]:
        g = GaugeMetricFamily(LAG, "Records of the partition not consumed yet (high watermark "
                              "minus position)", labels=["client_id", "topic", "partition"])
        with self.lock:
            for client, lags in sorted(self.by_client.items()):
                for (topic, partition), lag in sorted(lags.items()):
                    g.add_metric([client, topic, str(partition)], lag)
        yield g


class MirrorMetrics:
    """The counters every stream updates; thread-safe (prometheus_client's own locks)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.records = Gauge(MM2 + "record_count", "Records mirrored to the target",
                             ["topic"], registry=self.registry)
        self.bytes = Gauge(MM2 + "byte_count", "Bytes (key + value) mirrored to the target",
                           ["topic"], registry=self.registry)
        self.commits = Counter("appliance_mirror_maker_offset_commits",
                               "Offset commits to the source group after the target acknowledged",
                               registry=self.registry)
        self.commit_failures = Counter("appliance_mirror_maker_offset_commit_failures",
                                       "Offset commits the source group refused (records replayed)",
                                       registry=self.registry)
        self._lag = _LagCollector()
        self.registry.register(self._lag)

    def mirrored(self, counts: dict[str, list[int]]) -> None:
        """Add one batch: topic -> [records, bytes]."""
        for topic, (n, size) in counts.items():
            self.records.labels(topic).inc(n)
            self.bytes.labels(topic).inc(size)

    def set_lag(self, client_id: str, lags: dict[tuple[str, int], int]) -> None:
        """Replace a stream's lags (its whole assignment)."""
        with self._lag.lock:
            self._lag.by_client[client_id] = dict(lags)

    def serve(self, listener: MetricsListener) -> None:
        """Listen for scrapes (any path answers). Raises OSError when the port is taken."""
        start_http_server(listener.port, listener.host or "0.0.0.0", registry=self.registry)
