"""The rows a read produces: the schema of Spark's own Kafka source, as Spark and as Arrow.

``key binary, value binary, topic string, partition int, offset long, timestamp timestamp,
timestampType int`` plus ``headers array<struct<key: string, value: binary>>`` with
includeHeaders=true. The Arrow schema is derived from the Spark one with Spark's own converter,
so the batches a reader yields match what the JVM side checks them against.
"""

from __future__ import annotations

import functools

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

__all__ = ["spark_schema", "arrow_schema", "TIMESTAMP_TYPE_CREATE", "TIMESTAMP_TYPE_LOG_APPEND",
           "TIMESTAMP_TYPE_NONE"]

TIMESTAMP_TYPE_CREATE = 0
TIMESTAMP_TYPE_LOG_APPEND = 1
#: Magic 0 records (a pre-0.10 message format) carry no timestamp: Kafka's consumer reports
#: NO_TIMESTAMP_TYPE (-1) and timestamp -1, which Spark's Kafka source passes on as
#: timestampType -1 and the instant 1 ms before the epoch.
TIMESTAMP_TYPE_NONE = -1

_BASE = (
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
)
_HEADERS = StructField("headers", ArrayType(StructType([
    StructField("key", StringType()), StructField("value", BinaryType())])))


def spark_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema (with the headers column when ``include_headers``)."""
    return StructType(list(_BASE) + ([_HEADERS] if include_headers else []))


@functools.lru_cache(maxsize=2)
def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema Spark expects for :func:`spark_schema` (timestamps in UTC micros)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema(include_headers), timezone="UTC")
