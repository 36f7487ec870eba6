"""The ``appliance`` PySpark data source: batch and streaming reads in place, writes over Kafka.

Register it once per session, then use it like Spark's Kafka source::

    from spark import ApplianceDataSource
    spark.dataSource.register(ApplianceDataSource)
    df = (spark.read.format("appliance").option("log.dirs", "/data/d0,/data/d1")
          .option("subscribe", "events").option("shm.name", "appliance-b0-p9092").load())

With ``log.dirs`` only, reads never go through the broker: the driver plans offset ranges from
the partition directories and the high watermarks (shared partition table, or checkpoint files
when no broker runs), and each task mmaps the segment files and yields Arrow record batches.
With ``kafka.bootstrap.servers`` the driver plans from the broker (Metadata, ListOffsets) and
each task reads in place when the partition's log is on its host, else fetches it (Fetch, below
the high watermark) and decodes it with the same kernel; it logs which (:mod:`spark.progress`).
Writes go through
the broker (Kafka Produce) from one writer per task.

Spark instantiates these classes in its Python workers; each object lives in one worker and is
used by one thread at a time.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from appliance.errors import InvalidConfigError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from spark.arrow_reader import read_range
from spark.catalog import Catalog, load_catalog
from spark.options import (
    ReadOptions,
    bool_option,
    parse_read_options,
    parse_write_options,
)
from spark.planning import (
    TopicRange,
    _check_json_covers,
    check_data_loss,
    offsets_json,
    resolve_offsets,
    resolve_start,
    select_partitions,
    split_ranges,
)
from spark.progress import IN_PLACE, REMOTE, ReadStats, progress_log
from spark.schema import arrow_schema, spark_schema

__all__ = ["ApplianceDataSource", "ApplianceBatchReader", "ApplianceStreamReader"]

log = logging.getLogger(__name__)
#: bytes per Fetch of the remote path (the broker's default message.max.bytes order of size)
_MAX_FETCH_BYTES = 4 << 20


def _load_catalog(opts: ReadOptions) -> tuple[Catalog, tuple[int, ...]]:
    """The catalog the driver plans from, and the broker ids at the bootstrap server (if any)."""
    if not opts.remote:
        return load_catalog(opts.log_dirs, opts.shm_name, opts.read_committed), ()
    # Imported here: Python workers that only read in place skip the client's import time.
    from spark.broker_catalog import BrokerView, broker_catalog

    view = BrokerView(opts.bootstrap_servers, opts.request_timeout_ms)
    try:
        catalog = broker_catalog(view, opts.log_dirs, opts.shm_name, opts.read_committed)
        return catalog, view.broker_ids
    finally:
        view.close()


def _local_path(opts: ReadOptions, r: TopicRange) -> str | None:
    """The partition's directory on this host to read in place, or None to fetch it.

    With ``kafka.bootstrap.servers``: only a replica that was in the ISR at planning, owned by
    a broker of the cluster (:mod:`spark.replicas`); with ``log.dirs`` only: whatever is there.
    """
    if opts.remote and r.replicas:
        from spark.replicas import choose_replica, local_replicas

        here = local_replicas(opts.log_dirs, r.topic, r.partition)
        chosen = choose_replica(here, r.isr, r.leader, len(r.replicas))
        if chosen is None and here:
            log.warning("%s-%d: the local replica(s) %s are not in the ISR %s at planning: "
                        "reading from the leader at %s", r.topic, r.partition,
                        ", ".join(f"{x.path} (broker {x.broker_id})" for x in here),
                        list(r.isr), opts.bootstrap_servers)
        return chosen.path if chosen else None
    candidates = [r.path] if r.path else []
    candidates += [os.path.join(d, f"{r.topic}-{r.partition}") for d in opts.log_dirs]
    path = next((c for c in candidates if c and os.path.isdir(c)), None)
    if path is None or not opts.remote or not r.brokers:
        return path
    from spark.broker_catalog import local_broker_id

    local = local_broker_id(opts.log_dirs, opts.shm_name)
    if local is not None and local[0] not in r.brokers:
        log.warning("%s holds %s-%d of broker %d, not of the broker(s) %s at %s: reading over "
                    "the network", path, r.topic, r.partition, local[0], list(r.brokers),
                    opts.bootstrap_servers)
        return None
    return path


def _read(opts: ReadOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, TopicRange):
        return iter(())  # Spark hands over InputPartition(None) when planning found nothing
    return _read_range(opts, partition)


def _read_range(opts: ReadOptions, r: TopicRange) -> Iterator[pa.RecordBatch]:
    """In place when the partition's log is on this host, else over the Kafka protocol; in
    cluster mode a local replica that ends below the planned end has its tail fetched."""
    path = _local_path(opts, r)
    if path is None and not opts.remote:
        raise UnknownTopicOrPartitionError(
            f"{r.topic}-{r.partition}: not in log.dirs {','.join(opts.log_dirs)} on host "
            f"{socket.gethostname()} (this executor is not on the broker's host?); set "
            "kafka.bootstrap.servers to read it through the broker")
    stats = ReadStats(r.topic, r.partition, r.start, r.end, IN_PLACE if path else REMOTE,
                      opts.progress_interval_ms)
    progress_log.info("appliance read %s-%d [%d, %d) %s %s", r.topic, r.partition, r.start,
                      r.end, stats.how, path or f"from {opts.bootstrap_servers}")
    schema = arrow_schema(opts.include_headers)
    start = r.start
    if path:
        start = yield from read_range(path, r.topic, r.partition, r.start, r.end,
                                      include_headers=opts.include_headers,
                                      fail_on_data_loss=opts.fail_on_data_loss,
                                      chunk_bytes=opts.chunk_bytes, schema=schema, stats=stats,
                                      read_committed=opts.read_committed)
        if start < r.end and opts.remote:
            progress_log.info("appliance read %s-%d: %s ends at offset %d, below the planned "
                              "end %d: fetching the rest from %s", r.topic, r.partition, path,
                              start, r.end, opts.bootstrap_servers)
            stats.how = f"{IN_PLACE}+{REMOTE}"
    if start < r.end and (path is None or opts.remote):
        from spark.broker_catalog import BrokerView
        from spark.remote_reader import fetch_range

        view = BrokerView(opts.bootstrap_servers, opts.request_timeout_ms)
        try:
            yield from fetch_range(view, r.topic, r.partition, start, r.end,
                                   include_headers=opts.include_headers,
                                   fail_on_data_loss=opts.fail_on_data_loss,
                                   chunk_bytes=min(opts.chunk_bytes, _MAX_FETCH_BYTES),
                                   schema=schema, stats=stats, rack=opts.client_rack,
                                   read_committed=opts.read_committed)
        finally:
            view.close()
    stats.done()


def _plan(opts: ReadOptions, plans, brokers: tuple[int, ...]) -> list[InputPartition]:
    ranges = split_ranges(plans, opts.min_partitions)
    for r in ranges:
        r.brokers = brokers  # leader, ISR and replicas came with the partition's state
    return list(ranges)


class ApplianceDataSource(DataSource):
    """Format ``appliance``. Options: see :mod:`spark.options` and ``spark/README.md``."""

    @classmethod
    def name(cls) -> str:
        return "appliance"

    def schema(self) -> StructType:
        return spark_schema(bool_option(self.options, "includeHeaders", False))

    def reader(self, schema: StructType) -> DataSourceReader:
        """Raises InvalidConfigError for bad options."""
        return ApplianceBatchReader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """Raises InvalidConfigError for bad options."""
        return ApplianceStreamReader(parse_read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool):
        from spark.writer import ApplianceWriter

        opts = parse_write_options(self.options)
        if opts.exactly_once:
            raise InvalidConfigError("option exactlyOnce=true is for streaming writes "
                                     "(writeStream); a batch write has no micro-batch to commit")
        return ApplianceWriter(opts, schema)

    def streamWriter(self, schema: StructType, overwrite: bool):
        opts = parse_write_options(self.options)
        if opts.exactly_once:
            from spark.eos_writer import ExactlyOnceStreamWriter

            return ExactlyOnceStreamWriter(opts, schema)
        from spark.writer import ApplianceStreamWriter

        return ApplianceStreamWriter(opts, schema)


class ApplianceBatchReader(DataSourceReader):
    """Plans one task per partition range (more with minPartitions); reads Arrow batches."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[InputPartition]:
        """Raises KafkaStorageError, UnknownTopicOrPartitionError, InvalidConfigError,
        OffsetOutOfRangeError (see :func:`spark.planning.resolve_offsets`)."""
        opts = self.opts
        catalog, brokers = _load_catalog(opts)
        plans = resolve_offsets(opts, catalog)
        return _plan(opts, [(p.state, p.start, p.end) for p in plans], brokers)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.opts, partition)


