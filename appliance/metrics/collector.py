"""The broker's metrics as Prometheus families, named as Kafka's JMX exporter names them.

Counters come from every worker's slab of the shared counters (summed here); gauges are read at
scrape time: partition states and offsets from the partition table, log sizes and segment counts
from the partition directories, CPU and memory of each worker from psutil.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import psutil
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from appliance.config import ConfigError, TopicConfig
from appliance.errors import ErrorCode
from appliance.protocol.registry import API_BY_KEY
from appliance.shm.counters import SharedCounters
from appliance.shm.layout import (
    COUNTER_API_KEYS,
    COUNTER_ERROR_CODES,
    HIST_BUCKETS,
    HIST_WORDS,
    Role,
    SlotState,
    WorkerState,
)
from appliance.shm.partition_table import PartitionTable
from appliance.storage.log import partition_dir_name
from appliance.storage.log_dir import read_topic_properties

__all__ = ["BrokerCollector"]

# bucket k counts observations under 2**k microseconds; exported in milliseconds (Kafka's *TimeMs)
_BOUNDS_MS = [f"{2 ** k / 1000:g}" for k in range(HIST_BUCKETS - 1)] + ["+Inf"]
_KIND = {0: "disk", 1: "network", 2: "cluster"}


def _api_name(key: int) -> str:
    api = API_BY_KEY.get(key)
    return api.__name__ if api is not None else str(key)


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def _histogram(family: HistogramMetricFamily, labels: list[str], words: np.ndarray) -> None:
    counts = words[:HIST_BUCKETS]
    cumulative = np.cumsum(counts)
    family.add_metric(labels, list(zip(_BOUNDS_MS, (float(c) for c in cumulative), strict=True)),
                      float(words[HIST_BUCKETS]) / 1000)


def _log_files(path: str) -> tuple[int, int]:
    """(bytes of the .log files, number of segments) of one partition directory."""
    size = count = 0
    try:
        with os.scandir(path) as it:
            for entry in it:
                if entry.name.endswith(".log"):
                    count += 1
                    size += entry.stat().st_size
    except OSError:
        pass
    return size, count


class BrokerCollector(Collector):
    def __init__(self, table: PartitionTable, counters: SharedCounters, worker_slots: list[int],
                 log_dirs: list[str], limits: Any = None, leaders: Any = None,
                 metadata: Any = None, cluster_slot: int | None = None,
                 broker_config: Callable[[], Any] | None = None) -> None:
        self.table = table
        # the broker's current config (its min.insync.replicas under a topic's own override)
        self.broker_config = broker_config
        # cluster mode: the leadership area (this broker's roles and ISRs), the metadata cache
        # (every partition's leader) and the cluster worker's counter slab; None standalone
        self.leaders = leaders
        self.metadata = metadata
        self.cluster_slot = cluster_slot
        self.limits = limits  # the serving worker's ConnectionLimits: broker-wide connection counts
        self.counters = counters
        self.worker_slots = worker_slots
        self.log_dirs = log_dirs
        self._cpu_seen: dict[int, tuple[float, float]] = {}  # pid -> (monotonic, cpu seconds)
        # {(group, topic, partition): committed offset}, set before each render (group_lag.py)
        self.committed: dict[tuple[str, str, int], int] = {}
        # a registry of its own: no process metrics of the serving worker mixed in
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def render(self) -> bytes:
        """The text exposition format of every family."""
        return generate_latest(self.registry)

    def collect(self) -> Iterator[Any]:
        parts = [p for p in self.table.slots() if p.state != SlotState.FREE]
        yield from self._topic_counters(parts)
        yield from self._requests()
        yield from self._connections()
        yield from self._partitions(parts)
        yield from self._workers()
        yield from self._group_lag(parts)

    # -- counters ------------------------------------------------------------------------
    def _sum(self, name: str) -> np.ndarray:
        return self.counters.field(name, self.worker_slots)

    def _topic_counters(self, parts: list) -> Iterator[Any]:
        base = self._sum("leo_base")
        messages = CounterMetricFamily("kafka_server_brokertopicmetrics_messagesin",
                                       "Records appended, per topic (log-end offsets' growth since "
                                       "this broker opened each partition).", labels=["topic"])
        per_topic: dict[str, int] = defaultdict(int)
        for p in parts:
            if base[p.slot]:
                per_topic[p.topic] += max(p.log_end_offset - (int(base[p.slot]) - 1), 0)
        for topic, value in sorted(per_topic.items()):
            messages.add_metric([topic], value)
        yield messages
        for field, name, doc in (
                ("bytes_in", "bytesin", "Bytes of record batches appended, per topic."),
                ("bytes_out", "bytesout", "Bytes of records sent to fetchers, per topic.")):
            per_slot = self._sum(field)
            per_topic: dict[str, int] = defaultdict(int)
            for p in parts:
                per_topic[p.topic] += int(per_slot[p.slot])
            family = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{name}", doc,
                                         labels=["topic"])
            for topic, value in sorted(per_topic.items()):
                family.add_metric([topic], value)
            yield family
        for field, name, doc in (
                ("failed_produce", "failedproducerequests", "Produce partitions refused."),
                ("failed_fetch", "failedfetchrequests", "Fetch partitions refused."),
                ("isr_shrinks", "isrshrinks", "ISR shrinks of partitions led here (0 standalone)."),
                ("isr_expands", "isrexpands", "ISR expansions of partitions led here (0 standalone).")):
            group = "brokertopicmetrics" if "failed" in field else "replicamanager"
            yield CounterMetricFamily(f"kafka_server_{group}_{name}", doc,
                                      value=int(self._sum(field)[0]))

    def _requests(self) -> Iterator[Any]:
        requests = self._sum("requests")
        family = CounterMetricFamily("kafka_network_requestmetrics_requests",
                                     "Requests answered, per API.", labels=["request"])
        for key in range(COUNTER_API_KEYS):
            if requests[key]:
                family.add_metric([_api_name(key)], int(requests[key]))
        yield family
        errors = self._sum("errors").reshape(COUNTER_API_KEYS, COUNTER_ERROR_CODES)
        family = CounterMetricFamily("kafka_network_requestmetrics_errors",
                                     "Error codes in responses (per partition where the response "
                                     "has partitions), per API and error.",
                                     labels=["request", "error"])
        for key, slot in zip(*np.nonzero(errors), strict=True):
            family.add_metric([_api_name(int(key)), _error_name(int(slot) - 1)], int(errors[key, slot]))
        yield family
        for field, name, doc in (
                ("total_time", "totaltimems", "From the request's decoding to the last byte of "
                 "its answer handed to the socket, per API (ms); Produce: one request in 32 "
                 "timed, and every part below is of the same requests."),
                ("queue_time", "requestqueuetimems", "Produce: from the network worker putting a "
                 "partition's batches on a disk worker's ring to the disk worker taking them; "
                 "other APIs: from decoding to the handler starting on the event loop (ms)."),
                ("local_time", "localtimems", "Produce: the disk worker's append of one "
                 "partition; other APIs: the handler's own work (ms)."),
                ("remote_time", "remotetimems", "Fetch: the long-poll wait for data (ms)."),
                ("response_queue_time", "responsequeuetimems", "From the answer being ready to "
                 "its write starting (behind the connection's earlier answers) (ms)."),
                ("response_send_time", "responsesendtimems", "From the answer's write starting "
                 "to its last byte handed to the kernel; a slow reader makes it grow (ms).")):
            words = self._sum(field).reshape(COUNTER_API_KEYS, HIST_WORDS)
            family = HistogramMetricFamily(f"kafka_network_requestmetrics_{name}", doc,
                                           labels=["request"])
            for key in range(COUNTER_API_KEYS):
                if words[key, :HIST_BUCKETS].any():
                    _histogram(family, [_api_name(key)], words[key])
            yield family
        family = HistogramMetricFamily("kafka_log_logflushstats_logflushrateandtimems",
                                       "Log flushes (fsync) and their time (ms).")
        _histogram(family, [], self._sum("flush_time"))
        yield family

    def _connections(self) -> Iterator[Any]:
        """The connection limits and the request memory bound (Kafka's socket server and
        acceptor metrics)."""
        if self.limits is not None:
            yield GaugeMetricFamily("kafka_server_socketservermetrics_connectioncount",
                                    "Client connections open, every network worker.",
                                    value=self.limits.open_connections())
        for field, name, doc in (
                ("rejected_connections", "kafka_network_socketserver_rejectedconnections",
                 "Connections closed at once: their address held max.connections.per.ip."),
                ("delayed_accepts", "kafka_network_acceptor_acceptorblocked",
                 "Times accepting paused because the broker held max.connections (the new "
                 "connections wait in the backlog)."),
                ("muted_reads", "kafka_network_socketserver_mutedchannels",
                 "Connections muted (not read) because queued.max.request.bytes of requests "
                 "were held unanswered."),
                ("failed_authentications", "kafka_server_socketservermetrics_failedauthentication",
                 "SASL authentications that failed (wrong credentials, unknown mechanism, bad state)."),
                ("failed_handshakes", "kafka_server_socketservermetrics_failedtlshandshake",
                 "TLS handshakes that failed or timed out (untrusted certificate, not TLS)."),
                ("authorization_denials", "kafka_security_authorizermetrics_authorizationdenied",
                 "Requests (and produces' topics, local IPC producers' batches) the ACLs refused.")):
            yield CounterMetricFamily(name, doc, value=int(self._sum(field)[0]))
        yield GaugeMetricFamily("kafka_network_socketserver_memorypoolused", "Bytes of requests "
                                "read and not yet answered, every network worker.",
                                value=int(self._sum("request_memory")[0]))

    # -- gauges read now -----------------------------------------------------------------
    def _controller_and_replicas(self, parts: list) -> tuple[int, int, int, int]:
        """(ActiveControllerCount, OfflinePartitionsCount, UnderReplicatedPartitions,
        UnderMinIsrPartitionCount) as Kafka reports them: the controller gauges on the active
        controller only (a standalone broker is its own), the replica counts over the partitions
        this broker leads."""
        if self.leaders is None:
            return 1, sum(1 for p in parts if p.state == SlotState.OFFLINE), 0, 0
        active = int(self.counters.field("active_controller", [self.cluster_slot])[0])
        offline = 0
        if active and self.metadata is not None:
            offline = sum(1 for t in self.metadata.topics().values()
                          for leader, _epoch in t.values() if leader < 0)
        under = under_min = 0
        for p in parts:
            lead = self.leaders.read(p.slot)
            if lead.role == Role.LEADER and len(lead.isr) < len(lead.replicas):
                under += 1
                # only a short ISR can be under the minimum: the topic's config is read for those
                if len(lead.isr) < self._min_isr(p):
                    under_min += 1
        return active, offline, under, under_min

    def _min_isr(self, p: Any) -> int:
        """The partition's min.insync.replicas: its topic's override (topic.properties in its
        directory, as its disk worker applies it) over the broker's current default."""
        if self.broker_config is None or not 0 <= p.disk < len(self.log_dirs):
            return 1
        try:
            overrides = read_topic_properties(os.path.join(self.log_dirs[p.disk],
                                                           partition_dir_name(p.topic, p.partition)))
            return int(TopicConfig.from_overrides(self.broker_config(), overrides).min_insync_replicas)
        except (OSError, ConfigError):  # deleted meanwhile, or unreadable: its disk worker says so
            return 1

    def _partitions(self, parts: list) -> Iterator[Any]:
        active, offline, under, under_min = self._controller_and_replicas(parts)
        yield GaugeMetricFamily("kafka_controller_kafkacontroller_offlinepartitionscount",
                                "Partitions without a leader (the controller's count; a standalone "
                                "broker is its own controller).", value=offline)
        yield GaugeMetricFamily("kafka_controller_kafkacontroller_activecontrollercount",
                                "1 on the active controller, 0 elsewhere (a standalone broker is "
                                "its own).", value=active)
        yield GaugeMetricFamily("kafka_server_replicamanager_underreplicatedpartitions",
                                "Partitions led here whose ISR is smaller than their replicas.",
                                value=under)
        yield GaugeMetricFamily("kafka_server_replicamanager_underminisrpartitioncount",
                                "Partitions led here whose ISR is smaller than their topic's "
                                "min.insync.replicas (acks=all produces to them are refused).",
                                value=under_min)
        yield GaugeMetricFamily("kafka_server_replicamanager_partitioncount",
                                "Partitions on this broker.", value=len(parts))
        yield GaugeMetricFamily("appliance_coordinators_fenced",
                                "1 while this broker's ZooKeeper session is in doubt and its group "
                                "and transaction coordinators answer NOT_COORDINATOR (lost connection, "
                                "or expired session not yet confirmed by the controller); 0 otherwise "
                                "and standalone.",
                                value=int(self.metadata is not None and self.metadata.fenced))
        labels = ["topic", "partition"]
        size = GaugeMetricFamily("kafka_log_log_size", "Bytes of the partition's segments.",
                                 labels=labels)
        segments = GaugeMetricFamily("kafka_log_log_numlogsegments", "Segments of the partition.",
                                     labels=labels)
        end = GaugeMetricFamily("kafka_log_log_logendoffset", "Log-end offset.", labels=labels)
        start = GaugeMetricFamily("kafka_log_log_logstartoffset", "Log start offset.",
                                  labels=labels)
        for p in sorted(parts, key=lambda p: (p.topic, p.partition)):
            lab = [p.topic, str(p.partition)]
            if 0 <= p.disk < len(self.log_dirs):
                nbytes, count = _log_files(os.path.join(self.log_dirs[p.disk],
                                                        f"{p.topic}-{p.partition}"))
                size.add_metric(lab, nbytes)
                segments.add_metric(lab, count)
            end.add_metric(lab, p.log_end_offset)
            start.add_metric(lab, p.log_start_offset)
        yield from (size, segments, end, start)

    def _group_lag(self, parts: list) -> Iterator[Any]:
        """Named as kafka_exporter names them (Kafka's brokers have no lag metric of their own)."""
        end = {(p.topic, p.partition): p.log_end_offset for p in parts}
        labels = ["consumergroup", "topic", "partition"]
        current = GaugeMetricFamily("kafka_consumergroup_current_offset", "Committed offset of a "
                                    "group in a partition.", labels=labels)
        lag = GaugeMetricFamily("kafka_consumergroup_lag", "Log-end offset minus the group's "
                                "committed offset.", labels=labels)
        for (group, topic, partition), offset in sorted(self.committed.items()):
            leo = end.get((topic, partition))
            if leo is None:
                continue  # a deleted topic's old commits
            lab = [group, topic, str(partition)]
            current.add_metric(lab, offset)
            lag.add_metric(lab, max(leo - offset, 0))
        yield from (current, lag)

    def _workers(self) -> Iterator[Any]:
        labels = ["kind", "worker"]
        cpu = CounterMetricFamily("appliance_worker_cpu_seconds", "CPU time of each worker "
                                  "process (user + system).", labels=labels)
        rss = GaugeMetricFamily("appliance_worker_resident_memory_bytes", "Resident memory of "
                                "each worker process.", labels=labels)
        idle = GaugeMetricFamily("kafka_network_processor_idlepercent", "Share of wall time a "
                                 "network worker was not on a CPU since the previous scrape "
                                 "(0..1).", labels=["networkProcessor"])
        indexes = defaultdict(int)
        for slot in self.worker_slots:
            pid, _beat, state, kind, _inc = self.table.worker(slot)
            index = indexes[kind]
            indexes[kind] += 1
            if pid <= 0 or state not in (WorkerState.STARTING, WorkerState.READY):
                continue
            try:
                proc = psutil.Process(pid)
                with proc.oneshot():
                    times = proc.cpu_times()
                    mem = proc.memory_info().rss
            except psutil.Error:
                continue
            lab = [_KIND.get(kind, str(kind)), str(index)]
            used = times.user + times.system
            cpu.add_metric(lab, used)
            rss.add_metric(lab, mem)
            if kind == 1:
                now = time.monotonic()
                before = self._cpu_seen.get(pid)
                self._cpu_seen[pid] = (now, used)
                if before is not None and now > before[0]:
                    share = (used - before[1]) / (now - before[0])
                    idle.add_metric([str(index)], min(max(1.0 - share, 0.0), 1.0))
        yield from (cpu, rss, idle)

