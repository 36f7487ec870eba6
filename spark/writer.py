"""Writing a DataFrame to topics through the broker (Kafka Produce), like Spark's Kafka sink.

Columns: ``value`` (binary or string, required), ``key`` (binary or string, optional),
``topic`` (string; required unless the ``topic`` option is set, which then wins), ``partition``
(int, optional) and ``headers`` (array<struct<key: string, value: binary>>, optional). Other
columns are ignored, as Spark's Kafka sink ignores them. Delivery is at least once: a task that
is retried may write its records again, exactly as with Spark's Kafka sink. Streaming writes
with ``exactlyOnce=true`` go through :mod:`spark.eos_writer` instead.

One writer object per task (Spark pickles it to each executor).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructType,
)

from appliance.errors import InvalidConfigError
from spark.options import WriteOptions
from spark.producer import Producer

__all__ = ["ApplianceWriter", "ApplianceStreamWriter", "WriteResult", "check_write_schema",
           "send_batches"]

_BYTES = (BinaryType, StringType)


@dataclass
class WriteResult(WriterCommitMessage):
    records: int


def _is_headers_type(dt) -> bool:
    if not isinstance(dt, ArrayType) or not isinstance(dt.elementType, StructType):
        return False
    fields = {f.name: f.dataType for f in dt.elementType.fields}
    return (set(fields) == {"key", "value"} and isinstance(fields["key"], StringType)
            and isinstance(fields["value"], _BYTES))


def check_write_schema(schema: StructType, opts: WriteOptions) -> None:
    """Raise InvalidConfigError naming the column when the DataFrame cannot be written."""
    cols = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in cols:
        raise InvalidConfigError("the DataFrame to write needs a 'value' column "
                                 f"(binary or string); it has {', '.join(schema.fieldNames())}")
    for name in ("key", "value"):
        if name in cols and not isinstance(cols[name], _BYTES):
            raise InvalidConfigError(f"column {name!r} must be binary or string, not "
                                     f"{cols[name].simpleString()}")
    if opts.topic is None:
        if "topic" not in cols:
            raise InvalidConfigError("no topic: set the 'topic' option or give the DataFrame a "
                                     "string 'topic' column")
        if not isinstance(cols["topic"], StringType):
            raise InvalidConfigError(f"column 'topic' must be a string, not "
                                     f"{cols['topic'].simpleString()}")
    if "partition" in cols and not isinstance(cols["partition"], IntegerType):
        raise InvalidConfigError(f"column 'partition' must be an int, not "
                                 f"{cols['partition'].simpleString()}")
    if "headers" in cols and not _is_headers_type(cols["headers"]):
        raise InvalidConfigError("column 'headers' must be array<struct<key: string, value: "
                                 f"binary>>, not {cols['headers'].simpleString()}")


def _as_bytes(v):
    return v.encode() if isinstance(v, str) else v


def send_batches(producer: Producer, opts: WriteOptions, batches: Iterator[pa.RecordBatch]) -> None:
    """Queue every row of ``batches`` on ``producer`` (the caller flushes)."""
    for rb in batches:
        names = {n.lower(): i for i, n in enumerate(rb.schema.names)}
        n = rb.num_rows

        def col(name, names=names, rb=rb, n=n):
            i = names.get(name)
            return rb.column(i).to_pylist() if i is not None else [None] * n

        values, keys = col("value"), col("key")
        topics = [opts.topic] * n if opts.topic else col("topic")
        parts, headers = col("partition"), col("headers")
        for i in range(n):
            topic = topics[i]
            if not topic:
                raise InvalidConfigError(f"row {i} of a batch has a null or empty topic")
            hs = headers[i] or ()
            producer.send(topic, _as_bytes(keys[i]), _as_bytes(values[i]),
                          [(h["key"], _as_bytes(h["value"])) for h in hs], parts[i])


def _write_batches(opts: WriteOptions, batches: Iterator[pa.RecordBatch]) -> int:
    producer = Producer(opts.bootstrap_servers, acks=opts.acks, compression=opts.compression,
                        batch_records=opts.batch_records, timeout_ms=opts.timeout_ms)
    try:
        send_batches(producer, opts, batches)
        producer.flush()
        return producer.sent
    finally:
        producer.close()


class ApplianceWriter(DataSourceArrowWriter):
    """Batch writes: each task produces its rows and reports how many it sent."""

    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        check_write_schema(schema, opts)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        return WriteResult(_write_batches(self.opts, iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Produce requests were acknowledged per task: nothing left to do."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Records already acknowledged cannot be taken back (at-least-once, as Kafka's sink)."""


class ApplianceStreamWriter(DataSourceStreamArrowWriter):
    """Streaming writes (e.g. topic -> filter -> topic): same as :class:`ApplianceWriter`."""

    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        check_write_schema(schema, opts)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        return WriteResult(_write_batches(self.opts, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Nothing to do: every task's records were acknowledged before it finished."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Acknowledged records stay (at-least-once)."""