def _parse_offsets(doc: dict) -> dict[tuple[str, int], int]:
    return {(t, int(p)): int(o) for t, parts in doc.items() for p, o in parts.items()}


class ApplianceStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of offset ranges; offsets are Spark's Kafka JSON ({"t": {"0": 23}}).

    New partitions (and topics matching subscribePattern) start at their earliest offset, as in
    Spark. maxOffsetsPerTrigger caps each micro-batch, shared among partitions by backlog.
    """

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._cap: dict[tuple[str, int], int] | None = None  # Trigger.AvailableNow snapshot
        self._brokers: tuple[int, ...] = ()

    def _states(self):
        catalog, self._brokers = _load_catalog(self.opts)
        return {(s.topic, s.partition): s for s in select_partitions(self.opts, catalog)}

    def initialOffset(self) -> dict:
        states = self._states()
        spec = self.opts.starting
        if spec.kind in ("offsets", "timestamps"):
            _check_json_covers(spec, "startingOffsets", list(states.values()))
        return offsets_json({tp: resolve_start(spec, s, self.opts) for tp, s in states.items()})

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_offsets_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def prepareForTriggerAvailableNow(self) -> None:
        self._cap = {tp: s.end for tp, s in self._states().items()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        states = self._states()
        begin = _parse_offsets(start or {})
        latest: dict[tuple[str, int], int] = {}
        for tp, s in states.items():
            hw = s.end
            if self._cap is not None:
                hw = min(hw, self._cap.get(tp, s.earliest))
            a = begin.get(tp, s.earliest)
            latest[tp] = max(a, hw)
        if isinstance(limit, ReadMaxRows):
            latest = _rate_limit(begin, latest, states, limit.max_rows)
        # Partitions that vanished (topic deleted) keep their offset; partitions() reports them.
        for tp, o in begin.items():
            latest.setdefault(tp, o)
        return offsets_json(latest)

    def reportLatestOffset(self) -> dict | None:
        return offsets_json({tp: s.end for tp, s in self._states().items()})

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        """Raises OffsetOutOfRangeError on data loss with failOnDataLoss."""
        states = self._states()
        begin, stop = _parse_offsets(start or {}), _parse_offsets(end)
        plans = []
        for tp, b in sorted(stop.items()):
            s = states.get(tp)
            if s is None:
                if self.opts.fail_on_data_loss:
                    raise OffsetOutOfRangeError(
                        f"{tp[0]}-{tp[1]}: the partition is gone from log.dirs (topic "
                        "deleted?); set failOnDataLoss=false to skip it")
                continue
            a = begin.get(tp, s.earliest)
            if b <= a:
                continue
            a = check_data_loss(s, a, self.opts.fail_on_data_loss)
            if b > a:
                plans.append((s, a, b))
        return _plan(self.opts, plans, self._brokers)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.opts, partition)

    def commit(self, end: dict) -> None:
        """Nothing to release: the segment files belong to the broker."""


def _rate_limit(begin, latest, states, max_rows: int) -> dict[tuple[str, int], int]:
    """Cap the total offsets of a micro-batch at ``max_rows``, shared by backlog size."""
    backlog = {tp: latest[tp] - begin.get(tp, states[tp].earliest) for tp in latest}
    total = sum(v for v in backlog.values() if v > 0)
    if total <= max_rows:
        return latest
    out = {}
    given = 0
    for tp in sorted(latest):
        a = begin.get(tp, states[tp].earliest)
        share = backlog[tp] * max_rows // total if backlog[tp] > 0 else 0
        given += share
        out[tp] = a + share
    # Hand out what integer division left over, so a micro-batch is never empty.
    left = max_rows - given
    for tp in sorted(latest, key=lambda k: -backlog[k]):
        if left <= 0:
            break
        a = out[tp]
        extra = min(left, latest[tp] - a)
        out[tp] = a + extra
        left -= extra
    return out
